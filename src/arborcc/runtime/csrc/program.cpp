// What a program's steps imply (program.hpp's classify and extent): which buffers its
// sends read and its steps write, whether it reduces, the order to visit thread blocks.

#include "program.hpp"

#include <algorithm>

namespace dataplane {

void classify(Program& p) {
  // per call buffer, the chunks some send reads and the chunks some step writes
  std::vector<char> sent[3], written[3];
  auto mark = [](std::vector<char>& v, int first, int cnt) {
    if (first < 0 || cnt <= 0) return;
    if ((int)v.size() < first + cnt) v.resize(first + cnt, 0);
    for (int c = first; c < first + cnt; ++c) v[c] = 1;
  };
  bool slot_sends = false;
  for (const Step& st : p.steps) {
    for (int side = 0; side < 2; ++side) {
      int b = side ? st.dbuf : st.sbuf, c = side ? st.doff : st.soff;
      if (b < 0 || b > 2) continue;
      if (p.lo_chunk[b] < 0 || c < p.lo_chunk[b]) p.lo_chunk[b] = c;
      p.hi_chunk[b] = std::max(p.hi_chunk[b], c + st.cnt - 1);
    }
    switch (st.op) {
      case step::SEND:
        if (st.sbuf >= 0 && st.sbuf <= 2) mark(sent[st.sbuf], st.soff, st.cnt);
        break;
      case step::RECV:
      case step::COPY:
        if (st.dbuf >= 0 && st.dbuf <= 2) mark(written[st.dbuf], st.doff, st.cnt);
        break;
      case step::REDUCE:
      case step::RRC:
        if (st.dbuf >= 0 && st.dbuf <= 2) mark(written[st.dbuf], st.doff, st.cnt);
        p.copy_only = false;
        break;
      case step::NOP:
        break;
      default:  // receive-and-send steps send from a slot or from what they just wrote
        slot_sends = true;
        p.copy_only = false;
    }
  }
  for (int t = 0; t < (int)p.tbs.size(); ++t) p.order.push_back(t);
  std::stable_sort(p.order.begin(), p.order.end(), [&](int a, int b) {
    auto rank = [&](int t) { return p.tbs[t].send >= 0 ? 0 : p.tbs[t].recv >= 0 ? 1 : 2; };
    return rank(a) < rank(b);
  });
  // chunks of one call buffer never overlap; the caller's send and receive buffers
  // are checked apart at each call (Communicator::run)
  p.sends_unwritten = !slot_sends;
  for (int b = 0; b < 3; ++b)
    for (size_t c = 0; c < std::min(sent[b].size(), written[b].size()); ++c)
      if (sent[b][c] && written[b][c]) p.sends_unwritten = false;
}

void extent(const Program& p, const Geometry& g, int b, uint64_t& lo, uint64_t& hi) {
  lo = hi = 0;
  if (p.lo_chunk[b] < 0 || !g.addr[b]) return;
  lo = chunk_addr(g, b, p.lo_chunk[b], 0);
  hi = chunk_addr(g, b, p.hi_chunk[b], g.chunk_elems);
}

}  // namespace dataplane
