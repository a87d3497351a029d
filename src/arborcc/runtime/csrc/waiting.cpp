// How a rank waits for its peers (spin, yield, sleep on its futex), the barrier, and the
// values rank 0 publishes for the others (the slice size chosen by online tuning).

#include <immintrin.h>
#include <sched.h>

#include "communicator.hpp"

namespace dataplane {

// A yield that kept the CPU away this long went to another program's process (a peer rank
// holds a CPU for microseconds between its waits, a scheduler slice lasts milliseconds);
// the rank then skips its yield phase for YIELD_PAUSE_NS.
constexpr double YIELD_LOST_SECONDS = 1e-3;
constexpr int64_t YIELD_PAUSE_NS = 100000000;

static int64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

void Communicator::wait_change(uint32_t s, long nanos) {
  RankCell& me = seg_.hdr()->ranks[rank_];
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    if (me.seq.load(std::memory_order_relaxed) != s) return;
    _mm_pause();
    if ((i & 63) == 63 && elapsed(t0) > spin_seconds_) break;
  }
  // Yield, unless a yield recently lost the CPU for a scheduler slice: then a process of
  // another program competes for this CPU, and each yield hands it a whole slice (the
  // peer's wake-up cannot end a yield, as it ends a sleep), paid at every wait - 3 ranks
  // on 2 CPUs beside one busy process took 10x longer per staged call. Such a rank goes
  // from its spin straight to sleep for YIELD_PAUSE_NS, then tries a yield again.
  if (yield_seconds_ > 0 &&
      steady_ns(std::chrono::steady_clock::now()) >= yields_resume_ns_.load(std::memory_order_relaxed)) {
    t0 = std::chrono::steady_clock::now();
    for (;;) {
      if (me.seq.load(std::memory_order_relaxed) != s) return;
      const auto before = std::chrono::steady_clock::now();
      sched_yield();
      const auto after = std::chrono::steady_clock::now();
      if (std::chrono::duration<double>(after - before).count() > YIELD_LOST_SECONDS) {
        yields_resume_ns_.store(steady_ns(after) + YIELD_PAUSE_NS, std::memory_order_relaxed);
        break;
      }
      if (std::chrono::duration<double>(after - t0).count() > yield_seconds_) break;
    }
  }
  sleep_on_seq(s, nanos);
}

void Communicator::wait_for_peer(const std::function<bool()>& ready, int q,
                                 std::chrono::steady_clock::time_point t0, double timeout,
                                 const std::function<std::string(bool)>& ending) {
  if (ready()) return;
  RankCell& me = seg_.hdr()->ranks[rank_];
  auto last_check = std::chrono::steady_clock::now();
  Watch w;
  for (;;) {
    uint32_t s = me.seq.load(std::memory_order_seq_cst);
    if (ready()) break;
    wait_change(s, 20000000);  // 20 ms slices between checks
    if (ready()) break;
    if (elapsed(last_check) > 0.1) {  // reading /proc costs tens of microseconds: not at every wake-up
      last_check = std::chrono::steady_clock::now();
      check_abort();
      int pid = seg_.hdr()->ranks[q].pid.load();
      if (!process_alive(pid))
        fail("rank " + std::to_string(q) + " died (process " + std::to_string(pid) + " is gone) " + ending(true));
      watch(w, 1ULL << q);
      if (elapsed(t0) > timeout)
        fail_timeout(w, 1ULL << q, timeout, "this rank waits for rank " + std::to_string(q) + " " + ending(false));
    }
  }
  unwatch(w);
}

void Communicator::sleep_on_seq(uint32_t s, long nanos) {
  RankCell& me = seg_.hdr()->ranks[rank_];
  me.sleeping.fetch_add(1, std::memory_order_seq_cst);
  if (me.seq.load(std::memory_order_seq_cst) == s) {
    struct timespec ts = {nanos / 1000000000L, nanos % 1000000000L};
    futex(&me.seq, FUTEX_WAIT, s, &ts);
  }
  me.sleeping.fetch_sub(1, std::memory_order_seq_cst);
}

void Communicator::publish(uint64_t seq, int64_t value) {
  Header* h = seg_.hdr();
  h->published_val[seq % 64].store(value, std::memory_order_relaxed);
  h->published_seq[seq % 64].store(seq, std::memory_order_release);
  for (int r = 0; r < n_; ++r)
    if (r != rank_) wake(r);
}

int64_t Communicator::wait_published(uint64_t seq, double timeout) {
  Header* h = seg_.hdr();
  RankCell& me = h->ranks[rank_];
  auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    uint32_t s = me.seq.load();
    if (h->published_seq[seq % 64].load(std::memory_order_acquire) == seq)
      return h->published_val[seq % 64].load(std::memory_order_relaxed);
    check_abort();
    if (!process_alive(h->ranks[0].pid.load())) fail("rank 0 died before publishing the slice size");
    if (elapsed(t0) > timeout)
      fail("timed out after " + fmt(timeout) + " s waiting for rank 0 to publish the slice size");
    wait_change(s, 20000000);
  }
}

void Communicator::barrier(double timeout) {
  // every rank bumps its generation and waits for all others to reach it
  uint64_t gen = ++barrier_gen_;
  RankCell& me = seg_.hdr()->ranks[rank_];
  me.barrier_gen.store((uint32_t)gen);
  for (int r = 0; r < n_; ++r) wake(r);
  auto t0 = std::chrono::steady_clock::now();
  auto last_check = t0;
  Watch w;
  for (int r = 0; r < n_; ++r) {
    while ((uint32_t)seg_.hdr()->ranks[r].barrier_gen.load() < (uint32_t)gen) {
      check_abort();
      uint32_t s = me.seq.load();
      if ((uint32_t)seg_.hdr()->ranks[r].barrier_gen.load() >= (uint32_t)gen) break;
      if (elapsed(last_check) > 0.1) {  // reading /proc costs tens of microseconds: not at every wake-up
        last_check = std::chrono::steady_clock::now();
        if (!process_alive(seg_.hdr()->ranks[r].pid.load()))
          fail("rank " + std::to_string(r) + " died (process " + std::to_string(seg_.hdr()->ranks[r].pid.load()) +
               " is gone) before the barrier");
        watch(w, 1ULL << r);
        if (elapsed(t0) > timeout)
          fail_timeout(w, 1ULL << r, timeout, "in a barrier, which rank " + std::to_string(r) + " has not reached");
      }
      wait_change(s, 2000000);
    }
  }
  unwatch(w);
}

}  // namespace dataplane
