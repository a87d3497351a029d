// The greedy half of chunk rounding (arborcc.synth.quantize._greedy_counts): each
// leftover chunk of a group goes to the tree whose extra chunk raises the worst link
// utilisation least (ties: the heavier tree, then the earlier one).

#pragma once

#include <cstdint>
#include <vector>

namespace synth {

// groups: tree indices of group g are members[starts[g]:starts[g + 1]]; leftover[g]
// chunks are handed out in group g. step[t * links + l]: utilisation one more chunk of
// tree t adds to link l (links it does not use: 0). counts and util (per link) are
// updated in place.
void hand_out_chunks(const std::vector<int64_t>& members, const std::vector<int64_t>& starts,
                     const std::vector<int64_t>& leftover, const double* weight, const double* step, int64_t links,
                     int64_t* counts, double* util);

}  // namespace synth
