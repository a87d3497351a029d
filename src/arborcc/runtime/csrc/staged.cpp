// The staged all-reduce's (and reduce-scatter's) place in the communicator: its staging ring in the segment
// (each rank's area is the slots of its connection to itself, which no program uses: the
// verifier rejects a thread block whose peer is its own rank) and its waiting (spin,
// yield, futex, as every wait of the data plane; a dead or silent peer fails the call,
// naming it), and where a shared array holds a call's input. The algorithms themselves are
// in staged_allreduce.hpp (the owner all-reduce, the reduce-scatter) and staged_oneshot.hpp
// (the one-shot all-reduce of small calls).

#include "communicator.hpp"
#include "dtypes.hpp"
#include "errors.hpp"
#include "kernels.hpp"
#include "staged_oneshot.hpp"

namespace dataplane {

int Communicator::prepare_staged(int64_t count, int dtype, int op, uint64_t slot_bytes, double timeout,
                                 int kind, uint64_t what, uint64_t call_count) {
  if (dtype < 0 || dtype > DT_U8) throw CommError("unknown dtype code");
  if (op < 0 || op > OP_MAX) throw CommError("unknown op code");
  if (count < 1) throw CommError("a staged all-reduce moves at least one element");
  if (kind < STAGED_OWNER || kind > STAGED_GATHER) throw CommError("unknown staged call kind");
  const bool oneshot = kind == STAGED_ONESHOT || kind == STAGED_GATHER;
  const bool scatter = kind == STAGED_SCATTER;
  const uint64_t call_bytes = (uint64_t)count * DTYPE_SIZE[dtype];
  if (ring_.nranks == 0) {
    ring_.rank = rank_;
    ring_.nranks = n_;
    for (int q = 0; q < n_; ++q) ring_.area[q] = seg_.slot_data(q, q, 0, 0);
    staged::shape_ring(ring_, (uint64_t)seg_.slots() * seg_.slot_bytes(), slot_bytes);
  }
  if (std::string e = ring_.slots < staged::MIN_SLOTS ? "" : seg_.reserve_staging(rank_, staged::HEADER_BYTES, ring_.slots, ring_.slot_bytes, scatter ? ring_.slot_bytes : call_bytes); !e.empty()) fail(e);
  if (ring_.slots < staged::MIN_SLOTS) return -1;
  if (oneshot && !staged::oneshot_fits(ring_, call_bytes)) return -1;  // larger than one slot
  Prepared p{-1, {0, 0, 0}, {0, 0, 0}, 0, count, dtype, op, 0, timeout, 0, 1, CallDesc{what, call_count}};
  p.staged = kind;
  prepared_.push_back(p);
  return (int)prepared_.size() - 1;
}

void Communicator::run_staged(const Prepared& p, uint64_t in_addr, uint64_t out_addr) {
  check_abort();
  begin_call(p.desc);
  const auto t0 = std::chrono::steady_clock::now();
  const bool scatter = p.staged == STAGED_SCATTER;
  const std::string kind = scatter                        ? " (staged reduce-scatter)"
                           : p.staged == STAGED_ONESHOT ? " (staged one-shot all-reduce)"
                           : p.staged == STAGED_GATHER  ? " (staged all-gather)"
                                                        : " (staged all-reduce)";
  auto wait = [&](int q, const auto& ready, const char* what) {
    wait_for_peer(ready, q, t0, p.timeout, [&](bool gone) {
      return (gone ? std::string("while this rank waited for it ") : std::string()) + what + kind;
    });
  };
  auto wake_peers = [&]() {
    for (int r = 0; r < n_; ++r)
      if (r != rank_) wake(r);
  };
  auto agree = [&](int q) {
    if (!agrees(q)) fail_diverged(q);  // in a staged call of this number, but not this call
  };
  if (p.staged == STAGED_ONESHOT || p.staged == STAGED_GATHER) {
    staged::run_oneshot(ring_, p.staged == STAGED_GATHER, (const char*)(uintptr_t)in_addr, (char*)(uintptr_t)out_addr, (uint64_t)p.chunk_elems,
                        DTYPE_SIZE[p.dtype], p.dtype, p.op, reduce_fn, wait, wake_peers, agree);
    return;
  }
  auto mismatch = [&](const std::string& msg) { fail(msg); };
  // an input in one of this rank's shared arrays is read by the peers from there
  const uint64_t bytes = (uint64_t)p.chunk_elems * DTYPE_SIZE[p.dtype] * (scatter ? n_ : 1);
  if (scatter && !out_addr) out_addr = in_addr + (uint64_t)rank_ * p.chunk_elems * DTYPE_SIZE[p.dtype];  // in place
  int64_t in_window = -1;
  uint64_t in_offset = 0;
  for (const auto& kv : windows_) {
    uint64_t base = (uint64_t)(uintptr_t)kv.second.base[rank_];
    if (base <= in_addr && in_addr + bytes <= base + kv.second.bytes) {
      in_window = kv.first;
      in_offset = in_addr - base;
      break;
    }
  }
  auto window_of = [&](int q, int64_t id, uint64_t offset, uint64_t len) -> const char* {
    auto it = windows_.find(id);
    if (it == windows_.end() || offset + len > it->second.bytes) return nullptr;
    return it->second.base[q] + offset;
  };
  staged::run(ring_, scatter, (const char*)(uintptr_t)in_addr, (char*)(uintptr_t)out_addr, (uint64_t)p.chunk_elems,
              DTYPE_SIZE[p.dtype], p.dtype, p.op, in_window, in_offset, reduce_fn, window_of, wait, wake_peers,
              agree, mismatch);
}

}  // namespace dataplane
