// Cheapest relay-only routes between ranks and cheapest trees over them: the pricing
// oracle of arborcc.synth.packing. The graph is split so that ranks receive but do not
// forward: rank k sends from node rank_nodes[k] and receives at node n + k. Routes are
// Dijkstra's from every rank with the tie-breaking of scipy.sparse.csgraph.dijkstra
// (scipy >= 1.10, which this oracle used before): a lazy binary heap that settles
// equal distances highest node index first, arcs relaxed in CSR order (by tail, then
// head) with a strict comparison - so every route, predecessor and tree is the one
// the scipy-based oracle found.

#pragma once

#include <cstdint>
#include <queue>
#include <utility>
#include <vector>

#include "arborescence.hpp"

namespace synth {

struct Hop {
  int64_t parent, child;         // rank positions
  std::vector<int64_t> arcs;     // arc ids of the route, in order
};

struct CheapestTree {
  int64_t root = 0;
  std::vector<Hop> hops;         // one per rank but the root, by child position
  std::vector<double> load;      // uses of every arc
};

// Why a tree could not be built: the root reaches no other rank, or some rank.
enum class TreeFailure { none, reaches_no_rank, some_unreached };

class RouteGraph {
 public:
  // arc e goes src[e] -> head[e] (heads of arcs into ranks already moved to n + k)
  RouteGraph(int64_t size, int64_t n, std::vector<int64_t> rank_nodes, const std::vector<int64_t>& src,
             const std::vector<int64_t>& head);

  int64_t ranks() const { return (int64_t)rank_nodes_.size(); }
  int64_t nodes() const { return size_; }
  int64_t arcs() const { return arcs_; }

  // dist[k * ranks + j]: cheapest route cost from rank k to rank j under arc lengths
  // `length[e] + tiny`; pred[k * size + v]: the node before v on it (-9999: none)
  void routes(const double* length, double tiny, std::vector<double>& dist, std::vector<int32_t>& pred);

  // the cheapest tree of each root under `length` (the routes shared); on failure,
  // `failure` and `failed_root` say which root and why, and the result is empty
  std::vector<CheapestTree> cheapest_trees(const double* length, double tiny, const std::vector<int64_t>& roots,
                                           TreeFailure& failure, int64_t& failed_root);

  // `per_root` rounds over `roots`, each tree cheapest under lengths that start at
  // 1 / cap and grow on the links it uses by length *= 1 + load / cap * min(cap)
  std::vector<CheapestTree> seed_trees(const double* cap, double tiny, const std::vector<int64_t>& roots,
                                       int64_t per_root, TreeFailure& failure, int64_t& failed_root);

 private:
  void dijkstra(int64_t source, const std::vector<double>& weight, double* dist, int32_t* pred);
  int64_t arc_between(int64_t tail, int64_t head) const;
  // root's cheapest arborescence under costs_ (the route lengths cheapest_trees set)
  CheapestTree tree(const std::vector<int32_t>& pred, int64_t root, TreeFailure& failure);

  int64_t size_, n_, arcs_;
  std::vector<int64_t> rank_nodes_;
  std::vector<int32_t> indptr_, heads_;  // CSR of the split graph
  std::vector<int64_t> arc_of_slot_;     // arc id of each CSR entry
  // (-distance, node): a max-heap that pops the least distance, ties highest node first
  std::priority_queue<std::pair<double, uint32_t>> heap_;
  std::vector<double> weight_, full_dist_;
  Costs costs_;  // rank-to-rank route lengths, set by cheapest_trees for its roots
};

}  // namespace synth
