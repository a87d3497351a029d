// A communicator's start-up (attaching to the segment, testing cross-memory attach with
// every peer), abort and failure, and tear-down.

#include "communicator.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include "errors.hpp"

namespace dataplane {

Communicator::Communicator(const std::string& name, int rank, bool create, int nranks, int channels, int slots,
                           uint64_t slot_bytes)
    : seg_(name, create, nranks, channels, slots, slot_bytes), rank_(rank) {
  n_ = seg_.nranks();
  if (rank < 0 || rank >= n_) throw CommError("rank " + std::to_string(rank) + " outside the communicator");
  RankCell& me = seg_.hdr()->ranks[rank_];
  me.pid.store(getpid());
  me.probe_addr.store((uint64_t)(uintptr_t)&probe_value_);
  me.attached.store(1, std::memory_order_seq_cst);
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lk(pool_mu_);
    pool_stop_ = true;
  }
  pool_cv_.notify_all();
  for (auto& t : pool_) t.join();
  for (auto& kv : windows_) unmap_peers(kv.second);
}

void Communicator::wait_attached(double timeout) {
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < n_; ++r) {
    while (seg_.hdr()->ranks[r].attached.load() == 0) {
      if (elapsed(t0) > timeout)
        throw CommError("rank " + std::to_string(r) + " never attached to the communicator (waited " +
                        fmt(timeout) + " s)");
      usleep(200);
    }
  }
  uint32_t ok = 1;
  for (int r = 0; r < n_ && ok == 1; ++r) {
    if (r == rank_) continue;
    uint64_t value = 0;
    struct iovec local = {&value, sizeof value};
    struct iovec remote = {(void*)(uintptr_t)seg_.hdr()->ranks[r].probe_addr.load(), sizeof value};
    ssize_t got = process_vm_readv(seg_.hdr()->ranks[r].pid.load(), &local, 1, &remote, 1, 0);
    if (got != (ssize_t)sizeof value || value != PROBE) ok = 2;
  }
  seg_.hdr()->ranks[rank_].cma_ok.store(ok);
  cma_ = true;
  for (int r = 0; r < n_; ++r) {
    while (seg_.hdr()->ranks[r].cma_ok.load() == 0) {
      if (elapsed(t0) > timeout) throw CommError("rank " + std::to_string(r) + " did not finish start-up");
      usleep(200);
    }
    if (seg_.hdr()->ranks[r].cma_ok.load() != 1) cma_ = false;
  }
}

void Communicator::abort(const std::string& msg) {
  int expected = 0;
  if (seg_.hdr()->abort_rank.compare_exchange_strong(expected, rank_ + 1)) {
    snprintf(seg_.hdr()->abort_msg, sizeof seg_.hdr()->abort_msg, "%s", msg.c_str());
  }
  for (int r = 0; r < n_; ++r) wake(r);
}

std::string Communicator::abort_message() const {
  int a = seg_.hdr()->abort_rank.load();
  if (!a) return "";
  return "rank " + std::to_string(a - 1) + " failed: " + std::string(seg_.hdr()->abort_msg);
}

void Communicator::fail(const std::string& msg) {
  std::string full = "rank " + std::to_string(rank_) + ": " + msg;
  abort(msg);
  throw CommError(full);
}

void Communicator::check_abort() {
  if (seg_.hdr()->abort_rank.load(std::memory_order_relaxed))
    throw CommError("rank " + std::to_string(rank_) + ": the communicator was aborted: " + abort_message());
}

}  // namespace dataplane
