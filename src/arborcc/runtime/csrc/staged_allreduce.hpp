// The staged all-reduce: the owner all-reduce (reduce-scatter + all-gather with one owner
// rank per share, arborcc.library.direct.owner_allreduce) run natively for caller-owned
// buffers, through each rank's persistent staging area in the communicator's segment; and
// the staged reduce-scatter (arborcc.library.direct.direct_reducescatter: its first half).
//
// Every rank maps every rank's staging area. A rank's area starts with its progress
// counters (one cache line each) and holds a ring of slots of `slot_bytes`; slice k of a
// call (elements [k x slice, (k+1) x slice) of the buffer) uses ring slot g mod R, where g
// counts the slices of all staged calls of the rank. Each slice is split into one share
// per rank (64-byte aligned). For each slice, rank r
//   1. copies its input's shares q != r into its slot ("copied": the messages to the
//      owners, IR step `send IN[q] to q`),
//   2. reduces its own share r: its input's share (the first operand, read from its own
//      buffer) with the peers' copies in the order of owner_allreduce's thread blocks
//      (peers ascending), into its output and into share r of its slot ("reduced": IR
//      steps `rrc` then `send OUT[r]`),
//   3. copies every peer q's reduced share q from q's slot into its output ("gathered":
//      IR step `recv OUT[q]`),
// with plain loads and stores: no system call, no page pinning. A rank whose input lies in
// a shared array (memory every rank maps) skips step 1: its peers read its shares
// straight from that array (it posts which array and where with each call). The three phases are
// software-pipelined over the slices (the copy of slice t, the reduction of slice t-1
// and the gathering of slice t-2 in one round), and counters are waited for per slice, so
// a rank reduces a slice while its peers still copy the next. A slot is reused only
// once every peer has gathered from it (its "gathered" counter), so a call returns
// without waiting for its peers: the next call's first slices go to other slots.
//
// Included by the data plane after the reduction kernels; the communicator supplies
// waiting (spin, yield, futex; liveness, abort and timeout checks) and waking.

#ifndef ARBORCC_STAGED_ALLREDUCE_HPP
#define ARBORCC_STAGED_ALLREDUCE_HPP

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

namespace staged {

struct alignas(64) Counter {
  std::atomic<uint64_t> value;
  char pad[56];
};

// The head of a rank's staging area (only that rank writes it).
struct Header {
  Counter copied;    // slices whose peer shares are in the ring (over all staged calls)
  Counter reduced;   // slices whose own share is reduced into the ring
  Counter gathered;  // slices this rank has gathered from every peer
  Counter call;      // staged calls started; where call c's input is, at [c % 2] (a rank
                     // finishes a reduce-scatter without waiting for its peers, so it may
                     // start call c + 1 before they read call c's; it cannot start c + 2
                     // before they started c + 1):
  std::atomic<int64_t> input_window[2];   // the shared array that holds its input (-1: none, the ring does)
  std::atomic<uint64_t> input_offset[2];  // and where in it
};

constexpr uint64_t HEADER_BYTES = 4096;
constexpr int MIN_SLOTS = 4;
constexpr int MAX_SLOTS = 4;  // more slots only spread a rank's small calls over more cache lines

// What one rank needs to run staged calls: where every rank's staging area is mapped
// in this process, and the ring's shape. `slices` counts this rank's slices so far.
struct Ring {
  int rank = 0, nranks = 0;
  char* area[64] = {};
  uint64_t slot_bytes = 0;
  int slots = 0;
  uint64_t slices = 0, calls = 0, shared_calls = 0;

