// The simulator's event-driven run (arborcc.sim.engine, docs/simulator.md): thread blocks
// execute their steps in order, transfers at a fixed rate or sharing their links max-min
// fairly (fairshare.hpp), the clock jumping from event to event.

#pragma once

#include <cstdint>
#include <vector>

namespace sim {

// What a step of a flat program does, as bits (arborcc.sim.program reads them from here)
enum StepBit : int32_t { RECEIVES = 1, SENDS = 2, REDUCES = 4, COPIES = 8 };

// A flat program: thread block t's steps are step_start[t] .. step_start[t + 1] - 1, each
// with its flags, chunk count and dependency (thread block dep_tb, its step dep_step; -1:
// none); send_conn/recv_conn per thread block (-1: none); num_conns connections.
struct EngineProgram {
  std::vector<int64_t> step_start{0};
  std::vector<int32_t> flags;
  std::vector<int64_t> counts;
  std::vector<int32_t> dep_tb;
  std::vector<int32_t> dep_step;
  std::vector<int32_t> send_conn;
  std::vector<int32_t> recv_conn;
  int32_t num_conns = 0;
  int32_t num_tbs() const { return (int32_t)send_conn.size(); }
};

// What one run needs besides the program: per connection its arrival latency, its
// uncontended rate and the links it may have to share (shared_start[c] .. shared_start[c + 1]
// - 1 into shared_link; none: a fixed rate); per link its capacity.
struct EngineSetup {
  int64_t iterations = 1;
  double tile = 0.0;     // bytes per chunk and iteration
  int64_t most_chunks = 1;  // chunks one transfer may carry
  int64_t fifo_depth = 1;
  double inv_reduce = 0.0, inv_copy = 0.0;  // seconds per byte
  std::vector<double> latency;
  std::vector<double> free_rate;
  std::vector<int32_t> shared_start{0};
  std::vector<int32_t> shared_link;
  std::vector<double> link_rate;
  bool record = false;
};

// What one piece of work did, when recording (arborcc.sim.engine.Piece)
struct PieceRecord {
  int32_t tb, step;
  int64_t iteration;
  int32_t cause;  // CAUSE_* below
  int64_t ref;
  double ready;
  bool has_compute = false, has_send = false;
  double compute0 = 0, compute1 = 0, send0 = 0, send1 = 0;
  double end;
};
constexpr int32_t CAUSE_START = 0, CAUSE_PREV = 1, CAUSE_DEP = 2, CAUSE_DATA = 3, CAUSE_FIFO = 4;

struct RatePeriod {
  int32_t tb;
  double start, end, rate;
};

struct EngineOutcome {
  std::vector<double> tb_finish;
  // the first thread block that never finished (-1: none), its step and iteration
  int32_t stuck_tb = -1;
  int64_t stuck_step = 0, stuck_iteration = 0;
  std::vector<RatePeriod> rate_log;   // when recording
  std::vector<PieceRecord> pieces;    // when recording
};

void run_events(const EngineProgram& prog, const EngineSetup& setup, EngineOutcome& out);

}  // namespace sim
