// Instruction fusion (arborcc.compiler.fusion, GC3 section 4.2): a receive and the send
// forwarding it become one rcs / rrcs / rrs; a union-find over messages keeps the
// channel hints of whole fused chains consistent.
#pragma once

#include "pyints.hpp"

namespace compiler {

enum FusedKind : int64_t { RCS = 5, RRCS = 6, RRS = 7 };

struct FusionColumns {  // the instruction table's columns fusion reads and rewrites
  Ints kind, ch, msg_in, msg_out, lane, sbuf, soff, dbuf, speer, sendtb, recvtb, doff, alive;
};

struct Fused {  // one fusion: the receive, the send it absorbed and what the receive was
  int64_t recv, send, kind, sbuf, soff, sendtb, ch;
};

struct FusionInput {
  Ints forwarded;              // receives with forwarding sends, in the DAG's order
  std::vector<Ints> forwards;  // their sends
  Ints readers, rdepth;        // rdepth may be empty when no receive has several sends
  std::vector<char> final;     // final[i]: i wrote what some slot holds at the end
  std::vector<char> significant;  // per IR buffer: holds the collective's result
  bool manual = false;
};

// Fuses in place; returns the fusions made, in order, and fills rep (the alias map).
std::vector<Fused> fuse_instructions(FusionColumns& t, const FusionInput& in, Ints& rep);

// Undoes fusion f in place (arborcc.compiler.fusion.unfuse): the receive gets its own kind
// back and the send it absorbed is alive again, right before its receive on the next rank.
void unfuse(FusionColumns& t, Ints& rep, const Fused& f);

}  // namespace compiler
