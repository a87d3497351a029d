// The instruction DAG's scan (arborcc.compiler.dag, GC3 sections 4.1-4.2): processing
// edges within each rank, readers, forwarding sends and dependency depths; and the
// reverse dependency depths (GC3 section 5.2, step 3).
#pragma once

#include "instructions.hpp"
#include "pyints.hpp"
#include "table.hpp"

namespace compiler {

struct DagScan {
  Rows preds;                  // same-rank predecessors, in the order found
  Ints depth, readers;         // dependency depth; how many read what each wrote
  Ints forwarded;              // receives forwarded by some send, first found first
  std::vector<Ints> forwards;  // per entry of `forwarded`: the sends forwarding it
  bool multi_forwards = false;
  Ints final_writers;  // what each slot's last writer is at the end (-1: none), sorted, once each
  Ints rdepth;         // reverse dependency depths once computed (empty before)
};

// sizes[rank * 3 + IR buffer]: physical chunks of each buffer of each rank
DagScan scan_dependencies(const Table& t, const Ints& sizes);

// Longest path from each instruction to the end over the (fused, when rep is not empty)
// DAG: alive[i] == 0 instructions are skipped, predecessors mapped through rep.
Ints reverse_depths(const Rows& preds, const Ints& msg_in, const Ints& alive, const Ints& rep);

}  // namespace compiler
