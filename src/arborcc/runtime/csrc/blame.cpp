// Which rank a timed-out wait blames. While a rank waits (after its first ~0.1 s), it
// publishes the ranks it waits for and a beat every ~0.1 s (RankState), and notes when each
// rank's progress or beat last moved. When the wait times out it follows the chain of
// waits from the ranks it waits for (tb waits for tb on this rank - the scheduler looks at
// every thread block - and rank waits for rank): the first rank reached that is gone,
// stopped (/proc/<pid>/stat state T), or neither waiting nor moving during the whole wait
// is the one named, on every rank that waits for it directly or through others. A
// heartbeat alone could not tell: a stopped process publishes nothing, which is the point.

#include "communicator.hpp"

namespace dataplane {

void Communicator::watch(Watch& w, uint64_t peers) {
  const auto now = std::chrono::steady_clock::now();
  Header* h = seg_.hdr();
  if (!w.started) {
    w.started = true;
    w.since = now;
    for (int r = 0; r < n_; ++r) {
      w.progress[r] = h->state[r].progress.load(std::memory_order_relaxed);
      w.beats[r] = h->state[r].beats.load(std::memory_order_relaxed);
      w.moved[r] = std::chrono::steady_clock::time_point::min();
    }
  } else {
    for (int r = 0; r < n_; ++r) {
      const uint64_t p = h->state[r].progress.load(std::memory_order_relaxed);
      const uint64_t b = h->state[r].beats.load(std::memory_order_relaxed);
      if (p != w.progress[r] || b != w.beats[r]) w.moved[r] = now;
      w.progress[r] = p;
      w.beats[r] = b;
    }
  }
  RankState& me = h->state[rank_];
  me.waiting.store(peers, std::memory_order_relaxed);
  me.beats.fetch_add(1, std::memory_order_relaxed);
  w.published = true;
  check_calls(peers);
}

void Communicator::unwatch(Watch& w) {
  if (!w.started) return;
  RankState& me = seg_.hdr()->state[rank_];
  if (w.published) me.waiting.store(0, std::memory_order_relaxed);
  me.progress.fetch_add(1, std::memory_order_relaxed);
  w.started = w.published = false;
}

void Communicator::fail_timeout(Watch& w, uint64_t peers, double timeout, const std::string& detail) {
  Header* h = seg_.hdr();
  int via[MAX_RANKS];  // the rank through whose wait a rank was reached (rank_: directly)
  int queue[MAX_RANKS], len = 0;
  uint64_t seen = 1ULL << rank_;
  for (int q = 0; q < n_; ++q)
    if (peers >> q & 1) {
      queue[len++] = q;
      via[q] = rank_;
      seen |= 1ULL << q;
    }
  int blamed = -1;
  bool cycle = false;
  std::string how;
  for (int i = 0; i < len && blamed < 0; ++i) {
    const int x = queue[i];
    const int pid = h->ranks[x].pid.load();
    const char state = process_state(pid);
    const std::string who = "rank " + std::to_string(x), proc = "process " + std::to_string(pid);
    const bool moved = w.started && w.moved[x] >= w.since;
    const uint64_t waits = h->state[x].waiting.load(std::memory_order_relaxed);
    if (state == 0 || state == 'Z' || state == 'X') {
      blamed = x;
      how = who + " died (" + proc + " is gone)";
    } else if (state == 'T' || state == 't') {
      blamed = x;
      how = who + " made no progress for " + fmt(timeout) + " s; it is alive, " + proc +
            ", but not running: stopped?";
    } else if (moved && waits) {  // waiting itself: follow its waits
      for (int y = 0; y < n_; ++y) {
        if (!(waits >> y & 1)) continue;
        if (y == rank_) cycle = true;
        if (seen >> y & 1) continue;
        seen |= 1ULL << y;
        via[y] = x;
        queue[len++] = y;
      }
    } else if (!moved) {
      blamed = x;
      how = who + " made no progress for " + fmt(timeout) + " s; it is alive, " + proc + ", " +
            (state == 'R' ? "running" : "sleeping") + " outside its collective calls";
    }
  }
  if (blamed < 0) {  // every rank reached waits or moves
    for (blamed = 0; !(peers >> blamed & 1); ++blamed) {
    }
    how = cycle ? "it waits for this rank, directly or through others: do all ranks make the same calls?"
                : "rank " + std::to_string(blamed) + " is alive and moving";
  }
  std::string chain;
  if (!(peers >> blamed & 1)) {
    chain = "rank " + std::to_string(blamed);
    for (int y = via[blamed]; y != rank_; y = via[y]) chain = "rank " + std::to_string(y) + ", which waits for " + chain;
    chain = "; this rank waits for " + chain;
  }
  fail("timed out after " + fmt(timeout) + " s waiting for rank " + std::to_string(blamed) + " (" + how + chain +
       "; " + detail + ")");
}

}  // namespace dataplane
