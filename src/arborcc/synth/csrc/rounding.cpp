// Greedy chunk rounding (rounding.hpp): the same comparisons, in the same order, as the
// Python statement it replaces, so the same tree wins every tie.

#include "rounding.hpp"

#include <algorithm>
#include <stdexcept>

namespace synth {

void hand_out_chunks(const std::vector<int64_t>& members, const std::vector<int64_t>& starts,
                     const std::vector<int64_t>& leftover, const double* weight, const double* step, int64_t links,
                     int64_t* counts, double* util) {
  for (size_t g = 0; g + 1 < starts.size(); ++g) {
    if (leftover[g] > 0 && starts[g] == starts[g + 1]) throw std::invalid_argument("chunks left for an empty group");
    for (int64_t round = 0; round < leftover[g]; ++round) {
      // least (utilisation after, -weight, position in the group)
      int64_t best = -1;
      double best_after = 0.0, best_neg_weight = 0.0;
      for (int64_t i = starts[g]; i < starts[g + 1]; ++i) {
        const int64_t t = members[(size_t)i];
        const double* row = step + t * links;
        double after = 0.0;  // max(initial 0, the links the tree uses)
        for (int64_t l = 0; l < links; ++l)
          if (row[l] > 0) after = std::max(after, util[l] + row[l]);
        const double neg_weight = -weight[t];
        if (best < 0 || after < best_after || (after == best_after && neg_weight < best_neg_weight)) {
          best = t, best_after = after, best_neg_weight = neg_weight;
        }
      }
      counts[best] += 1;
      const double* row = step + best * links;
      for (int64_t l = 0; l < links; ++l) util[l] += row[l];
    }
  }
}

}  // namespace synth
