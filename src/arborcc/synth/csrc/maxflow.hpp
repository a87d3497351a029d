// Integer maximum flows and the source side of the minimum cut closest to the source,
// for the parametric ratio cut of arborcc.synth.flowgraph (the all-gather, reduce-
// scatter, gather and scatter bounds). Dinic's blocking flows (E. A. Dinic, "Algorithm
// for solution of a problem of maximum flow in networks with power estimation", Soviet
// Math. Doklady 11, 1970). The source side - what the source reaches in the residual
// graph - is the same for every maximum flow, so it does not depend on the algorithm.

#pragma once

#include <cstdint>
#include <vector>

namespace synth {

class FlowNetwork {
 public:
  // arc i goes src[i] -> dst[i] (parallel arcs allowed)
  FlowNetwork(int64_t nodes, const std::vector<int64_t>& src, const std::vector<int64_t>& dst);

  int64_t nodes() const { return nodes_; }
  int64_t arcs() const { return arcs_; }

  // the maximum flow from s to t under capacities cap[i] (>= 0) per arc; leaves the
  // residual graph for source_side
  int64_t max_flow(const int64_t* cap, int64_t s, int64_t t);

  // side[v] = 1 if s reaches v in the residual graph of the last max_flow
  void source_side(int64_t s, uint8_t* side);

 private:
  bool levels(int64_t s, int64_t t);
  int64_t augment(int64_t v, int64_t t, int64_t limit);

  int64_t nodes_, arcs_;
  std::vector<int32_t> start_, edge_;  // edges leaving node v: edge_[start_[v]:start_[v + 1]]
  std::vector<int32_t> to_;            // edge 2i: arc i forward, edge 2i + 1: its reverse
  std::vector<int64_t> residual_;
  std::vector<int32_t> level_, next_, queue_;
};

}  // namespace synth
