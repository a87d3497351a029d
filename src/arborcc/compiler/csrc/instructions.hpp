// Instruction generation (arborcc.compiler.instructions, GC3 section 4.2) for programs
// without parallelize or instances: every traced chunk operation becomes a send and a
// receive (recv, or rrc for a reduce) joined by a communication edge, or one local cpy
// / re; chunk indices are physical offsets, named scratch regions shifted into the
// rank's scratch buffer.
#pragma once

#include "pyints.hpp"
#include "step_codes.hpp"  // src/arborcc/ir/csrc: an instruction's kind is its step::Code
#include "table.hpp"

namespace compiler {

struct TracedOp {  // the fields of one traced operation the expansion reads
  int64_t kind, src_rank, src_buf, src_idx, dst_rank, dst_buf, dst_idx, count, sendtb, recvtb, ch;
};

// region_offset[rank]: offset in the rank's scratch buffer of each buffer code (codes >= 2)
Table lower_direct(const std::vector<TracedOp>& ops, const std::vector<Ints>& region_offset);

}  // namespace compiler
