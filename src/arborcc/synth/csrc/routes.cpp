// Cheapest routes and trees of the packing's pricing oracle (routes.hpp).

#include "routes.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace synth {

namespace {

constexpr double INF = std::numeric_limits<double>::infinity();
constexpr int32_t NO_PRED = -9999;  // scipy's mark for "no predecessor"

}  // namespace

RouteGraph::RouteGraph(int64_t size, int64_t n, std::vector<int64_t> rank_nodes, const std::vector<int64_t>& src,
                       const std::vector<int64_t>& head)
    : size_(size), n_(n), arcs_((int64_t)src.size()), rank_nodes_(std::move(rank_nodes)) {
  if (head.size() != src.size()) throw std::invalid_argument("src and head differ in length");
  for (size_t e = 0; e < src.size(); ++e)
    if (src[e] < 0 || src[e] >= size || head[e] < 0 || head[e] >= size)
      throw std::invalid_argument("arc end outside the graph");
  // CSR by tail, then head (a stable order for parallel arcs)
  std::vector<int64_t> order(src.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return src[a] != src[b] ? src[a] < src[b] : head[a] < head[b];
  });
  indptr_.assign((size_t)size + 1, 0);
  for (int64_t e : order) indptr_[(size_t)src[e] + 1] += 1;
  for (int64_t v = 0; v < size; ++v) indptr_[(size_t)v + 1] += indptr_[(size_t)v];
  heads_.reserve(order.size());
  arc_of_slot_.reserve(order.size());
  for (int64_t e : order) {
    heads_.push_back((int32_t)head[e]);
    arc_of_slot_.push_back(e);
  }
  weight_.resize(order.size());
  full_dist_.resize((size_t)size);
}

void RouteGraph::dijkstra(int64_t source, const std::vector<double>& weight, double* dist, int32_t* pred) {
  std::fill(dist, dist + size_, INF);
  std::fill(pred, pred + size_, NO_PRED);
  heap_ = {};
  dist[source] = 0.0;
  heap_.push({-0.0, (uint32_t)source});
  while (!heap_.empty()) {
    const double d = -heap_.top().first;
    const uint32_t v = heap_.top().second;
    heap_.pop();
    if (dist[v] < d) continue;  // settled earlier at a shorter distance
    for (int32_t j = indptr_[v]; j < indptr_[v + 1]; ++j) {
      const int32_t u = heads_[(size_t)j];
      const double next = d + weight[(size_t)j];
      if (next <= INF && dist[u] > next) {
        dist[u] = next;
        heap_.push({-next, (uint32_t)u});
        pred[u] = (int32_t)v;
      }
    }
  }
}

void RouteGraph::routes(const double* length, double tiny, std::vector<double>& dist, std::vector<int32_t>& pred) {
  const int64_t N = ranks();
  for (size_t j = 0; j < weight_.size(); ++j) weight_[j] = length[arc_of_slot_[j]] + tiny;
  dist.assign((size_t)(N * N), INF);
  pred.assign((size_t)(N * size_), NO_PRED);
  for (int64_t k = 0; k < N; ++k) {
    dijkstra(rank_nodes_[(size_t)k], weight_, full_dist_.data(), pred.data() + k * size_);
    std::copy(full_dist_.begin() + n_, full_dist_.begin() + n_ + N, dist.begin() + k * N);
  }
}

int64_t RouteGraph::arc_between(int64_t tail, int64_t head) const {
  for (int32_t j = indptr_[(size_t)tail]; j < indptr_[(size_t)tail + 1]; ++j)
    if (heads_[(size_t)j] == head) return arc_of_slot_[(size_t)j];
  throw std::logic_error("no arc between route nodes");
}

CheapestTree RouteGraph::tree(const std::vector<int32_t>& pred, int64_t root, TreeFailure& failure) {
  const int64_t N = ranks();
  CheapestTree out;
  out.root = root;
  if (N > 1) {
    bool reaches = false;
    for (int64_t j = 0; j < N; ++j)
      if (j != root && !std::isinf(costs_[(size_t)root][(size_t)j])) reaches = true;
    if (!reaches) {
      failure = TreeFailure::reaches_no_rank;
      return out;
    }
  }
  int64_t unreachable = -1;
  const std::vector<int64_t> parent = min_arborescence(costs_, root, unreachable);
  if (parent.empty()) {
    failure = TreeFailure::some_unreached;
    return out;
  }
  out.load.assign((size_t)arcs_, 0.0);
  for (int64_t v = 0; v < N; ++v) {
    const int64_t u = parent[(size_t)v];
    if (u < 0) continue;
    Hop hop{u, v, {}};
    const int32_t* row = pred.data() + u * size_;
    for (int64_t node = n_ + v, from = rank_nodes_[(size_t)u]; node != from;) {
      const int64_t p = row[node];
      if (p < 0) throw std::logic_error("a tree hop without a route");
      hop.arcs.push_back(arc_between(p, node));
      node = p;
    }
    std::reverse(hop.arcs.begin(), hop.arcs.end());
    for (int64_t e : hop.arcs) out.load[(size_t)e] += 1.0;
    out.hops.push_back(std::move(hop));
  }
  return out;
}

std::vector<CheapestTree> RouteGraph::cheapest_trees(const double* length, double tiny,
                                                     const std::vector<int64_t>& roots, TreeFailure& failure,
                                                     int64_t& failed_root) {
  std::vector<double> dist;
  std::vector<int32_t> pred;
  routes(length, tiny, dist, pred);
  const int64_t N = ranks();  // the arborescence's costs: the route lengths, the same for every root
  costs_.assign((size_t)N, std::vector<double>((size_t)N));
  for (int64_t k = 0; k < N; ++k)
    std::copy(dist.begin() + k * N, dist.begin() + (k + 1) * N, costs_[(size_t)k].begin());
  std::vector<CheapestTree> out;
  failure = TreeFailure::none;
  for (int64_t r : roots) {
    out.push_back(tree(pred, r, failure));
    if (failure != TreeFailure::none) {
      failed_root = r;
      return {};
    }
  }
  return out;
}

std::vector<CheapestTree> RouteGraph::seed_trees(const double* cap, double tiny, const std::vector<int64_t>& roots,
                                                 int64_t per_root, TreeFailure& failure, int64_t& failed_root) {
  std::vector<double> length((size_t)arcs_);
  double smallest = INF;
  for (int64_t e = 0; e < arcs_; ++e) {
    length[(size_t)e] = 1.0 / cap[e];
    smallest = std::min(smallest, cap[e]);
  }
  std::vector<CheapestTree> out;
  for (int64_t round = 0; round < per_root; ++round) {
    for (int64_t r : roots) {
      std::vector<CheapestTree> one = cheapest_trees(length.data(), tiny, {r}, failure, failed_root);
      if (failure != TreeFailure::none) return {};
      const std::vector<double>& load = one[0].load;
      for (int64_t e = 0; e < arcs_; ++e)
        length[(size_t)e] = length[(size_t)e] * (1.0 + load[(size_t)e] / cap[e] * smallest);
      out.push_back(std::move(one[0]));
    }
  }
  return out;
}

}  // namespace synth