  Header* header(int r) const { return (Header*)area[r]; }
  char* slot(int r, uint64_t g) const { return area[r] + HEADER_BYTES + (g % (uint64_t)slots) * slot_bytes; }
};

// The ring that fits an area of `area_bytes` with slots of at most `slot_bytes` (0 slots:
// the area is too small for a staged call).
inline void shape_ring(Ring& ring, uint64_t area_bytes, uint64_t slot_bytes) {
  ring.slots = 0;
  if (area_bytes <= HEADER_BYTES) return;
  uint64_t usable = area_bytes - HEADER_BYTES;
  slot_bytes = std::min<uint64_t>(slot_bytes, usable / MIN_SLOTS) / 64 * 64;
  if (slot_bytes < 4096) return;
  ring.slot_bytes = slot_bytes;
  ring.slots = (int)std::min<uint64_t>(MAX_SLOTS, usable / slot_bytes);
}

// Share q of a slice of m elements: [start(q), start(q + 1)), cut at 64-byte multiples.
inline uint64_t share_start(int q, int n, uint64_t m, size_t esize) {
  uint64_t unit = std::max<uint64_t>(1, 64 / esize);
  uint64_t units = (m + unit - 1) / unit;
  return std::min<uint64_t>(m, units * (uint64_t)q / (uint64_t)n * unit);
}

using Reduce = void (*)(int, int, void*, const void*, const void*, size_t);

// Where a staged call's shares lie. All-reduce: slice k is elements [k S, (k+1) S) of the
// buffer and share q a 64-byte-aligned part of it, at the same place in a ring slot and in
// the output. Reduce-scatter (the input holds one block of `count` elements per rank, the
// output rank r's reduced block): slice k is elements [k S, (k+1) S) of every block and
// share q that part of block q (S = the slot over n), at q x S in a slot and at k x S in
// the output; there is nothing to gather.
struct Shares {
  bool scatter;
  int n;
  uint64_t count, slice;
  size_t esize;

