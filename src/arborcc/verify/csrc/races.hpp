// Cross-rank race ordering (races.cpp): whether the conflicting pairs that the rank's
// program order and dependencies do not order (race candidates of symbolic.cpp)
// are ordered through other ranks, decided over the symbolic run's completion order.

#pragma once

#include <vector>

#include "program.hpp"

namespace verify {

// One candidate: step x accessed a slot before step y of another thread block of the
// same rank; y_received: y's access is a write carrying received data.
struct RaceCandidate {
  int x, y;
  bool y_received;
};

// For each candidate: is x ordered before y's access through any path? `order`: the gids
// of the steps in the order the symbolic run completed them; `recv_src`: per gid the
// send whose message it popped (-1: none).
std::vector<bool> ordered_through_ranks(const Program& p, const std::vector<int>& order,
                                        const std::vector<int>& recv_src,
                                        const std::vector<RaceCandidate>& candidates);

}  // namespace verify
