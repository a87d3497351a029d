// The compiled schedule run with its steps cut into FIFO slices as the MSCCL runtimes cut
// them (arborcc.compiler.pieces): whether every thread block of one instance finishes.
#pragma once

#include "sync.hpp"
#include "threadblocks.hpp"

namespace compiler {

// Whether every thread block of `s` (assignment `a`, one instance) finishes when a step of
// `cnt` chunks moves cnt * per_piece slices, a connection (sender rank, receiver rank,
// channel) holds `capacity` slices, and a step with a dependency starts once the named
// thread block has finished that step.
bool finishes_in_pieces(const Schedule& s, const ThreadBlocks& a, int64_t capacity, int64_t per_piece);

}  // namespace compiler
