// The instruction table (arborcc.compiler.instructions.InstrTable) as every compiled pass
// reads and changes it: one column per field (instruction i is index i of each), the
// alias map and the fusions made - so that the passes hand it on without copies.
#pragma once

#include <unordered_map>

#include "pyints.hpp"

namespace compiler {

struct Fused {  // one fusion: the receive, the send it absorbed and what the receive was
  int64_t recv, send, kind, sbuf, soff, sendtb, ch;
};

struct Table {
  // IR buffers (0 input, 1 output, 2 scratch) and physical offsets of instance 0, chunk
  // counts, peers (-1: none), parallel lane, the program's hints (-1: automatic), the
  // traced operation, the communication edges (-1: none)
  Ints rank, kind, sbuf, soff, dbuf, doff, cnt, speer, rpeer, lane, ch, sendtb, recvtb, op, msg_in, msg_out;
  Ints alive;  // 0: a send fused into a receive
  Ints rep;    // alias map: the instruction that now does what i did
  std::vector<Fused> fusions;                        // in the order made; undone ones have recv == -1
  std::unordered_map<int64_t, size_t> fusion_at;     // fused receive -> its record

  size_t size() const { return rank.size(); }
  // Every instruction alive, its own alias, no fusion.
  void unfused_start() {
    alive.assign(size(), 1);
    rep.resize(size());
    for (size_t i = 0; i < rep.size(); ++i) rep[i] = (int64_t)i;
    fusions.clear();
    fusion_at.clear();
  }
  size_t fusion_count() const { return fusion_at.size(); }
};

}  // namespace compiler
