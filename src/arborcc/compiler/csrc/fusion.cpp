// Instruction fusion (arborcc.compiler.fusion): one pass over the receives that some
// send forwards.

#include "fusion.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "instructions.hpp"

namespace compiler {

namespace {

// Union-find over messages (named by their send instruction) with a channel hint per root.
class Channels {
 public:
  explicit Channels(const Ints& hints) : parent_(hints.size()), hint_(hints) {
    std::iota(parent_.begin(), parent_.end(), 0);
  }
  int64_t find(int64_t m) {
    int64_t root = m;
    while (parent_[(size_t)root] != root) root = parent_[(size_t)root];
    while (parent_[(size_t)m] != root) {
      const int64_t next = parent_[(size_t)m];
      parent_[(size_t)m] = root;
      m = next;
    }
    return root;
  }
  bool join(int64_t a, int64_t b) {
    const int64_t ha = hint_[(size_t)a], hb = hint_[(size_t)b];
    if (ha != -1 && hb != -1 && ha != hb) return false;
    parent_[(size_t)b] = a;
    hint_[(size_t)a] = ha != -1 ? ha : hb;
    return true;
  }

 private:
  Ints parent_, hint_;
};

}  // namespace

void fuse_instructions(Table& t, const FusionInput& in) {
  t.unfused_start();
  Ints& rep = t.rep;
  // channel hints only matter when they differ; then whole chains must agree
  const bool hinted = std::any_of(t.ch.begin(), t.ch.end(), [&](int64_t c) { return c != t.ch[0]; });
  std::vector<size_t> visit(in.forwarded.size());
  std::iota(visit.begin(), visit.end(), 0);
  if (hinted)
    std::sort(visit.begin(), visit.end(), [&](size_t a, size_t b) { return in.forwarded[a] < in.forwarded[b]; });
  Channels chans(hinted ? t.ch : Ints());
  for (size_t v : visit) {
    const int64_t r = in.forwarded[v];
    const Ints& sends = in.forwards[v];
    int64_t s = sends[0];  // the send on the longest path to the end (the first such)
    for (size_t k = 1; k < sends.size(); ++k)
      if (in.rdepth[(size_t)sends[k]] > in.rdepth[(size_t)s]) s = sends[k];
    const size_t ri = (size_t)r, si = (size_t)s;
    if (t.lane[si] != t.lane[ri]) continue;
    if (in.manual && (t.recvtb[ri] != t.sendtb[si] || std::max<int64_t>(t.ch[ri], 0) != std::max<int64_t>(t.ch[si], 0)))
      continue;
    if (hinted) {
      const int64_t m_in = chans.find(t.msg_in[ri]), m_out = chans.find(s);
      if (m_in == m_out || !chans.join(m_in, m_out)) continue;
    }
    const int64_t q = t.msg_out[si];  // the receive on the next rank
    const int64_t k = t.kind[ri];
    t.fusion_at[r] = t.fusions.size();
    t.fusions.push_back(Fused{r, s, k, t.sbuf[ri], t.soff[ri], t.sendtb[ri], t.ch[ri]});
    if (k == step::RECV) {
      t.kind[ri] = step::RCS;
      t.sbuf[ri] = t.dbuf[ri];
      t.soff[ri] = t.doff[ri];
    } else if (in.readers[ri] != 1) {
      t.kind[ri] = step::RRCS;
    } else if (!in.significant[(size_t)t.dbuf[ri]]) {
      t.kind[ri] = step::RRS;  // the reduced value is only forwarded
    } else {  // ... and the slot's final value does not matter unless it stays there
      t.kind[ri] = in.final[ri] ? step::RRCS : step::RRS;
    }
    t.speer[ri] = t.speer[si];
    t.sendtb[ri] = t.sendtb[si];
    if (t.ch[ri] == -1) t.ch[ri] = t.ch[si];  // keep every hint of a chain on some member
    t.msg_out[ri] = q;
    t.msg_in[(size_t)q] = r;
    t.alive[si] = 0;
    rep[si] = r;
  }
}

int64_t unfuse(Table& t, int64_t recv) {
  auto at = t.fusion_at.find(recv);
  if (at == t.fusion_at.end()) throw std::out_of_range("instruction " + std::to_string(recv) + " is not fused");
  Fused& f = t.fusions[at->second];
  t.fusion_at.erase(at);
  const size_t r = (size_t)f.recv, s = (size_t)f.send;
  t.kind[r] = f.kind;
  t.sbuf[r] = f.sbuf;
  t.soff[r] = f.soff;
  t.sendtb[r] = f.sendtb;
  t.ch[r] = f.ch;
  const size_t q = (size_t)t.msg_out[r];
  t.speer[r] = -1;
  t.msg_out[r] = -1;
  t.msg_in[q] = f.send;
  t.msg_out[s] = (int64_t)q;
  t.alive[s] = 1;
  t.rep[s] = f.send;
  f.recv = -1;  // undone
  return f.send;
}

}  // namespace compiler
