// The verifier's one symbolic run (symbolic.cpp): the schedule and its findings for every
// program, and per memory layout the values' findings, or the proof that there are none;
// arborcc.verify.findings formats them.

#pragma once

#include <array>
#include <vector>

#include "program.hpp"

namespace verify {

// One kind of call's memory (arborcc.verify.layout.MemoryMap), flat slot addresses.
struct Layout {
  long long total = 0;                   // slots of all ranks
  std::vector<long long> bases;          // per rank position: 3 IR buffer bases (-1: none)
  std::vector<long long> data, data_end; // per rank position: slots holding its input
  // what the postcondition requires: (first address, length, input chunk, rank whose
  // contribution is needed, or -1 for every rank)
  std::vector<std::array<long long, 4>> expected;
};

// What a thread block left blocked at the end waits for.
enum Wait : int { WAITS_FOR_SIGNAL = 0, WAITS_TO_RECEIVE = 1, WAITS_TO_SEND = 2 };

struct Blocked {
  int tb, step, wait, on;  // on: the thread block signalling (a signal), else the connection
};

struct Unreceived {
  int connection, first_gid, messages;  // the messages left in a connection, the oldest first
};

// What the run found on one layout, in run order (findings.py words it). OUTSIDE_*: the
// step's range lies outside its rank's buffer (or it names none); the layout's values are
// not followed past it.
enum Event : int {
  MISMATCH = 0,
  UNINITIALIZED_SOURCE = 1,
  UNINITIALIZED_DESTINATION = 2,
  OUTSIDE_SOURCE = 3,
  OUTSIDE_DESTINATION = 4
};

// Consecutive wrong output chunks with the same history: which expected run, the index
// of the first in it and how many, their last writer, and the value of the first (each
// next chunk holds it with every input chunk index one higher).
struct WrongValue {
  int run = 0;
  long long index = 0, length = 0;
  int writer = -1;
  bool initialized = false, dup = false;
  std::vector<std::pair<int, std::vector<int>>> parts;  // (input chunk, ranks)
};

struct LayoutFindings {
  // (Event, gid, slot address or, for MISMATCH, the send's gid; 0 for OUTSIDE_*)
  std::vector<std::array<long long, 3>> events;
  // races no path orders, each (earlier, later) pair once: (later gid, earlier gid, slot, later writes,
  // earlier writes)
  std::vector<std::array<long long, 5>> races;
  long long race_candidates = 0;  // pairs rank-local order did not settle
  bool races_incomplete = false;  // more candidates than the run analyses
  std::vector<WrongValue> wrong;  // the postcondition (when no thread block is blocked)
};

struct Proof {
  std::vector<bool> proved;         // per layout: no violation at all
  long long steps_run = 0;          // steps run (all of them when proved)
  std::vector<int> order;           // the gids of the steps run, in the order they completed
  std::vector<int> recv_src;        // per gid: the gid of the send whose message it popped, -1
  std::vector<int> mismatches;      // gids of receives whose message had another count
  std::vector<Blocked> blocked;     // the thread blocks that cannot finish (a deadlock), by g
  std::vector<Unreceived> unreceived;  // per connection with messages left, in connection order
  std::vector<LayoutFindings> layouts;  // per layout
};

Proof run_layouts(const Program& p, int num_ranks, const std::vector<Layout>& layouts, int slots,
                  bool check_races);

}  // namespace verify
