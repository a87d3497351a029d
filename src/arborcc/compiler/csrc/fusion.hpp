// Instruction fusion (arborcc.compiler.fusion, GC3 section 4.2): a receive and the send
// forwarding it become one rcs / rrcs / rrs; a union-find over messages keeps the
// channel hints of whole fused chains consistent.
#pragma once

#include "pyints.hpp"
#include "table.hpp"

namespace compiler {

struct FusionInput {
  const Ints& forwarded;               // receives with forwarding sends, in the DAG's order
  const std::vector<Ints>& forwards;   // their sends
  const Ints& readers;
  const Ints& rdepth;                  // may be empty when no receive has several sends
  std::vector<char> final;             // final[i]: i wrote what some slot holds at the end
  std::vector<char> significant;  // per IR buffer: holds the collective's result
  bool manual = false;
};

// Fuses in place: the columns rewritten, t.rep, t.fusions and t.fusion_at filled.
void fuse_instructions(Table& t, const FusionInput& in);

// Undoes the fusion of receive r in place (arborcc.compiler.fusion.unfuse): it gets its
// own kind back and the send it absorbed is alive again, right before its receive on the
// next rank; returns that send.
int64_t unfuse(Table& t, int64_t r);

}  // namespace compiler
