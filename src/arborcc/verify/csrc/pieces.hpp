// The greedy run of arborcc.verify.pieces (PieceSchedule.run): every thread block with
// its steps cut into FIFO slices, counters only.

#pragma once

#include <vector>

#include "program.hpp"

namespace verify {

struct PieceRun {
  std::vector<int> pc, signal, filled;  // per thread block, per thread block, per connection
};

PieceRun run_pieces(const Program& p, int capacity, int per_piece, int allowed_count);

}  // namespace verify