  uint64_t slices() const { return (count + slice - 1) / slice; }
  // share q of slice k: its first element in the input, its length, its first element in a slot
  void share(uint64_t k, int q, uint64_t& first, uint64_t& len, uint64_t& in_slot) const {
    const uint64_t lo = k * slice, m = std::min(count, lo + slice) - lo;
    if (scatter) {
      first = (uint64_t)q * count + lo;
      len = m;
      in_slot = (uint64_t)q * slice;
    } else {
      const uint64_t a = share_start(q, n, m, esize);
      first = lo + a;
      len = share_start(q + 1, n, m, esize) - a;
      in_slot = a;
    }
  }
  // where the owner's result of its share of slice k goes in the output (first element)
  uint64_t result_at(uint64_t k, uint64_t first) const { return scatter ? k * slice : first; }
};

// One staged all-reduce (`scatter` false: `count` elements from `in` to `out`, the same
// address in place) or reduce-scatter (`scatter` true: `in` holds one block of `count`
// elements per rank, `out` receives this rank's reduced block; in place it is that block
// of `in`). Elements have `esize` bytes. `in` lies at `in_offset` of this rank's shared
// array `in_window` (-1: not in one), and `window_of(q, id, offset, bytes)` is where rank
// q's shared array `id` holds `offset` in this process (nullptr if not mapped here or
// shorter than `offset + bytes`). `wait(peer, ready, what)` returns once `ready()` holds
// (or throws); `wake()` tells every peer that a counter of this rank moved;
// `agree(peer)` throws (and fails the peers' calls) unless the peer, found in its staged
// call of this number, makes the same call as this rank; `fail(message)` throws (and
// fails the peers' calls); `reduce` is the kernel dispatch (dtype, op, dst, a, b, n).
template <class WindowOf, class Wait, class Wake, class Agree, class Fail>
void run(Ring& ring, bool scatter, const char* in, char* out, uint64_t count, size_t esize, int dtype, int op,
         int64_t in_window, uint64_t in_offset, Reduce reduce, WindowOf window_of, Wait wait, Wake wake, Agree agree,
         Fail fail) {
  const int n = ring.nranks, me = ring.rank;
  const Shares sh{scatter, n, count, std::max<uint64_t>(1, ring.slot_bytes / esize / (scatter ? n : 1)), esize};
  const uint64_t nslices = sh.slices(), in_bytes = count * esize * (scatter ? n : 1);
  const uint64_t g0 = ring.slices, seq = ++ring.calls;
  ring.slices += nslices;
  Header* mine = ring.header(me);
  const int which = (int)(seq % 2);
  mine->input_window[which].store(in_window, std::memory_order_relaxed);
  mine->input_offset[which].store(in_offset, std::memory_order_relaxed);
  mine->call.value.store(seq, std::memory_order_release);
  if (in_window >= 0) ++ring.shared_calls;
  // each peer's input: its shared array (found at its first slice), else its ring slots
  const char* peer_input[64] = {};
  // 16 KB pieces of a share: the chain of reductions of one piece stays in the L1 cache
  const uint64_t piece = std::max<uint64_t>(1, (16u << 10) / esize);
  uint64_t first, len, in_slot;
  for (uint64_t t = 0; t < nslices + 2; ++t) {
    if (t < nslices) {  // copy slice t's peer shares into the ring
      const uint64_t g = g0 + t;
      if (g >= (uint64_t)ring.slots)
        for (int q = 0; q < n; ++q) {
          if (q == me) continue;
          Header* h = ring.header(q);
          const uint64_t need = g - ring.slots + 1;
          wait(q, [&] { return h->gathered.value.load(std::memory_order_acquire) >= need; }, "to free a staging slot");
        }
      char* dst = ring.slot(me, g);
      for (int q = 0; q < n && in_window < 0; ++q) {
        if (q == me) continue;
        sh.share(t, q, first, len, in_slot);
        std::memcpy(dst + in_slot * esize, in + first * esize, len * esize);
      }
      mine->copied.value.store(g + 1, std::memory_order_release);
      wake();
    }
    if (t >= 1 && t <= nslices) {  // reduce my share of slice t-1
      const uint64_t k = t - 1, g = g0 + k;
      for (int q = 0; q < n; ++q) {
        if (q == me) continue;
        Header* h = ring.header(q);
        wait(q, [&] {
          return h->copied.value.load(std::memory_order_acquire) >= g + 1 &&
                 h->call.value.load(std::memory_order_acquire) >= seq;
        }, "to stage its data");
        if (k > 0) continue;
        // the peer is in this call or the next (not further before this rank reduced): the same call?
        agree(q);
        int64_t id = h->input_window[which].load(std::memory_order_relaxed);
        if (id >= 0 &&
            !(peer_input[q] = window_of(q, id, h->input_offset[which].load(std::memory_order_relaxed), in_bytes)))
          fail("rank " + std::to_string(q) + "'s input lies in its shared array " + std::to_string(id) +
               ", which this rank has not mapped or which is too small (every rank must allocate the same shared "
               "arrays)");
      }
      sh.share(k, me, first, len, in_slot);
      char* result = out + sh.result_at(k, first) * esize;
      char* published = ring.slot(me, g) + in_slot * esize;
      for (uint64_t p = 0; p < len; p += piece) {
        const uint64_t part = std::min(piece, len - p), off = p * esize;
        const char* acc = in + first * esize + off;
        bool first_peer = true;
        for (int q = 0; q < n; ++q) {
          if (q == me) continue;
          const char* theirs = peer_input[q] ? peer_input[q] + first * esize : ring.slot(q, g) + in_slot * esize;
          reduce(dtype, op, result + off, first_peer ? acc : result + off, theirs + off, part);
          first_peer = false;
        }
        if (first_peer && result + off != acc) std::memcpy(result + off, acc, part * esize);  // one rank
        if (!scatter) std::memcpy(published + off, result + off, part * esize);
      }
      mine->reduced.value.store(g + 1, std::memory_order_release);
      if (scatter) mine->gathered.value.store(g + 1, std::memory_order_release);  // nothing to gather
      wake();
    }
    if (t >= 2 && !scatter) {  // gather the peers' reduced shares of slice t-2
      const uint64_t k = t - 2, g = g0 + k;
      for (int i = 1; i < n; ++i) {
        const int q = (me + i) % n;
        Header* h = ring.header(q);
        wait(q, [&] { return h->reduced.value.load(std::memory_order_acquire) >= g + 1; }, "to reduce its share");
        sh.share(k, q, first, len, in_slot);
        std::memcpy(out + first * esize, ring.slot(q, g) + in_slot * esize, len * esize);
      }
      mine->gathered.value.store(g + 1, std::memory_order_release);
      wake();
    }
  }
  // a reduce-scatter gathers nothing: its input may be a shared array the peers still read
  if (scatter && in_window >= 0)
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      Header* h = ring.header(q);
      wait(q, [&] { return h->reduced.value.load(std::memory_order_acquire) >= g0 + nslices; },
           "to read this rank's shared array");
    }
}

}  // namespace staged

#endif
