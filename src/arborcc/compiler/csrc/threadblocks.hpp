// Thread-block and channel assignment (arborcc.compiler.threadblocks, GC3 section 5.2):
// the automatic policy - fused chains first, each on the lowest channel that carries it
// (cut by undoing fusions where none does), then plain transfers on the connection's
// thread block, local copies and reduces with their latest predecessor's.
#pragma once

#include "pyints.hpp"
#include "table.hpp"

namespace compiler {

struct ThreadBlocks {  // an assignment: every alive instruction's thread block
  Ints tb_of;                       // per instruction: thread block (index below), -1 none
  Ints rank, id, send, recv, ch, lane;  // per thread block; id counts from 0 per rank
  std::vector<Ints> of_rank;        // per rank: its thread blocks in id order

  int64_t add(int64_t r, int64_t s, int64_t v, int64_t c, int64_t q);  // a new one, last of rank r
  void pop(int64_t r);  // remove the last one (of rank r, the last added overall)
  size_t size() const { return rank.size(); }
};

// The automatic assignment; preds: the DAG's predecessors (pre-fusion indices, mapped
// through the alias map). Fusions a chain needs undone are undone in t, each revived send
// put right after its receive in `order`.
ThreadBlocks assign_auto(Table& t, const Rows& preds, int64_t num_ranks, int64_t max_channels, Ints& order);

}  // namespace compiler
