// Instruction generation for programs without parallelize or instances
// (arborcc.compiler.instructions): one pass over the traced operations.

#include "instructions.hpp"

#include <algorithm>

namespace compiler {

namespace {

constexpr int64_t TRACED_COPY = 0;  // arborcc.lang.trace.COPY
constexpr int64_t SCRATCH = 2;  // the IR's scratch buffer

// the columns as the expansion pushes them
enum Column { RANK, KIND, SBUF, SOFF, DBUF, DOFF, CNT, SPEER, RPEER, CH, SENDTB, RECVTB, OP, MSG_IN, MSG_OUT, COLUMNS };

}  // namespace

Table lower_direct(const std::vector<TracedOp>& ops, const std::vector<Ints>& region_offset) {
  size_t width = 0;  // the widest rank's regions: codes beyond a rank's own count as that column
  for (const Ints& r : region_offset) width = std::max(width, r.size());
  auto region = [&](int64_t rank, int64_t code) -> int64_t {
    const Ints& r = region_offset[(size_t)rank];
    if (width == 0) return 0;
    const size_t c = std::min((size_t)code, width - 1);
    return c < r.size() ? r[c] : 0;
  };
  std::vector<Ints> col(COLUMNS);
  for (Ints& c : col) c.reserve(2 * ops.size());
  auto push = [&](std::initializer_list<int64_t> values) {
    size_t k = 0;
    for (int64_t v : values) col[k++].push_back(v);
  };
  for (size_t oi = 0; oi < ops.size(); ++oi) {
    const TracedOp& op = ops[oi];
    int64_t sb = op.src_buf, si = op.src_idx, db = op.dst_buf, di = op.dst_idx;
    if (sb >= 2) si += region(op.src_rank, sb), sb = SCRATCH;  // a named scratch region
    if (db >= 2) di += region(op.dst_rank, db), db = SCRATCH;
    const bool copy = op.kind == TRACED_COPY, remote = op.src_rank != op.dst_rank;
    const int64_t i = (int64_t)col[RANK].size(), o = (int64_t)oi;
    if (remote) {  // rank, kind, sbuf, soff, dbuf, doff, cnt, speer, rpeer, ch, sendtb, recvtb, op, msg_in, msg_out
      push({op.src_rank, step::SEND, sb, si, db, di, op.count, op.dst_rank, -1, op.ch, op.sendtb, -1, o, -1, i + 1});
      push({op.dst_rank, copy ? step::RECV : step::RRC, copy ? sb : db, copy ? si : di, db, di, op.count, -1,
            op.src_rank, op.ch, -1, op.recvtb, o, i, -1});
    } else {
      push({op.src_rank, copy ? step::COPY : step::REDUCE, sb, si, db, di, op.count, -1, -1, op.ch,
            op.sendtb != -1 ? op.sendtb : op.recvtb, -1, o, -1, -1});
    }
  }
  Table t;
  Ints* named[] = {&t.rank, &t.kind, &t.sbuf, &t.soff, &t.dbuf, &t.doff, &t.cnt, &t.speer,
                   &t.rpeer, &t.ch, &t.sendtb, &t.recvtb, &t.op, &t.msg_in, &t.msg_out};  // Column's order
  for (size_t k = 0; k < COLUMNS; ++k) named[k]->swap(col[k]);
  t.lane.assign(t.size(), 0);
  t.unfused_start();
  return t;
}

}  // namespace compiler
