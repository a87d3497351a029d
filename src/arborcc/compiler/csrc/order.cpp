// The global order's FIFO checks and repair (arborcc.compiler.order): Kahn's algorithm
// three ways, with binary heaps of positions in the priority order.

#include "order.hpp"

#include <algorithm>
#include <functional>
#include <queue>
#include <unordered_map>

namespace compiler {

namespace {

using MinHeap = std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>>;

int64_t max_of(const Ints& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

}  // namespace

Messages messages(const Table& t) {
  const size_t n = t.rank.size();
  const int64_t nr = max_of(t.rank) + 1, nl = max_of(t.lane) + 1;
  Messages m;
  Ints key;
  for (size_t i = 0; i < n; ++i) {
    const int64_t q = t.msg_out[i];
    if (q < 0 || !t.alive[i]) continue;
    m.sender.push_back((int64_t)i);
    m.receiver.push_back(q);
    key.push_back((t.rank[i] * nr + t.rank[(size_t)q]) * nl + t.lane[i]);
  }
  // pairs numbered in the order of their keys: through a table of all keys when there are
  // few (ranks * ranks * lanes), else by sorting the keys used
  m.pair.resize(key.size());
  const uint64_t span = (uint64_t)(nr * nr * nl);
  if (span <= 4 * (uint64_t)key.size() + 4096) {
    Ints number(span, -1);
    for (int64_t k : key) number[(size_t)k] = 0;
    for (int64_t& x : number)
      if (x == 0) x = m.npairs++;
    for (size_t k = 0; k < key.size(); ++k) m.pair[k] = number[(size_t)key[k]];
    return m;
  }
  Ints keys = key;
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  for (size_t k = 0; k < key.size(); ++k)
    m.pair[k] = std::lower_bound(keys.begin(), keys.end(), key[k]) - keys.begin();
  m.npairs = (int64_t)keys.size();
  return m;
}

Ints global_order(const Ints& alive, const Ints& depth, const Ints& rdepth) {
  // one key per instruction: depth, then reverse depth descending (then index)
  const uint64_t span = (uint64_t)max_of(rdepth) + 1;
  auto key = [&](size_t i) { return (uint64_t)depth[i] * span + (rdepth.empty() ? 0 : span - 1 - (uint64_t)rdepth[i]); };
  const size_t n = alive.size();
  const uint64_t keys = ((uint64_t)max_of(depth) + 1) * span;
  Ints order;
  if (keys <= 4 * (uint64_t)n + 1024) {  // few keys (depths are short): a counting sort, stable by index
    Ints start(keys + 1, 0);
    for (size_t i = 0; i < n; ++i)
      if (alive[i]) ++start[key(i) + 1];
    for (size_t k = 0; k < keys; ++k) start[k + 1] += start[k];
    order.resize((size_t)start[keys]);
    for (size_t i = 0; i < n; ++i)
      if (alive[i]) order[(size_t)start[key(i)]++] = (int64_t)i;
    return order;
  }
  std::vector<std::pair<uint64_t, int64_t>> keyed;
  keyed.reserve(n);
  for (size_t i = 0; i < n; ++i)
    if (alive[i]) keyed.emplace_back(key(i), (int64_t)i);
  std::sort(keyed.begin(), keyed.end());
  order.resize(keyed.size());
  for (size_t k = 0; k < keyed.size(); ++k) order[k] = keyed[k].second;
  return order;
}

bool fifo_consistent(const Table& t, const Ints& order) {
  // per pair, the position of the last receive of the messages sent so far
  const int64_t nr = max_of(t.rank) + 1, nl = max_of(t.lane) + 1;
  Ints pos(t.rank.size(), -1);
  for (size_t p = 0; p < order.size(); ++p) pos[(size_t)order[p]] = (int64_t)p;
  std::unordered_map<int64_t, int64_t> last;
  for (int64_t i : order) {
    const size_t ii = (size_t)i;
    const int64_t q = t.msg_out[ii];
    if (q < 0 || !t.alive[ii]) continue;
    const int64_t key = (t.rank[ii] * nr + t.rank[(size_t)q]) * nl + t.lane[ii];
    auto [it, fresh] = last.emplace(key, pos[(size_t)q]);
    if (!fresh) {
      if (pos[(size_t)q] <= it->second) return false;
      it->second = pos[(size_t)q];
    }
  }
  return true;
}

bool slot_safe(const Table& t, const Ints& order, int64_t slots) {
  const int64_t nr = max_of(t.rank) + 1, nl = max_of(t.lane) + 1;
  std::vector<int64_t> inflight((size_t)(nr * nr * nl), 0);
  for (int64_t i : order) {
    const int64_t m = t.msg_in[(size_t)i];
    if (m >= 0) --inflight[(size_t)((t.rank[(size_t)m] * nr + t.rank[(size_t)i]) * nl + t.lane[(size_t)i])];
    const int64_t q = t.msg_out[(size_t)i];
    if (q >= 0) {
      int64_t& c = inflight[(size_t)((t.rank[(size_t)i] * nr + t.rank[(size_t)q]) * nl + t.lane[(size_t)i])];
      if (c >= slots) return false;
      ++c;
    }
  }
  return true;
}

OrderGraph::OrderGraph(const Table& t, const Ints& order, const Rows& preds)
    : n_(t.rank.size()), msg_out_(t.msg_out), msgs_(messages(t)) {
  const Ints& rep = t.rep;
  indeg_.assign(n_, 0);
  Ints count(n_, 0);
  std::vector<std::pair<int64_t, int64_t>> edges;  // (before, after), in the order's order
  edges.reserve(2 * order.size());
  Ints before;
  for (int64_t i : order) {
    before.clear();
    for (const int64_t* p = preds.begin((size_t)i); p != preds.end((size_t)i); ++p) {
      const int64_t u = rep[(size_t)*p];
      if (std::find(before.begin(), before.end(), u) == before.end()) before.push_back(u);
    }
    const int64_t m = t.msg_in[(size_t)i];
    if (m >= 0) {
      const int64_t u = rep[(size_t)m];
      if (std::find(before.begin(), before.end(), u) == before.end()) before.push_back(u);
    }
    for (int64_t u : before) {
      edges.emplace_back(u, i);
      ++count[(size_t)u];
    }
    indeg_[(size_t)i] = (int64_t)before.size();
  }
  succs_.start.assign(n_ + 1, 0);
  for (size_t u = 0; u < n_; ++u) succs_.start[u + 1] = succs_.start[u] + count[u];
  succs_.flat.resize(edges.size());
  Ints fill(succs_.start.begin(), succs_.start.end() - 1);
  for (const auto& [u, i] : edges) succs_.flat[(size_t)fill[(size_t)u]++] = i;
  sends_on_.assign(n_, -1);
  receives_on_.assign(n_, -1);
  message_of_.assign(n_, -1);
  for (size_t k = 0; k < msgs_.sender.size(); ++k) {
    message_of_[(size_t)msgs_.sender[k]] = (int64_t)k;
    sends_on_[(size_t)msgs_.sender[k]] = msgs_.pair[k];
    receives_on_[(size_t)msgs_.receiver[k]] = msgs_.pair[k];
  }
}

Ints OrderGraph::positions(const Ints& order, int64_t missing) const {
  Ints pos(n_, missing);
  for (size_t p = 0; p < order.size(); ++p) pos[(size_t)order[p]] = (int64_t)p;
  return pos;
}

std::optional<Ints> OrderGraph::kahn(const Ints& order, bool by_priority) const {
  const Ints pos = positions(order, 0);
  // the messages by pair, each pair's in the order of their sends: in `order` (by
  // priority) or by index (messages are numbered in the order of their senders)
  const size_t nm = msgs_.sender.size();
  Ints seq;
  seq.reserve(nm);
  if (by_priority) {
    for (int64_t i : order)
      if (message_of_[(size_t)i] >= 0) seq.push_back(message_of_[(size_t)i]);
  } else {
    for (size_t k = 0; k < nm; ++k) seq.push_back((int64_t)k);
  }
  Ints start((size_t)msgs_.npairs + 1, 0);
  for (int64_t k : seq) ++start[(size_t)msgs_.pair[(size_t)k] + 1];
  for (size_t p = 0; p < (size_t)msgs_.npairs; ++p) start[p + 1] += start[p];
  std::vector<size_t> idx(seq.size());
  for (int64_t k : seq) idx[(size_t)start[(size_t)msgs_.pair[(size_t)k]]++] = (size_t)k;
  // chain edges: each message's send before the pair's next one, and so its receive
  Ints after_send(n_, -1), after_recv(n_, -1), indeg = indeg_;
  for (size_t k = 1; k < idx.size(); ++k) {
    const size_t a = idx[k - 1], b = idx[k];
    if (msgs_.pair[a] != msgs_.pair[b]) continue;
    after_send[(size_t)msgs_.sender[a]] = msgs_.sender[b];
    after_recv[(size_t)msgs_.receiver[a]] = msgs_.receiver[b];
    ++indeg[(size_t)msgs_.sender[b]];
    ++indeg[(size_t)msgs_.receiver[b]];
  }
  Ints inflight((size_t)msgs_.npairs, 0);
  MinHeap heap;
  for (int64_t i : order)
    if (indeg[(size_t)i] == 0) heap.push(pos[(size_t)i]);
  Ints out;
  out.reserve(order.size());
  auto release = [&](int64_t j) {
    if (--indeg[(size_t)j] == 0) heap.push(pos[(size_t)j]);
  };
  while (!heap.empty()) {
    const int64_t i = order[(size_t)heap.top()];
    heap.pop();
    int64_t p = receives_on_[(size_t)i];
    if (p >= 0) --inflight[(size_t)p];
    p = sends_on_[(size_t)i];
    if (p >= 0) {
      if (inflight[(size_t)p] >= SAFE_SLOTS) return std::nullopt;
      ++inflight[(size_t)p];
    }
    out.push_back(i);
    for (const int64_t* j = succs_.begin((size_t)i); j != succs_.end((size_t)i); ++j) release(*j);
    if (after_send[(size_t)i] >= 0) release(after_send[(size_t)i]);
    if (after_recv[(size_t)i] >= 0) release(after_recv[(size_t)i]);
  }
  if (out.size() != order.size()) return std::nullopt;
  return out;
}

KahnFifo OrderGraph::kahn_fifo(const Ints& order) const {
  const Ints pos = positions(order, 0);
  Ints indeg = indeg_;
  const size_t np = (size_t)msgs_.npairs;
  std::vector<Ints> queues(np);  // receivers, in send order
  Ints heads(np, 0);             // index of the oldest message in flight
  std::vector<MinHeap> blocked(np);
  std::vector<char> waiting(n_, 0);
  MinHeap heap;
  for (int64_t i : order)
    if (indeg[(size_t)i] == 0 && receives_on_[(size_t)i] < 0) heap.push(pos[(size_t)i]);
  KahnFifo result;
  Ints out;
  out.reserve(order.size());
  while (!heap.empty()) {
    const int64_t i = order[(size_t)heap.top()];
    heap.pop();
    const int64_t po = sends_on_[(size_t)i];
    if (po >= 0 && (int64_t)queues[(size_t)po].size() - heads[(size_t)po] >= SAFE_SLOTS) {
      blocked[(size_t)po].push(pos[(size_t)i]);  // its receive (if any) stays at the head
      continue;
    }
    out.push_back(i);
    const int64_t pq = receives_on_[(size_t)i];
    if (pq >= 0) {  // a receive: its message was the head; the next one may be ready
      const int64_t h = ++heads[(size_t)pq];
      const Ints& q = queues[(size_t)pq];
      if (h < (int64_t)q.size() && waiting[(size_t)q[(size_t)h]]) {
        waiting[(size_t)q[(size_t)h]] = 0;
        heap.push(pos[(size_t)q[(size_t)h]]);
      }
      if (!blocked[(size_t)pq].empty()) {  // a slot is free again
        heap.push(blocked[(size_t)pq].top());
        blocked[(size_t)pq].pop();
      }
    }
    if (po >= 0) queues[(size_t)po].push_back(msg_out_[(size_t)i]);
    for (const int64_t* jp = succs_.begin((size_t)i); jp != succs_.end((size_t)i); ++jp) {
      const int64_t j = *jp;
      if (--indeg[(size_t)j] != 0) continue;
      const int64_t pj = receives_on_[(size_t)j];
      if (pj >= 0) {
        const Ints& q = queues[(size_t)pj];
        const int64_t h = heads[(size_t)pj];
        if (h >= (int64_t)q.size() || q[(size_t)h] != j) {
          waiting[(size_t)j] = 1;
          continue;
        }
      }
      heap.push(pos[(size_t)j]);
    }
  }
  if (out.size() == order.size()) {
    result.order = std::move(out);
    return result;
  }
  for (auto& b : blocked)
    for (; !b.empty(); b.pop()) result.blocked.push_back(order[(size_t)b.top()]);
  for (size_t i = 0; i < n_; ++i)
    if (waiting[i]) result.waiting.push_back((int64_t)i);
  return result;
}

Ints stuck_fusions(const KahnFifo& r, const Table& t) {
  Ints stuck;
  if (r.order) return stuck;
  for (int64_t i : r.blocked)
    if (t.fusion_at.count(i)) stuck.push_back(i);
  std::vector<char> waits(t.size(), 0);
  for (int64_t i : r.waiting) waits[(size_t)i] = 1;
  for (const Fused& f : t.fusions)
    if (f.recv >= 0 && waits[(size_t)f.recv]) stuck.push_back(f.recv);
  return stuck;
}

Ints OrderGraph::program_order(const Ints& order) const {
  std::vector<char> in(n_, 0);
  for (int64_t i : order) in[(size_t)i] = 1;
  Ints out;
  out.reserve(order.size());
  for (size_t i = 0; i < n_; ++i)
    if (in[i]) out.push_back((int64_t)i);
  return out;
}

bool OrderGraph::fifo_schedule(const Ints& order) const {
  const Ints pos = positions(order, -1);  // -1: not in the order
  for (size_t i = 0; i < n_; ++i) {
    const int64_t p = pos[i];
    for (const int64_t* j = succs_.begin(i); j != succs_.end(i); ++j)
      if (p < 0 || pos[(size_t)*j] <= p) return false;
  }
  const size_t np = (size_t)msgs_.npairs;
  std::vector<Ints> queues(np);
  Ints heads(np, 0);
  for (int64_t i : order) {
    const int64_t po = sends_on_[(size_t)i];
    if (po >= 0 && (int64_t)queues[(size_t)po].size() - heads[(size_t)po] >= SAFE_SLOTS) return false;
    const int64_t pq = receives_on_[(size_t)i];
    if (pq >= 0) {
      const Ints& q = queues[(size_t)pq];
      const int64_t h = heads[(size_t)pq];
      if (h >= (int64_t)q.size() || q[(size_t)h] != i) return false;
      heads[(size_t)pq] = h + 1;
    }
    if (po >= 0) queues[(size_t)po].push_back(msg_out_[(size_t)i]);
  }
  return true;
}

}  // namespace compiler
