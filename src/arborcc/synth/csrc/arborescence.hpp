// Minimum-cost spanning arborescence of a dense digraph (Chu-Liu/Edmonds), the tree
// oracle of arborcc.synth.packing: each vertex takes its cheapest in-arc, every cycle so
// formed is contracted (entering arcs reduced by the in-arc they replace) and the
// contracted graph solved the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace synth {

using std::size_t;

using Costs = std::vector<std::vector<double>>;  // cost[u][v]: arc u -> v (infinity: none)

// parent[v] of every vertex (parent[root] = -1); when some vertex cannot be reached,
// returns an empty vector and sets `unreachable` to it (numbered in the graph where
// it was found, as a contraction numbers them).
std::vector<int64_t> min_arborescence(const Costs& cost, int64_t root, int64_t& unreachable);

}  // namespace synth
