// The staged one-shot all-reduce: the one-shot algorithm of small calls
// (arborcc.runtime.direct: every rank sums all n inputs in rank order 0..n-1 into its
// output) run natively through the staging ring of staged_allreduce.hpp, instead of
// step by step through the FIFOs (n thread blocks, one slot handshake per pair of ranks);
// and the small all-gather the same way (arborcc.runtime.direct's all-gather: every rank
// sends its block to every peer), whose step 3 copies each peer's slot into its block of
// the output instead of summing.
//
// A call takes one ring slot g (the next of the rank's staged slices, as one slice of an
// owner all-reduce would), and rank r
//   1. copies its whole input into its slot g and publishes `copied` = g + 1 (IR: the
//      sends of its input to every peer; in place, the ring slot is the IR's scratch: the
//      input may be overwritten once it is staged),
//   2. waits until every peer has published slot g: it reads the n - 1 peers' `copied`
//      counters (one cache line each, in their staging headers), and checks each peer
//      makes the same call,
//   3. sums slot g of ranks 0, 1, ..., n-1 in that order into its output, in 16 KB pieces
//      (the chain of one piece stays in the L1 cache) with the reduction kernels the
//      interpreter uses: the verified program's order, so every rank ends bit-identical,
//   4. publishes `gathered` = g + 1: it has read every peer's slot g.
// It returns without waiting for its peers. A peer reuses its slot g only once every rank
// has gathered g (the owner path's rule, shared: both kinds of calls number their slots
// in one sequence), and it can never need to wait for that: to be writing slot g + slots
// (slots >= 4) it must have read this rank's slot g + 1 or later, which this rank fills
// only after gathering g. So step 4 wakes nobody, and a call costs one copy, one
// published counter, one wake of the peers and n - 1 counter reads besides the sum.
//
// Why read n - 1 counters rather than run a dissemination barrier (log2 n rounds of flags):
// every rank reads every peer's data anyway, so the all-to-all dependence is in the
// algorithm; the counters are read with independent loads that overlap, where the
// barrier's rounds are a chain of log2 n cache-line transfers (4 at 16 ranks) each one
// after the other, paid even when all ranks arrive together.

#ifndef ARBORCC_STAGED_ONESHOT_HPP
#define ARBORCC_STAGED_ONESHOT_HPP

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "staged_allreduce.hpp"

namespace staged {

// Whether a one-shot call of `bytes` fits the ring (its input in one slot).
inline bool oneshot_fits(const Ring& ring, uint64_t bytes) { return ring.slots >= MIN_SLOTS && bytes <= ring.slot_bytes; }

// One staged one-shot all-reduce (`gather` false) of `count` elements of `esize` bytes
// from `in` to `out` (the same address in place), or all-gather (`gather` true) of blocks
// of `count` elements from `in` into block r of `out` for rank r (in place `in` is `out`,
// the rank's block already in it); oneshot_fits must hold. `wait`, `wake`, `agree` and
// `reduce` as for run (staged_allreduce.hpp).
template <class Wait, class Wake, class Agree>
void run_oneshot(Ring& ring, bool gather, const char* in, char* out, uint64_t count, size_t esize, int dtype,
                 int op, Reduce reduce, Wait wait, Wake wake, Agree agree) {
  const int n = ring.nranks, me = ring.rank;
  const uint64_t bytes = count * esize, g = ring.slices++, seq = ++ring.calls;
  if (gather && in == out) in = out + (uint64_t)me * bytes;  // in place: the rank's block of the output
  Header* mine = ring.header(me);
  const int which = (int)(seq % 2);
  mine->input_window[which].store(-1, std::memory_order_relaxed);  // the ring holds the input
  mine->call.value.store(seq, std::memory_order_release);
  if (g >= (uint64_t)ring.slots)  // never waits (see above); kept as the slot's guard
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      Header* h = ring.header(q);
      const uint64_t need = g - ring.slots + 1;
      wait(q, [&] { return h->gathered.value.load(std::memory_order_acquire) >= need; }, "to free a staging slot");
    }
  std::memcpy(ring.slot(me, g), in, bytes);
  mine->copied.value.store(g + 1, std::memory_order_release);
  wake();
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    Header* h = ring.header(q);
    wait(q, [&] { return h->copied.value.load(std::memory_order_acquire) >= g + 1; }, "to stage its data");
    agree(q);  // the peer is in the call of this slot: the same call?
  }
  if (gather) {
    for (int q = 0; q < n; ++q) {
      char* block = out + (uint64_t)q * bytes;
      if (q != me) std::memcpy(block, ring.slot(q, g), bytes);
      else if (block != in) std::memcpy(block, in, bytes);
    }
  }
  const uint64_t piece = std::max<uint64_t>(1, (16u << 10) / esize);
  for (uint64_t p = 0; p < count && !gather; p += piece) {
    const uint64_t part = std::min(piece, count - p), off = p * esize;
    reduce(dtype, op, out + off, ring.slot(0, g) + off, ring.slot(1, g) + off, part);
    for (int q = 2; q < n; ++q) reduce(dtype, op, out + off, out + off, ring.slot(q, g) + off, part);
  }
  mine->reduced.value.store(g + 1, std::memory_order_release);
  mine->gathered.value.store(g + 1, std::memory_order_release);
}

}  // namespace staged

#endif
