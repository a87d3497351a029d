// Dinic's maximum flow and the residual source side (maxflow.hpp).

#include "maxflow.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace synth {

FlowNetwork::FlowNetwork(int64_t nodes, const std::vector<int64_t>& src, const std::vector<int64_t>& dst)
    : nodes_(nodes), arcs_((int64_t)src.size()) {
  if (dst.size() != src.size()) throw std::invalid_argument("src and dst differ in length");
  if (nodes < 0 || 2 * src.size() > (size_t)std::numeric_limits<int32_t>::max())
    throw std::invalid_argument("network too large");
  start_.assign((size_t)nodes + 1, 0);
  to_.resize(2 * src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] < 0 || src[i] >= nodes || dst[i] < 0 || dst[i] >= nodes)
      throw std::invalid_argument("arc end outside the network");
    to_[2 * i] = (int32_t)dst[i];
    to_[2 * i + 1] = (int32_t)src[i];
    start_[(size_t)src[i] + 1] += 1;
    start_[(size_t)dst[i] + 1] += 1;
  }
  for (int64_t v = 0; v < nodes; ++v) start_[(size_t)v + 1] += start_[(size_t)v];
  edge_.resize(2 * src.size());
  std::vector<int32_t> fill(start_.begin(), start_.end() - 1);
  for (size_t i = 0; i < src.size(); ++i) {
    edge_[(size_t)fill[(size_t)src[i]]++] = (int32_t)(2 * i);
    edge_[(size_t)fill[(size_t)dst[i]]++] = (int32_t)(2 * i + 1);
  }
  residual_.resize(2 * src.size());
  level_.resize((size_t)nodes);
  next_.resize((size_t)nodes);
  queue_.resize((size_t)nodes);
}

bool FlowNetwork::levels(int64_t s, int64_t t) {
  std::fill(level_.begin(), level_.end(), -1);
  size_t head = 0, tail = 0;
  level_[(size_t)s] = 0;
  queue_[tail++] = (int32_t)s;
  while (head < tail) {
    const int32_t v = queue_[head++];
    for (int32_t k = start_[(size_t)v]; k < start_[(size_t)v + 1]; ++k) {
      const int32_t e = edge_[(size_t)k], w = to_[(size_t)e];
      if (residual_[(size_t)e] > 0 && level_[(size_t)w] < 0) {
        level_[(size_t)w] = level_[(size_t)v] + 1;
        queue_[tail++] = w;
      }
    }
  }
  return level_[(size_t)t] >= 0;
}

int64_t FlowNetwork::augment(int64_t v, int64_t t, int64_t limit) {
  if (v == t) return limit;
  for (int32_t& k = next_[(size_t)v]; k < start_[(size_t)v + 1]; ++k) {
    const int32_t e = edge_[(size_t)k], w = to_[(size_t)e];
    if (residual_[(size_t)e] <= 0 || level_[(size_t)w] != level_[(size_t)v] + 1) continue;
    const int64_t pushed = augment(w, t, std::min(limit, residual_[(size_t)e]));
    if (pushed > 0) {
      residual_[(size_t)e] -= pushed;
      residual_[(size_t)(e ^ 1)] += pushed;
      return pushed;
    }
  }
  return 0;
}

int64_t FlowNetwork::max_flow(const int64_t* cap, int64_t s, int64_t t) {
  if (s < 0 || s >= nodes_ || t < 0 || t >= nodes_) throw std::invalid_argument("source or sink outside the network");
  for (int64_t i = 0; i < arcs_; ++i) {
    if (cap[i] < 0) throw std::invalid_argument("negative capacity");
    residual_[(size_t)(2 * i)] = cap[i];
    residual_[(size_t)(2 * i + 1)] = 0;
  }
  if (s == t) return 0;
  int64_t total = 0;
  while (levels(s, t)) {
    std::copy(start_.begin(), start_.end() - 1, next_.begin());
    while (const int64_t pushed = augment(s, t, std::numeric_limits<int64_t>::max())) total += pushed;
  }
  return total;
}

void FlowNetwork::source_side(int64_t s, uint8_t* side) {
  std::fill(side, side + nodes_, 0);
  size_t head = 0, tail = 0;
  side[s] = 1;
  queue_[tail++] = (int32_t)s;
  while (head < tail) {
    const int32_t v = queue_[head++];
    for (int32_t k = start_[(size_t)v]; k < start_[(size_t)v + 1]; ++k) {
      const int32_t e = edge_[(size_t)k], w = to_[(size_t)e];
      if (residual_[(size_t)e] > 0 && !side[w]) {
        side[w] = 1;
        queue_[tail++] = w;
      }
    }
  }
}

}  // namespace synth
