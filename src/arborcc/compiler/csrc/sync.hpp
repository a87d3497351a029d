// Synchronization insertion (arborcc.compiler.sync, GC3 section 5.2): every instruction
// becomes a step of its thread block, in the global order; a processing edge from another
// thread block of the rank becomes a dependency on that block's latest step not already
// waited for, extra ones nop steps right before.
#pragma once

#include "pyints.hpp"
#include "step_codes.hpp"
#include "threadblocks.hpp"

namespace compiler {

struct StepRow {  // one IR step (offsets of instance 0); dep_tb is a thread block id of the rank
  int64_t op, sbuf, soff, dbuf, doff, cnt, dep_tb, dep_step;
  bool has_dep;  // some other step waits on this one
};

struct Schedule {
  std::vector<std::vector<StepRow>> of_tb;  // per thread block (ThreadBlocks' index): its steps
  int64_t nops = 0;
  Ints kinds = Ints(step::NOP, 0);  // steps per instruction kind (step::Code; a nop is none)
};

// preds: the DAG's predecessors (pre-fusion indices, mapped through the alias map)
Schedule emit_steps(const Table& t, const Ints& order, const Rows& preds, const ThreadBlocks& a);

}  // namespace compiler
