// Chu-Liu/Edmonds minimum arborescence (arborcc.synth.packing's oracle); the same
// visiting order and strict comparisons as the algorithm's statement there, so ties
// break the same way.

#include "arborescence.hpp"

#include <cstddef>
#include <limits>
#include <utility>

namespace synth {

namespace {

constexpr double INF = std::numeric_limits<double>::infinity();

// A cycle number per vertex of the parent pointers (-1 off cycles), and how many.
int64_t cycles(const std::vector<int64_t>& par, std::vector<int64_t>& cycle) {
  const size_t n = par.size();
  cycle.assign(n, -1);
  std::vector<int64_t> state(n, -1);
  int64_t ncyc = 0;
  for (size_t v = 0; v < n; ++v) {
    int64_t u = (int64_t)v;
    while (u != -1 && state[(size_t)u] == -1) {
      state[(size_t)u] = (int64_t)v;
      u = par[(size_t)u];
    }
    if (u != -1 && state[(size_t)u] == (int64_t)v && cycle[(size_t)u] == -1) {
      int64_t w = u;
      do {
        cycle[(size_t)w] = ncyc;
        w = par[(size_t)w];
      } while (w != u);
      ++ncyc;
    }
  }
  return ncyc;
}

}  // namespace

std::vector<int64_t> min_arborescence(const Costs& cost, int64_t root, int64_t& unreachable) {
  const size_t n = cost.size();
  if (n == 1) return {-1};
  std::vector<int64_t> par(n, -1);
  std::vector<double> best(n, 0.0);
  for (size_t v = 0; v < n; ++v) {
    if ((int64_t)v == root) continue;
    double b = INF;
    int64_t p = -1;
    for (size_t u = 0; u < n; ++u)
      if (u != v && cost[u][v] < b) b = cost[u][v], p = (int64_t)u;
    if (p < 0) {
      unreachable = (int64_t)v;
      return {};
    }
    par[v] = p, best[v] = b;
  }
  std::vector<int64_t> cycle;
  const int64_t ncyc = cycles(par, cycle);
  if (ncyc == 0) return par;
  // contract: vertices off cycles first, then one vertex per cycle
  std::vector<int64_t> comp(n, 0);
  int64_t k = 0;
  for (size_t v = 0; v < n; ++v)
    if (cycle[v] < 0) comp[v] = k++;
  for (size_t v = 0; v < n; ++v)
    if (cycle[v] >= 0) comp[v] = k + cycle[v];
  const size_t m = (size_t)(k + ncyc);
  Costs small(m, std::vector<double>(m, INF));
  std::vector<std::pair<int64_t, int64_t>> origin(m * m, {-1, -1});
  // entering a cycle at v replaces v's cycle arc: reduce costs by that arc's cost
  std::vector<double> enter(n, 0.0);
  for (size_t v = 0; v < n; ++v)
    if (cycle[v] >= 0) enter[v] = best[v];
  for (size_t u = 0; u < n; ++u) {
    const size_t cu = (size_t)comp[u];
    for (size_t v = 0; v < n; ++v) {
      const size_t cv = (size_t)comp[v];
      const double c = cost[u][v];
      if (cu != cv && c != INF && c - enter[v] < small[cu][cv]) {
        small[cu][cv] = c - enter[v];
        origin[cu * m + cv] = {(int64_t)u, (int64_t)v};
      }
    }
  }
  const std::vector<int64_t> spar = min_arborescence(small, comp[(size_t)root], unreachable);
  if (spar.empty()) return {};
  std::vector<int64_t> result = par;
  for (size_t b = 0; b < m; ++b) {
    if (spar[b] >= 0) {
      const auto [u, v] = origin[(size_t)spar[b] * m + b];
      result[(size_t)v] = u;  // for a cycle: v's cycle arc is dropped, the rest stay
    }
  }
  result[(size_t)root] = -1;
  return result;
}

}  // namespace synth
