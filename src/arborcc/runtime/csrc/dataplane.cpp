// arborcc's shared-memory data plane: an interpreter of the IR (MSCCL's model: ranks ->
// thread blocks with one send and one receive peer and a channel -> ordered steps).
//
// One process per rank; one shared-memory segment per communicator holds a control
// block per rank (a futex word to sleep on), and per connection (sender, receiver,
// channel) a FIFO of slots. A message is either INLINE (its bytes copied into the slot)
// or REMOTE (the slot holds the sender's addresses and the receiver reads them straight
// into its destination with process_vm_readv: one copy instead of two). A REMOTE message
// pins its source: before any step of the sender writes to a pinned region, the message
// is demoted to INLINE (its bytes copied into the slot) unless the receiver is reading it,
// so the IR's semantics (a send captures its data when it is posted) hold exactly.
//
// A rank's thread blocks are interpreted by a scheduler on the calling thread (or, when
// asked, by a pool of worker threads, one per thread block); a thread block that cannot
// move (dependency, empty input FIFO, full output FIFO) yields to the others, and when
// none can move the rank spins briefly and then sleeps on its futex until a peer posts or
// consumes a message addressed to it. The whole program runs once per tile (a slice of
// every chunk), so large buffers are pipelined.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <linux/futex.h>
#include <map>
#include <mutex>
#include <signal.h>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <thread>
#include <sched.h>
#include <unistd.h>
#include <vector>
#include <immintrin.h>

namespace py = pybind11;

namespace {

enum DType { DT_F32 = 0, DT_F64 = 1, DT_F16 = 2, DT_BF16 = 3, DT_I32 = 4, DT_I64 = 5, DT_U8 = 6 };
enum RedOp { OP_SUM = 0, OP_PROD = 1, OP_MIN = 2, OP_MAX = 3 };
enum StepOp { S_SEND = 0, S_RECV, S_REDUCE, S_COPY, S_RRC, S_RRS, S_RCS, S_RRCS, S_NOP };

const size_t DTYPE_SIZE[] = {4, 8, 2, 2, 4, 8, 1};

static inline float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do { ++e; mant <<= 1; } while (!(mant & 0x400));
      u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t float_to_half(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00);  // NaN
  if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  // overflow to inf (after rounding)
  if (absu < 0x38800000u) {                                   // subnormal half or zero
    if (absu < 0x33000000u) return (uint16_t)sign;
    uint32_t e = absu >> 23, mant = (absu & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;  // 14 + (113 - e)
    uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return (uint16_t)(sign | r);
  }
  uint32_t r = absu - 0x38000000u;  // rebias exponent
  uint32_t lsb = (r >> 13) & 1;
  r += 0xfff + lsb;
  return (uint16_t)(sign | (r >> 13));
}

}  // namespace

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define KERNEL_NAMESPACE kernels_avx2
#define KERNEL_HAS_F16C 1
#include "reduce_kernels.hpp"
#undef KERNEL_NAMESPACE
#undef KERNEL_HAS_F16C
#pragma GCC pop_options

#define KERNEL_NAMESPACE kernels_generic
#define KERNEL_HAS_F16C 0
#include "reduce_kernels.hpp"
#undef KERNEL_NAMESPACE
#undef KERNEL_HAS_F16C

namespace {

using ReduceFn = void (*)(int, int, void*, const void*, const void*, size_t);

static bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
}

static const bool HAVE_AVX2 = cpu_has_avx2();
static const ReduceFn reduce_fn = HAVE_AVX2 ? kernels_avx2::reduce : kernels_generic::reduce;

// Copy with non-temporal stores (AVX2 streaming stores, which write whole cache lines to
// memory without first reading the destination into the cache: a plain store to a line
// not in the cache reads it first, so a large copy moves 3 bytes per byte copied, this
// one 2). Only for buffers larger than the caches: the next reader of the destination
// then finds it in memory, not in the cache.
__attribute__((target("avx2"))) static void stream_copy_avx2(char* dst, const char* src, size_t n) {
  size_t head = (32 - ((uintptr_t)dst & 31)) & 31;
  if (head > n) head = n;
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __m256i a = _mm256_loadu_si256((const __m256i*)(src + i));
    __m256i b = _mm256_loadu_si256((const __m256i*)(src + i + 32));
    __m256i c = _mm256_loadu_si256((const __m256i*)(src + i + 64));
    __m256i d = _mm256_loadu_si256((const __m256i*)(src + i + 96));
    _mm256_stream_si256((__m256i*)(dst + i), a);
    _mm256_stream_si256((__m256i*)(dst + i + 32), b);
    _mm256_stream_si256((__m256i*)(dst + i + 64), c);
    _mm256_stream_si256((__m256i*)(dst + i + 96), d);
  }
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();  // streaming stores are weakly ordered: complete them before anyone is told
}

// dst = src (n bytes, not overlapping), with streaming stores when `streaming` and the CPU has AVX2.
static void copy_bytes(char* dst, const char* src, size_t n, bool streaming) {
  if (dst == src || n == 0) return;
  if (streaming && HAVE_AVX2 && n >= 4096) {
    stream_copy_avx2(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

// ---------------------------------------------------------------------------------------
// The shared segment

constexpr uint64_t MAGIC = 0x61726230726363ULL + 4;  // bump when the layout changes
constexpr int MAX_RANKS = 64;
constexpr int MAX_SLOTS = 16;
constexpr int MAX_PIECES = 80;  // a step moves at most 72 chunks (MSCCL's cnt limit)

enum SlotState : uint32_t { EMPTY = 0, INLINE_DATA = 1, REMOTE = 2, CLAIMED = 3, DEMOTING = 4 };

struct SlotDesc {
  std::atomic<uint32_t> state;
  uint32_t npieces;
  uint64_t call_id;
  uint64_t piece_bytes;
  // An inline message's bytes start at data_off (from the segment's start): its own
  // slot's data, or, for a message that shares another's bytes (the same data sent to
  // several peers is copied once), that message's slot; owner_off then locates that
  // message's descriptor, whose `sharers` counts the unread messages that share it (its
  // slot is not reused before they are read).
  uint64_t data_off;
  uint64_t owner_off;
  std::atomic<uint32_t> sharers;
  uint64_t addrs[MAX_PIECES];
};

struct alignas(64) ConnCtl {
  std::atomic<uint64_t> head;  // messages posted (sender)
  char pad1[56];
  std::atomic<uint64_t> tail;  // messages consumed (receiver)
  char pad2[56];
  SlotDesc slots[MAX_SLOTS];
};

struct alignas(64) RankCell {
  std::atomic<uint32_t> seq;       // bumped by anyone who may unblock this rank
  std::atomic<uint32_t> sleeping;  // threads of this rank sleeping on seq
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> attached;
  std::atomic<uint64_t> probe_addr;  // address of a value peers read to test cross-memory attach
  std::atomic<uint32_t> cma_ok;      // 1 ok, 2 failed
  std::atomic<uint32_t> barrier_gen;
  // Collectives on shared arrays (communicator-owned windows that every rank maps): the
  // calls this rank has posted and finished, and where the last posted call's send
  // buffer is (its window, its byte offset there, the bytes of one block).
  std::atomic<uint64_t> win_posted;
  std::atomic<uint64_t> win_done;
  std::atomic<int64_t> win_id;
  std::atomic<uint64_t> win_off;
  std::atomic<uint64_t> win_bytes;
};

struct Header {
  uint64_t magic;
  uint32_t nranks, channels, slots, pad;
  uint64_t slot_bytes, total_size, conn_off, data_off;
  std::atomic<int32_t> abort_rank;  // rank + 1 of the first rank that failed; 0 none
  char abort_msg[480];
  RankCell ranks[MAX_RANKS];
  // values rank 0 publishes for a numbered call (the slice size chosen by online tuning)
  std::atomic<uint64_t> published_seq[64];
  std::atomic<int64_t> published_val[64];
};

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const struct timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

static bool process_alive(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (!f) return false;
  char buf[512];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char* p = strrchr(buf, ')');
  if (!p || p[1] != ' ') return true;
  char state = p[2];
  return state != 'Z' && state != 'X';
}

// ---------------------------------------------------------------------------------------
// A rank's view of the segment

class Segment {
 public:
  Segment(const std::string& name, bool create, int nranks, int channels, int slots, uint64_t slot_bytes)
  {
    int fd;
    if (create) {
      if (nranks < 1 || nranks > MAX_RANKS) throw CommError("a communicator holds 1-64 ranks");
      if (slots < 1 || slots > MAX_SLOTS) throw CommError("FIFO slots must be 1-16");
      size_t conn_off = align_up(sizeof(Header), 4096);
      size_t nconn = (size_t)nranks * nranks * channels;
      size_t data_off = align_up(conn_off + nconn * sizeof(ConnCtl), 4096);
      size_t total = data_off + nconn * slots * slot_bytes;
      fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
      if (fd < 0) throw CommError("cannot create shared memory /dev/shm" + name + ": " + strerror(errno));
      if (ftruncate(fd, (off_t)total) != 0) {
        int e = errno;
        close(fd);
        shm_unlink(name.c_str());
        throw CommError("cannot size shared memory " + name + ": " + strerror(e));
      }
      size_ = total;
      base_ = (char*)mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
      close(fd);
      if (base_ == MAP_FAILED) {
        shm_unlink(name.c_str());
        throw CommError("cannot map shared memory " + name);
      }
      hdr_ = (Header*)base_;
      hdr_->nranks = nranks;
      hdr_->channels = channels;
      hdr_->slots = slots;
      hdr_->slot_bytes = slot_bytes;
      hdr_->total_size = total;
      hdr_->conn_off = conn_off;
      hdr_->data_off = data_off;
      std::atomic_thread_fence(std::memory_order_seq_cst);
      __atomic_store_n(&hdr_->magic, MAGIC, __ATOMIC_RELEASE);
    } else {
      fd = shm_open(name.c_str(), O_RDWR, 0600);
      if (fd < 0) throw CommError("cannot open shared memory /dev/shm" + name + ": " + strerror(errno));
      struct stat st;
      fstat(fd, &st);
      size_ = (size_t)st.st_size;
      base_ = (char*)mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
      close(fd);
      if (base_ == MAP_FAILED) throw CommError("cannot map shared memory " + name);
      hdr_ = (Header*)base_;
      if (__atomic_load_n(&hdr_->magic, __ATOMIC_ACQUIRE) != MAGIC)
        throw CommError("shared memory " + name + " is not an arborcc communicator of this version");
    }
  }
  ~Segment() {
    if (base_ && base_ != MAP_FAILED) munmap(base_, size_);
  }
  Header* hdr() const { return hdr_; }
  int nranks() const { return (int)hdr_->nranks; }
  int channels() const { return (int)hdr_->channels; }
  int slots() const { return (int)hdr_->slots; }
  uint64_t slot_bytes() const { return hdr_->slot_bytes; }
  ConnCtl* conn(int src, int dst, int ch) const {
    return (ConnCtl*)(base_ + hdr_->conn_off) + ((size_t)src * hdr_->nranks + dst) * hdr_->channels + ch;
  }
  char* base() const { return base_; }
  uint64_t offset(const void* p) const { return (uint64_t)((const char*)p - base_); }
  char* slot_data(int src, int dst, int ch, uint64_t slot) const {
    size_t idx = ((size_t)src * hdr_->nranks + dst) * hdr_->channels + ch;
    return base_ + hdr_->data_off + (idx * hdr_->slots + slot) * hdr_->slot_bytes;
  }

 private:
  char* base_ = nullptr;
  size_t size_ = 0;
  Header* hdr_ = nullptr;
};

// ---------------------------------------------------------------------------------------
// A program: one rank's thread blocks, already lowered to call buffers (0 send, 1 receive,
// 2 scratch) and chunk indices in them.

struct TB {
  int send, recv, channel, first, nsteps;
};
struct Step {
  int op, sbuf, soff, dbuf, doff, cnt, dep_tb, dep_step;
};

struct Program {
  std::vector<TB> tbs;
  std::vector<Step> steps;
  int max_cnt = 1;
  // Sends read only chunks that no step writes (and no step sends from a slot or from
  // what it just wrote): a REMOTE message of it never needs demoting, so its messages
  // need not fit a slot when cross-memory attach carries them.
  bool sends_unwritten = false;
  // No step reduces: nothing gains from cache-sized slices.
  bool copy_only = true;
  // Lowest and highest chunk index each call buffer's steps touch (-1: none).
  int lo_chunk[3] = {-1, -1, -1}, hi_chunk[3] = {-1, -1, -1};
  // The order in which the scheduler visits thread blocks: those that send first (a
  // peer can start on a message while this rank copies), then those that receive,
  // then local ones.
  std::vector<int> order;
};

// Where a call's buffers are and how chunk indices map to elements.
struct Geometry {
  uint64_t addr[3];
  int64_t chunks_per_block[3];
  int64_t base[3];
  int64_t block_stride;  // elements between blocks
  int64_t chunk_elems;
  size_t esize;
};

struct Pieces {
  int n = 0;
  uint64_t len = 0;  // bytes of each piece
  uint64_t addr[MAX_PIECES];
};

// ---------------------------------------------------------------------------------------

class Communicator {
 public:
  Communicator(const std::string& name, int rank, bool create, int nranks, int channels, int slots,
               uint64_t slot_bytes)
      : seg_(name, create, nranks, channels, slots, slot_bytes), rank_(rank) {
    n_ = seg_.nranks();
    if (rank < 0 || rank >= n_) throw CommError("rank " + std::to_string(rank) + " outside the communicator");
    RankCell& me = seg_.hdr()->ranks[rank_];
    me.pid.store(getpid());
    me.probe_addr.store((uint64_t)(uintptr_t)&probe_value_);
    me.attached.store(1, std::memory_order_seq_cst);
  }

  int rank() const { return rank_; }
  uint64_t window_calls() const { return win_calls_; }
  int nranks() const { return n_; }
  bool cma() const { return cma_; }

  // Wait until every rank has attached (then the name can be unlinked) and test
  // cross-memory attach with every peer.
  void wait_attached(double timeout) {
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

  void abort(const std::string& msg) {
    int expected = 0;
    if (seg_.hdr()->abort_rank.compare_exchange_strong(expected, rank_ + 1)) {
      snprintf(seg_.hdr()->abort_msg, sizeof seg_.hdr()->abort_msg, "%s", msg.c_str());
    }
    for (int r = 0; r < n_; ++r) wake(r);
  }

  std::string abort_message() const {
    int a = seg_.hdr()->abort_rank.load();
    if (!a) return "";
    return "rank " + std::to_string(a - 1) + " failed: " + std::string(seg_.hdr()->abort_msg);
  }

  int register_program(const std::vector<std::vector<int>>& tbs, const std::vector<std::vector<int>>& steps) {
    Program p;
    for (auto& t : tbs) {
      if (t.size() != 5) throw CommError("thread block rows have 5 fields");
      p.tbs.push_back({t[0], t[1], t[2], t[3], t[4]});
      if (t[2] < 0 || t[2] >= seg_.channels())
        throw CommError("channel " + std::to_string(t[2]) + " exceeds the communicator's " +
                        std::to_string(seg_.channels()) + " channels");
      for (int peer : {t[0], t[1]})
        if (peer >= n_) throw CommError("peer rank " + std::to_string(peer) + " outside the communicator");
    }
    for (auto& s : steps) {
      if (s.size() != 8) throw CommError("step rows have 8 fields");
      p.steps.push_back({s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]});
      if (s[5] > MAX_PIECES) throw CommError("a step moves more than 80 chunks");
      p.max_cnt = std::max(p.max_cnt, s[5]);
    }
    classify(p);
    programs_.push_back(std::move(p));
    return (int)programs_.size() - 1;
  }

  static void classify(Program& p) {
    // per call buffer, the chunks some send reads and the chunks some step writes
    std::vector<char> sent[3], written[3];
    auto mark = [](std::vector<char>& v, int first, int cnt) {
      if (first < 0 || cnt <= 0) return;
      if ((int)v.size() < first + cnt) v.resize(first + cnt, 0);
      for (int c = first; c < first + cnt; ++c) v[c] = 1;
    };
    bool slot_sends = false;
    for (const Step& st : p.steps) {
      for (int side = 0; side < 2; ++side) {
        int b = side ? st.dbuf : st.sbuf, c = side ? st.doff : st.soff;
        if (b < 0 || b > 2) continue;
        if (p.lo_chunk[b] < 0 || c < p.lo_chunk[b]) p.lo_chunk[b] = c;
        p.hi_chunk[b] = std::max(p.hi_chunk[b], c + st.cnt - 1);
      }
      switch (st.op) {
        case S_SEND:
          if (st.sbuf >= 0 && st.sbuf <= 2) mark(sent[st.sbuf], st.soff, st.cnt);
          break;
        case S_RECV:
        case S_COPY:
          if (st.dbuf >= 0 && st.dbuf <= 2) mark(written[st.dbuf], st.doff, st.cnt);
          break;
        case S_REDUCE:
        case S_RRC:
          if (st.dbuf >= 0 && st.dbuf <= 2) mark(written[st.dbuf], st.doff, st.cnt);
          p.copy_only = false;
          break;
        case S_NOP:
          break;
        default:  // receive-and-send steps send from a slot or from what they just wrote
          slot_sends = true;
          p.copy_only = false;
      }
    }
    for (int t = 0; t < (int)p.tbs.size(); ++t) p.order.push_back(t);
    std::stable_sort(p.order.begin(), p.order.end(), [&](int a, int b) {
      auto rank = [&](int t) { return p.tbs[t].send >= 0 ? 0 : p.tbs[t].recv >= 0 ? 1 : 2; };
      return rank(a) < rank(b);
    });
    // chunks of one call buffer never overlap; the caller's send and receive buffers
    // are checked apart at each call (run())
    p.sends_unwritten = !slot_sends;
    for (int b = 0; b < 3; ++b)
      for (size_t c = 0; c < std::min(sent[b].size(), written[b].size()); ++c)
        if (sent[b][c] && written[b][c]) p.sends_unwritten = false;
  }

  // The bytes [lo, hi) of call buffer b that a program's steps touch (lo == hi: none).
  static void extent(const Program& p, const Geometry& g, int b, uint64_t& lo, uint64_t& hi) {
    lo = hi = 0;
    if (p.lo_chunk[b] < 0 || !g.addr[b]) return;
    lo = chunk_addr(g, b, p.lo_chunk[b], 0);
    hi = chunk_addr(g, b, p.hi_chunk[b], g.chunk_elems);
  }

  // Everything about a call except its buffers, stored once per call shape.
  int prepare(int program, std::vector<int64_t> cpb, std::vector<int64_t> base, int64_t block_stride,
              int64_t chunk_elems, int dtype, int op, int64_t tile_elems, double timeout, uint64_t cma_threshold,
              uint64_t reduce_cma_threshold, int workers) {
    if (dtype < 0 || dtype > DT_U8) throw CommError("unknown dtype code");
    if (op < 0 || op > OP_MAX) throw CommError("unknown op code");
    // Programs that reduce read messages below reduce_cma_threshold from the slots: the
    // sender copies once whatever the number of receivers (they share the slot), the
    // receivers reduce straight from it, no system call, and the sender need not wait
    // for its readers at the end of the call. Programs that only copy gain from the
    // single copy of cross-memory attach from a smaller size on.
    const Program& prog = programs_.at(program);
    Prepared p{program, {cpb.at(0), cpb.at(1), cpb.at(2)}, {base.at(0), base.at(1), base.at(2)}, block_stride,
               chunk_elems, dtype, op, tile_elems, timeout,
               prog.copy_only ? cma_threshold : reduce_cma_threshold, workers};
    prepared_.push_back(p);
    return (int)prepared_.size() - 1;
  }

  // How a rank waits: spin for `spin_seconds`, then yield the CPU for `yield_seconds`,
  // then sleep on its futex.
  void set_waiting(double spin_seconds, double yield_seconds) {
    spin_seconds_ = spin_seconds;
    yield_seconds_ = yield_seconds;
  }

  void run_prepared(int handle, uint64_t in_addr, uint64_t out_addr, uint64_t scratch_addr) {
    const Prepared& p = prepared_.at(handle);
    run(p.program, in_addr, out_addr, scratch_addr, p.cpb, p.base, p.block_stride, p.chunk_elems, p.dtype, p.op,
        p.tile_elems, p.timeout, p.cma_threshold, p.workers);
  }

  // Run a registered program once over the buffers (called with the GIL released).
  void run(int program, uint64_t in_addr, uint64_t out_addr, uint64_t scratch_addr, const std::vector<int64_t>& cpb,
           const std::vector<int64_t>& base, int64_t block_stride, int64_t chunk_elems, int dtype, int op,
           int64_t tile_elems, double timeout, uint64_t cma_threshold, int workers) {
    const Program& prog = programs_.at(program);
    if (dtype < 0 || dtype > DT_U8) throw CommError("unknown dtype code");
    Geometry g;
    g.addr[0] = in_addr;
    g.addr[1] = out_addr;
    g.addr[2] = scratch_addr;
    for (int b = 0; b < 3; ++b) {
      g.chunks_per_block[b] = cpb.at(b) > 0 ? cpb[b] : INT64_MAX;
      g.base[b] = base.at(b);
    }
    g.block_stride = block_stride;
    g.chunk_elems = chunk_elems;
    g.esize = DTYPE_SIZE[dtype];
    if (chunk_elems <= 0) return;
    // Every message must fit one slot, so a pinned REMOTE message can always be demoted;
    // unless no message ever needs demoting: cross-memory attach carries every message of
    // at least cma_threshold bytes, the program sends only from buffers it never writes,
    // and the caller's send and receive buffers do not overlap.
    const bool use_cma = cma_ && cma_threshold > 0;
    int64_t max_tile = (int64_t)(seg_.slot_bytes() / (g.esize * prog.max_cnt));
    if (max_tile < 1) throw CommError("slot too small for one element of every chunk of a step");
    int64_t tile = std::min<int64_t>(tile_elems > 0 ? tile_elems : chunk_elems, chunk_elems);
    if (use_cma && prog.sends_unwritten && cma_threshold <= seg_.slot_bytes()) {
      uint64_t in_lo, in_hi, out_lo, out_hi;
      extent(prog, g, 0, in_lo, in_hi);
      extent(prog, g, 1, out_lo, out_hi);
      bool apart = in_lo == in_hi || out_lo == out_hi || in_hi <= out_lo || out_hi <= in_lo;
      // a program that only copies original data gains nothing from slices (no step
      // feeds another rank's next one, nothing to keep in cache): one message per chunk
      if (apart && prog.copy_only) tile = chunk_elems;
      if (!apart) tile = std::min(tile, max_tile);
    } else {
      tile = std::min(tile, max_tile);
    }
    Call call{prog, g, dtype, op, tile, (chunk_elems + tile - 1) / tile, timeout, use_cma, cma_threshold,
              ++call_id_, workers == 1};
    execute(call, workers);
  }

  // rank 0 publishes `value` for call `seq`; the other ranks wait for it.
  void publish(uint64_t seq, int64_t value) {
    Header* h = seg_.hdr();
    h->published_val[seq % 64].store(value, std::memory_order_relaxed);
    h->published_seq[seq % 64].store(seq, std::memory_order_release);
    for (int r = 0; r < n_; ++r)
      if (r != rank_) wake(r);
  }

  int64_t wait_published(uint64_t seq, double timeout) {
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

  void barrier(double timeout) {
    // every rank bumps its generation and waits for all others to reach it
    uint64_t gen = ++barrier_gen_;
    RankCell& me = seg_.hdr()->ranks[rank_];
    me.barrier_gen.store((uint32_t)gen);
    for (int r = 0; r < n_; ++r) wake(r);
    auto t0 = std::chrono::steady_clock::now();
    auto last_check = t0;
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
          if (elapsed(t0) > timeout)
            fail("barrier timed out after " + fmt(timeout) + " s waiting for rank " + std::to_string(r));
        }
        wait_change(s, 2000000);
      }
    }
  }

  // ---- shared arrays: windows of memory that every rank maps ---------------------------
  //
  // Window `id` of a rank is the shared-memory object <prefix><its pid><suffix> of
  // `bytes` bytes that the rank created and mapped at `own_addr` (arborcc.runtime.windows
  // does that, and owns that mapping). Collective: every rank maps every peer's window of
  // the same id; the caller unlinks its own name afterwards (mapped, the memory stays).
  void map_window(int64_t id, uint64_t own_addr, uint64_t bytes, const std::string& prefix, const std::string& suffix,
                  double timeout) {
    if (windows_.count(id)) throw CommError("shared array " + std::to_string(id) + " is already mapped");
    RankCell& me = seg_.hdr()->ranks[rank_];
    me.win_id.store(id);
    me.win_bytes.store(bytes);
    barrier(timeout);
    Window w;
    w.bytes = bytes;
    w.base.assign(n_, nullptr);
    w.base[rank_] = (char*)(uintptr_t)own_addr;
    try {
      for (int p = 0; p < n_; ++p) {
        if (p == rank_) continue;
        RankCell& peer = seg_.hdr()->ranks[p];
        if (peer.win_id.load() != id || peer.win_bytes.load() != bytes)
          fail("rank " + std::to_string(p) + " allocated shared array " + std::to_string(peer.win_id.load()) +
               " of " + std::to_string(peer.win_bytes.load()) + " bytes where this rank allocated array " +
               std::to_string(id) + " of " + std::to_string(bytes) + " bytes (every rank must allocate the same "
               "shared arrays in the same order)");
        std::string name = prefix + std::to_string(peer.pid.load()) + suffix;
        int fd = shm_open(name.c_str(), O_RDWR, 0600);
        if (fd < 0) fail("cannot open rank " + std::to_string(p) + "'s shared array /dev/shm" + name + ": " + strerror(errno));
        void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        close(fd);
        if (m == MAP_FAILED) fail("cannot map rank " + std::to_string(p) + "'s shared array " + name + ": " + strerror(errno));
        w.base[p] = (char*)m;
      }
    } catch (...) {
      unmap_peers(w);
      throw;
    }
    windows_[id] = std::move(w);
    barrier(timeout);
  }

  // Forget window `id`: unmap the peers' windows (this rank's own mapping belongs to its caller).
  void unmap_window(int64_t id) {
    auto it = windows_.find(id);
    if (it == windows_.end()) return;
    unmap_peers(it->second);
    windows_.erase(it);
  }

  // All-gather (`root` < 0) or broadcast from `root` on shared arrays: this rank's send
  // buffer is `bytes` bytes at offset `send_off` of its window `id`; every rank reads its
  // peers' blocks straight from their windows with plain loads (no system call, no page
  // pinning) into `out_addr` (block p of the output: rank p's send buffer; a broadcast's
  // output: the root's). Outputs of at least `stream_bytes` bytes (0: never) are written
  // with streaming stores. A call returns once every peer has read this rank's block.
  void window_collective(int64_t id, uint64_t send_off, uint64_t bytes, uint64_t out_addr, int root,
                         uint64_t stream_bytes, int threads, double timeout) {
    check_abort();
    auto it = windows_.find(id);
    if (it == windows_.end()) throw CommError("rank " + std::to_string(rank_) + ": no shared array " + std::to_string(id));
    if (send_off + bytes > it->second.bytes)
      throw CommError("rank " + std::to_string(rank_) + ": the send buffer ends outside its shared array");
    Header* h = seg_.hdr();
    RankCell& me = h->ranks[rank_];
    const uint64_t seq = ++win_calls_;
    me.win_id.store(id, std::memory_order_relaxed);
    me.win_off.store(send_off, std::memory_order_relaxed);
    me.win_bytes.store(bytes, std::memory_order_relaxed);
    me.win_posted.store(seq, std::memory_order_release);
    for (int r = 0; r < n_; ++r)
      if (r != rank_) wake(r);
    const bool gather = root < 0;
    const bool streaming = stream_bytes > 0 && bytes * (gather ? n_ : 1) >= stream_bytes;
    char* out = (char*)(uintptr_t)out_addr;
    const char* own = it->second.base[rank_] + send_off;
    if (gather || root == rank_) copy_bytes(gather ? out + (uint64_t)rank_ * bytes : out, own, bytes, streaming);
    // the peers' blocks in the order they are posted (ranks start on different peers)
    std::vector<int> pending;
    for (int k = 1; k < n_; ++k)
      if (gather || (rank_ != root && (rank_ + k) % n_ == root)) pending.push_back((rank_ + k) % n_);
    auto read_peers = [&](std::vector<int> peers) {
      while (!peers.empty()) {
        int p = wait_any(peers, &RankCell::win_posted, seq, "to post its send buffer", timeout);
        RankCell& peer = h->ranks[p];
        int64_t pid = peer.win_id.load(std::memory_order_relaxed);
        uint64_t off = peer.win_off.load(std::memory_order_relaxed), pbytes = peer.win_bytes.load(std::memory_order_relaxed);
        auto pw = windows_.find(pid);
        if (pbytes != bytes || pw == windows_.end() || off + bytes > pw->second.bytes)
          fail("rank " + std::to_string(p) + " sent " + std::to_string(pbytes) + " bytes of shared array " +
               std::to_string(pid) + ", this rank expected " + std::to_string(bytes) + " bytes (do all ranks make "
               "the same calls with the same sizes?)");
        copy_bytes(gather ? out + (uint64_t)p * bytes : out, pw->second.base[p] + off, bytes, streaming);
      }
    };
    // with `threads` > 1, the peers' blocks are split over that many threads (while one
    // waits for a peer, another copies; see Options.workers)
    int nthreads = std::max(1, std::min<int>(threads, (int)pending.size()));
    if (nthreads == 1) {
      read_peers(pending);
    } else {
      std::vector<std::vector<int>> groups(nthreads);
      for (size_t i = 0; i < pending.size(); ++i) groups[i % nthreads].push_back(pending[i]);
      on_pool(nthreads, [&](int w) { read_peers(groups[w]); });
    }
    pending.clear();
    me.win_done.store(seq, std::memory_order_release);
    for (int r = 0; r < n_; ++r)
      if (r != rank_) wake(r);
    for (int k = 1; k < n_; ++k) pending.push_back((rank_ + k) % n_);
    while (!pending.empty()) wait_any(pending, &RankCell::win_done, seq, "to read this rank's send buffer", timeout);
  }

 private:
  static constexpr uint64_t PROBE = 0x5ca1ab1e0ddba11ULL;

  struct Prepared {
    int program;
    std::vector<int64_t> cpb, base;
    int64_t block_stride, chunk_elems;
    int dtype, op;
    int64_t tile_elems;
    double timeout;
    uint64_t cma_threshold;
    int workers;
  };

  struct Call {
    const Program& prog;
    Geometry g;
    int dtype, op;
    int64_t tile, ntiles;
    double timeout;
    bool cma;
    uint64_t cma_threshold;
    uint64_t id;
    // inline messages of this call whose bytes others may share: what they hold (the
    // sender's pieces) and where (scheduler mode only: one thread per rank)
    bool share;
    int nshared = 0;
    struct Shared {
      Pieces src;
      int tb;
      uint64_t msg;
      SlotDesc* desc;
    } shared[8];
  };

  // Per thread block state during a call.
  struct TBState {
    std::atomic<int64_t> done{0};  // steps completed over all tiles
    int64_t pc = 0;                // next step (tile * nsteps + index)
    uint64_t posted = 0;           // messages posted on the send connection (= head)
    uint64_t consumed = 0;         // messages consumed on the receive connection (= tail)
    uint64_t last_remote = 0;      // 1 + index of the last REMOTE message posted
  };

  struct Window {
    uint64_t bytes = 0;
    std::vector<char*> base;  // where each rank's window is mapped in this process
  };

  void unmap_peers(Window& w) {
    for (int p = 0; p < (int)w.base.size(); ++p)
      if (p != rank_ && w.base[p]) munmap(w.base[p], w.bytes);
  }

  // Wait until the `field` word of one of the ranks `peers` reaches `value` (spin, yield,
  // sleep: wait_change); remove that rank from `peers` and return it. Fails when a peer
  // dies, the communicator is aborted or `timeout` passes.
  int wait_any(std::vector<int>& peers, std::atomic<uint64_t> RankCell::*field, uint64_t value, const char* what,
               double timeout) {
    Header* h = seg_.hdr();
    RankCell& me = h->ranks[rank_];
    auto ready = [&]() -> int {
      for (size_t i = 0; i < peers.size(); ++i)
        if ((h->ranks[peers[i]].*field).load(std::memory_order_acquire) >= value) {
          int p = peers[i];
          peers.erase(peers.begin() + (long)i);
          return p;
        }
      return -1;
    };
    auto t0 = std::chrono::steady_clock::now();
    auto last_check = t0;
    for (;;) {
      int p = ready();
      if (p >= 0) return p;
      uint32_t s = me.seq.load(std::memory_order_seq_cst);
      if ((p = ready()) >= 0) return p;
      wait_change(s, 20000000);
      if (elapsed(last_check) > 0.1) {
        last_check = std::chrono::steady_clock::now();
        check_abort();
        for (int q : peers) {
          int pid = h->ranks[q].pid.load();
          if (!process_alive(pid))
            fail("rank " + std::to_string(q) + " died (process " + std::to_string(pid) + " is gone) while this rank "
                 "waited for it " + what);
        }
        if (elapsed(t0) > timeout)
          fail("timed out after " + fmt(timeout) + " s waiting for rank " + std::to_string(peers[0]) + " " + what +
               " (do all ranks pass shared arrays to the same calls?)");
      }
    }
  }

  static double elapsed(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  static std::string fmt(double s) {
    char b[32];
    snprintf(b, sizeof b, "%.3g", s);
    return b;
  }

  void wake(int r) {
    RankCell& c = seg_.hdr()->ranks[r];
    c.seq.fetch_add(1, std::memory_order_seq_cst);
    if (c.sleeping.load(std::memory_order_seq_cst)) futex(&c.seq, FUTEX_WAKE, INT_MAX, nullptr);
  }

  // Wait until this rank's sequence word leaves `s`: spin (a peer on another CPU answers
  // within microseconds), then yield the CPU (a peer waiting for this CPU runs), then
  // sleep on the futex for at most `nanos`.
  void wait_change(uint32_t s, long nanos) {
    RankCell& me = seg_.hdr()->ranks[rank_];
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0;; ++i) {
      if (me.seq.load(std::memory_order_relaxed) != s) return;
      _mm_pause();
      if ((i & 63) == 63 && elapsed(t0) > spin_seconds_) break;
    }
    if (yield_seconds_ > 0) {
      t0 = std::chrono::steady_clock::now();
      for (int i = 0;; ++i) {
        if (me.seq.load(std::memory_order_relaxed) != s) return;
        sched_yield();
        if ((i & 15) == 15 && elapsed(t0) > yield_seconds_) break;
      }
    }
    sleep_on_seq(s, nanos);
  }

  void sleep_on_seq(uint32_t s, long nanos) {
    RankCell& me = seg_.hdr()->ranks[rank_];
    me.sleeping.fetch_add(1, std::memory_order_seq_cst);
    if (me.seq.load(std::memory_order_seq_cst) == s) {
      struct timespec ts = {nanos / 1000000000L, nanos % 1000000000L};
      futex(&me.seq, FUTEX_WAIT, s, &ts);
    }
    me.sleeping.fetch_sub(1, std::memory_order_seq_cst);
  }

  [[noreturn]] void fail(const std::string& msg) {
    std::string full = "rank " + std::to_string(rank_) + ": " + msg;
    abort(msg);
    throw CommError(full);
  }

  void check_abort() {
    // an aborted communicator stays aborted (as NCCL's): every later call fails at once
    if (seg_.hdr()->abort_rank.load(std::memory_order_relaxed))
      throw CommError("rank " + std::to_string(rank_) + ": the communicator was aborted: " + abort_message());
  }

  // Element offset of chunk c of call buffer b.
  static inline uint64_t chunk_addr(const Geometry& g, int b, int64_t c, int64_t elem) {
    int64_t cpb = g.chunks_per_block[b];
    int64_t off = g.base[b] + (c / cpb) * g.block_stride + (c % cpb) * g.chunk_elems + elem;
    return g.addr[b] + (uint64_t)off * g.esize;
  }

  static void pieces(const Call& call, int buf, int off, int cnt, int64_t tile, Pieces& p) {
    int64_t lo = tile * call.tile;
    int64_t len = std::min(call.tile, call.g.chunk_elems - lo);
    p.n = cnt;
    p.len = (uint64_t)len * call.g.esize;
    for (int i = 0; i < cnt; ++i) p.addr[i] = chunk_addr(call.g, buf, off + i, lo);
  }

  static bool overlaps(const Pieces& a, const SlotDesc& d) {
    for (int i = 0; i < a.n; ++i)
      for (uint32_t j = 0; j < d.npieces; ++j)
        if (a.addr[i] < d.addrs[j] + d.piece_bytes && d.addrs[j] < a.addr[i] + a.len) return true;
    return false;
  }

  // Before writing `dst`, make sure no REMOTE message of this rank still reads it.
  // Returns false if a receiver is reading it right now (try again later).
  bool unpin(const Call& call, const Pieces& dst) {
    if (!call.cma || remote_outstanding_.load(std::memory_order_relaxed) == 0) return true;
    const int slots = seg_.slots();
    for (size_t t = 0; t < call.prog.tbs.size(); ++t) {
      const TB& tb = call.prog.tbs[t];
      if (tb.send < 0) continue;
      ConnCtl* c = seg_.conn(rank_, tb.send, tb.channel);
      uint64_t head = c->head.load(std::memory_order_acquire);
      uint64_t tail = c->tail.load(std::memory_order_acquire);
      if (head - tail == 0) continue;
      for (uint64_t m = tail; m < head; ++m) {
        SlotDesc& d = c->slots[m % slots];
        uint32_t s = d.state.load(std::memory_order_acquire);
        if (s != REMOTE && s != CLAIMED) continue;
        if (!overlaps(dst, d)) continue;
        if (s == CLAIMED) return false;
        if ((uint64_t)d.npieces * d.piece_bytes > seg_.slot_bytes())  // excluded by run()'s choice of tile
          fail("internal error: a message larger than a slot would need demoting");
        uint32_t expect = REMOTE;
        if (!d.state.compare_exchange_strong(expect, DEMOTING)) return false;
        char* out = seg_.slot_data(rank_, tb.send, tb.channel, m % slots);
        for (uint32_t i = 0; i < d.npieces; ++i)
          std::memcpy(out + i * d.piece_bytes, (const void*)(uintptr_t)d.addrs[i], d.piece_bytes);
        d.state.store(INLINE_DATA, std::memory_order_release);
        remote_outstanding_.fetch_sub(1);
      }
    }
    return true;
  }

  void copy_pieces(const Pieces& dst, const Pieces& src) {
    for (int i = 0; i < dst.n; ++i)
      if (dst.addr[i] != src.addr[i])  // in place the copy of a rank's own block is a no-op
        std::memmove((void*)(uintptr_t)dst.addr[i], (const void*)(uintptr_t)src.addr[i], dst.len);
  }

  void reduce_pieces(const Call& call, const Pieces& dst, const Pieces& a, const Pieces& b) {
    size_t n = dst.len / call.g.esize;
    for (int i = 0; i < dst.n; ++i)
      reduce_fn(call.dtype, call.op, (void*)(uintptr_t)dst.addr[i], (const void*)(uintptr_t)a.addr[i],
                (const void*)(uintptr_t)b.addr[i], n);
  }

  static void inline_pieces(char* data, const Pieces& like, Pieces& p) {
    p.n = like.n;
    p.len = like.len;
    for (int i = 0; i < like.n; ++i) p.addr[i] = (uint64_t)(uintptr_t)(data + i * like.len);
  }

  void read_remote(int pid, const SlotDesc& d, uint64_t piece_off, uint64_t bytes, const Pieces& dst, int peer) {
    // read bytes [piece_off, piece_off + bytes) of every piece of the remote message into dst
    struct iovec local[MAX_PIECES], remote[MAX_PIECES];
    for (uint32_t i = 0; i < d.npieces; ++i) {
      local[i] = {(void*)(uintptr_t)dst.addr[i], bytes};
      remote[i] = {(void*)(uintptr_t)(d.addrs[i] + piece_off), bytes};
    }
    uint64_t want = bytes * d.npieces;
    ssize_t got = process_vm_readv(pid, local, d.npieces, remote, d.npieces, 0);
    if (got != (ssize_t)want) {
      // partial reads are possible in principle: finish piece by piece
      if (got < 0) fail("reading rank " + std::to_string(peer) + "'s memory failed: " + strerror(errno));
      for (uint32_t i = 0; i < d.npieces; ++i) {
        uint64_t done = 0;
        while (done < bytes) {
          struct iovec l = {(char*)(uintptr_t)dst.addr[i] + done, bytes - done};
          struct iovec r = {(char*)(uintptr_t)(d.addrs[i] + piece_off) + done, bytes - done};
          ssize_t k = process_vm_readv(pid, &l, 1, &r, 1, 0);
          if (k <= 0) fail("reading rank " + std::to_string(peer) + "'s memory failed: " + strerror(errno));
          done += (uint64_t)k;
        }
      }
    }
  }

  // The inline message of this call that holds the bytes `src` now, if its slot still
  // holds them (not reused by a later message of its connection).
  const Call::Shared* find_shared(const Call& call, const std::vector<TBState>& st, const Pieces& src) const {
    for (int k = 0; k < call.nshared; ++k) {
      const Call::Shared& e = call.shared[k];
      if (e.src.n != src.n || e.src.len != src.len || st[e.tb].posted >= e.msg + (uint64_t)seg_.slots()) continue;
      if (std::equal(src.addr, src.addr + src.n, e.src.addr)) return &e;
    }
    return nullptr;
  }

  void remember_shared(Call& call, const Pieces& src, int tb, uint64_t msg, SlotDesc* desc) {
    if (!call.share) return;
    int k = call.nshared < 8 ? call.nshared++ : (int)(msg % 8);
    call.shared[k] = {src, tb, msg, desc};
  }

  // A step is about to write `dst`: inline copies of what was there are stale.
  void forget_shared(Call& call, const Pieces& dst) {
    for (int k = 0; k < call.nshared;) {
      const Pieces& e = call.shared[k].src;
      bool hit = false;
      for (int i = 0; i < e.n && !hit; ++i)
        for (int j = 0; j < dst.n && !hit; ++j)
          hit = e.addr[i] < dst.addr[j] + dst.len && dst.addr[j] < e.addr[i] + e.len;
      if (hit) {
        call.shared[k] = call.shared[--call.nshared];
      } else {
        ++k;
      }
    }
  }

  // Try to execute the next step of thread block t. Returns true if it did.
  bool try_step(Call& call, std::vector<TBState>& st, int t, std::vector<char>& bounce) {
    TBState& s = st[t];
    const TB& tb = call.prog.tbs[t];
    if (s.pc >= (int64_t)tb.nsteps * call.ntiles) return false;
    int64_t tile = s.pc / tb.nsteps;
    const Step& step = call.prog.steps[tb.first + (int)(s.pc % tb.nsteps)];
    if (step.dep_tb >= 0) {
      const TB& dep = call.prog.tbs[step.dep_tb];
      if (st[step.dep_tb].done.load(std::memory_order_acquire) < tile * dep.nsteps + step.dep_step + 1)
        return false;
    }
    const bool receives = step.op == S_RECV || step.op == S_RRC || step.op == S_RRS || step.op == S_RCS ||
                          step.op == S_RRCS;
    const bool sends = step.op == S_SEND || step.op == S_RRS || step.op == S_RCS || step.op == S_RRCS;
    const bool writes = step.op == S_RECV || step.op == S_RRC || step.op == S_RCS || step.op == S_RRCS ||
                        step.op == S_COPY || step.op == S_REDUCE;
    const int slots = seg_.slots();
    ConnCtl* in = nullptr;
    ConnCtl* out = nullptr;
    if (receives) {
      in = seg_.conn(tb.recv, rank_, tb.channel);
      if (in->head.load(std::memory_order_acquire) <= s.consumed) return false;
    }
    if (sends) {
      out = seg_.conn(rank_, tb.send, tb.channel);
      if (s.posted - out->tail.load(std::memory_order_acquire) >= (uint64_t)slots) return false;
      // a free slot whose bytes other messages still share is not free yet
      if (out->slots[s.posted % slots].sharers.load(std::memory_order_acquire) != 0) return false;
    }
    Pieces src, dst, recvd;
    if (step.sbuf >= 0) pieces(call, step.sbuf, step.soff, step.cnt, tile, src);
    if (step.dbuf >= 0) pieces(call, step.dbuf, step.doff, step.cnt, tile, dst);
    if (writes && !unpin(call, dst)) return false;
    if (writes) forget_shared(call, dst);

    // the incoming message
    SlotDesc* md = nullptr;
    bool remote_in = false;
    uint64_t msg_bytes = (uint64_t)step.cnt * ((step.sbuf >= 0 ? src.len : dst.len));
    if (receives) {
      md = &in->slots[s.consumed % slots];
      uint32_t expect = REMOTE;
      if (md->state.compare_exchange_strong(expect, CLAIMED, std::memory_order_acq_rel)) {
        remote_in = true;
      } else {
        while (md->state.load(std::memory_order_acquire) == DEMOTING) _mm_pause();
      }
      if (md->call_id != call.id || (uint64_t)md->npieces * md->piece_bytes != msg_bytes ||
          (int)md->npieces != step.cnt) {
        fail("message mismatch from rank " + std::to_string(tb.recv) + " on channel " +
             std::to_string(tb.channel) + ": got " + std::to_string(md->npieces) + " x " +
             std::to_string(md->piece_bytes) + " bytes of call " + std::to_string(md->call_id) + ", expected " +
             std::to_string(step.cnt) + " chunks of call " + std::to_string(call.id) +
             " (do all ranks make the same calls with the same sizes?)");
      }
      if (!remote_in) inline_pieces(seg_.base() + md->data_off, dst.n ? dst : src, recvd);
    }
    int peer_pid = receives ? seg_.hdr()->ranks[tb.recv].pid.load(std::memory_order_relaxed) : 0;
    char* out_data = sends ? seg_.slot_data(rank_, tb.send, tb.channel, s.posted % slots) : nullptr;
    SlotDesc* od = sends ? &out->slots[s.posted % slots] : nullptr;
    bool remote_out = false;  // post the destination (or source) region instead of copying it

    switch (step.op) {
      case S_NOP:
        break;
      case S_COPY:
        copy_pieces(dst, src);
        break;
      case S_REDUCE:
        reduce_pieces(call, dst, dst, src);
        break;
      case S_SEND:
        remote_out = call.cma && msg_bytes >= call.cma_threshold;
        break;
      case S_RECV:
      case S_RCS:
        if (remote_in) {
          read_remote(peer_pid, *md, 0, dst.len, dst, tb.recv);
        } else {
          copy_pieces(dst, recvd);
        }
        remote_out = step.op == S_RCS && call.cma && msg_bytes >= call.cma_threshold;
        break;
      case S_RRC:
      case S_RRCS:
      case S_RRS: {
        Pieces target;
        Pieces slot_target;
        if (step.op == S_RRS) {
          inline_pieces(out_data, src, slot_target);
          target = slot_target;
        } else {
          target = dst;
        }
        if (remote_in) {
          // read the remote message in cache-sized windows and reduce each as it lands
          uint64_t window = std::max<uint64_t>(call.g.esize, (bounce.size() / call.g.esize) * call.g.esize);
          Pieces b1;
          b1.n = 1;
          for (int i = 0; i < src.n; ++i) {
            for (uint64_t o = 0; o < src.len; o += window) {
              uint64_t w = std::min(window, src.len - o);
              struct iovec l = {bounce.data(), w};
              struct iovec r = {(void*)(uintptr_t)(md->addrs[i] + o), w};
              uint64_t done = 0;
              while (done < w) {
                l.iov_base = bounce.data() + done;
                l.iov_len = w - done;
                r.iov_base = (char*)(uintptr_t)(md->addrs[i] + o) + done;
                r.iov_len = w - done;
                ssize_t k = process_vm_readv(peer_pid, &l, 1, &r, 1, 0);
                if (k <= 0)
                  fail("reading rank " + std::to_string(tb.recv) + "'s memory failed: " + strerror(errno));
                done += (uint64_t)k;
              }
              reduce_fn(call.dtype, call.op, (char*)(uintptr_t)target.addr[i] + o,
                        (const char*)(uintptr_t)src.addr[i] + o, bounce.data(), w / call.g.esize);
            }
          }
        } else {
          reduce_pieces(call, target, src, recvd);
        }
        remote_out = step.op == S_RRCS && call.cma && msg_bytes >= call.cma_threshold;
        break;
      }
      default:
        fail("unknown step type " + std::to_string(step.op));
    }

    if (receives) {
      if (md->owner_off) ((SlotDesc*)(seg_.base() + md->owner_off))->sharers.fetch_sub(1, std::memory_order_acq_rel);
      md->state.store(EMPTY, std::memory_order_relaxed);
      ++s.consumed;
      in->tail.store(s.consumed, std::memory_order_release);
      wake(tb.recv);
    }
    if (sends) {
      const Pieces& payload = step.op == S_SEND ? src : dst;
      od->call_id = call.id;
      od->npieces = (uint32_t)step.cnt;
      od->piece_bytes = step.op == S_RRS ? src.len : payload.len;
      od->data_off = seg_.offset(out_data);
      od->owner_off = 0;
      if (step.op == S_RRS) {
        od->state.store(INLINE_DATA, std::memory_order_release);
      } else if (remote_out) {
        for (int i = 0; i < payload.n; ++i) od->addrs[i] = payload.addr[i];
        remote_outstanding_.fetch_add(1);
        s.last_remote = s.posted + 1;
        od->state.store(REMOTE, std::memory_order_release);
      } else {
        const Call::Shared* same = step.op == S_SEND ? find_shared(call, st, payload) : nullptr;
        if (same) {  // these bytes already sit in a slot of this call: share them
          od->data_off = same->desc->data_off;
          od->owner_off = seg_.offset(same->desc);
          same->desc->sharers.fetch_add(1, std::memory_order_acq_rel);
        } else {
          for (int i = 0; i < payload.n; ++i)
            std::memcpy(out_data + i * payload.len, (const void*)(uintptr_t)payload.addr[i], payload.len);
          if (step.op == S_SEND) remember_shared(call, payload, t, s.posted, od);
        }
        od->state.store(INLINE_DATA, std::memory_order_release);
      }
      ++s.posted;
      out->head.store(s.posted, std::memory_order_release);
      wake(tb.send);
    }
    ++s.pc;
    s.done.store(s.pc, std::memory_order_release);
    return true;
  }

  // Why thread block t cannot move (for timeout messages): the rank it waits for, or -1.
  std::string blocked_reason(const Call& call, std::vector<TBState>& st, int t, int* peer) {
    const TB& tb = call.prog.tbs[t];
    TBState& s = st[t];
    *peer = -1;
    if (s.pc >= (int64_t)tb.nsteps * call.ntiles) return "";
    int idx = (int)(s.pc % tb.nsteps);
    const Step& step = call.prog.steps[tb.first + idx];
    std::string where = "tb " + std::to_string(t) + " step " + std::to_string(idx) + " of tile " +
                        std::to_string(s.pc / tb.nsteps);
    if (step.dep_tb >= 0) {
      const TB& dep = call.prog.tbs[step.dep_tb];
      if (st[step.dep_tb].done.load() < (s.pc / tb.nsteps) * dep.nsteps + step.dep_step + 1)
        return where + " waits for tb " + std::to_string(step.dep_tb);
    }
    bool receives = step.op == S_RECV || step.op == S_RRC || step.op == S_RRS || step.op == S_RCS ||
                    step.op == S_RRCS;
    if (receives && seg_.conn(tb.recv, rank_, tb.channel)->head.load() <= s.consumed) {
      *peer = tb.recv;
      return where + " waits for a message from rank " + std::to_string(tb.recv);
    }
    *peer = tb.send;
    return where + " waits for rank " + std::to_string(tb.send) + " to take a message";
  }

  void check_stalled(const Call& call, std::vector<TBState>& st, std::chrono::steady_clock::time_point since,
                     const std::vector<int>& mine) {
    check_abort();
    // a dead peer fails the call at once; a silent one after the timeout
    std::string reason;
    int peer = -1;
    for (int t : mine) {
      int p;
      std::string r = blocked_reason(call, st, t, &p);
      if (r.empty()) continue;
      if (p >= 0 && !process_alive(seg_.hdr()->ranks[p].pid.load()))
        fail("rank " + std::to_string(p) + " died (process " + std::to_string(seg_.hdr()->ranks[p].pid.load()) +
             " is gone); " + r);
      if (reason.empty() || (peer < 0 && p >= 0)) {
        reason = r;
        peer = p;
      }
    }
    if (elapsed(since) > call.timeout) {
      if (peer >= 0)
        fail("timed out after " + fmt(call.timeout) + " s waiting for rank " + std::to_string(peer) + " (" + reason +
             ")");
      fail("timed out after " + fmt(call.timeout) + " s (" + reason + ")");
    }
  }

  // Interpret the thread blocks in `mine` until all are done.
  void schedule(Call& call, std::vector<TBState>& st, const std::vector<int>& mine, std::vector<char>& bounce) {
    RankCell& me = seg_.hdr()->ranks[rank_];
    auto last_progress = std::chrono::steady_clock::now();
    auto last_check = last_progress;
    std::vector<int> active(mine);
    while (!active.empty()) {
      uint32_t seq = me.seq.load(std::memory_order_seq_cst);
      bool progress = false;
      for (size_t i = 0; i < active.size();) {
        int t = active[i];
        while (try_step(call, st, t, bounce)) progress = true;
        if (st[t].pc >= (int64_t)call.prog.tbs[t].nsteps * call.ntiles) {
          active.erase(active.begin() + (long)i);  // keeps the visiting order
        } else {
          ++i;
        }
      }
      if (progress) {
        if (pool_size_ > 1) wake(rank_);  // dependencies of other workers' thread blocks
        last_progress = std::chrono::steady_clock::now();
        continue;
      }
      if (active.empty()) break;
      // nothing can move: spin briefly, then sleep until a peer bumps our sequence word
      wait_change(seq, 20000000);  // 20 ms slices between checks
      auto now = std::chrono::steady_clock::now();
      if (std::chrono::duration<double>(now - last_check).count() > 0.1 ||
          std::chrono::duration<double>(now - last_progress).count() > call.timeout) {
        last_check = now;
        check_stalled(call, st, last_progress, active);
      }
    }
  }

  // Wait until receivers have read every REMOTE message of this call: the caller may
  // reuse its buffers once we return.
  void drain(Call& call, std::vector<TBState>& st) {
    if (!call.cma) return;
    RankCell& me = seg_.hdr()->ranks[rank_];
    auto t0 = std::chrono::steady_clock::now();
    auto last_check = t0;
    for (size_t t = 0; t < call.prog.tbs.size(); ++t) {
      const TB& tb = call.prog.tbs[t];
      if (tb.send < 0 || st[t].last_remote == 0) continue;
      ConnCtl* c = seg_.conn(rank_, tb.send, tb.channel);
      while (c->tail.load(std::memory_order_acquire) < st[t].last_remote) {
        uint32_t seq = me.seq.load(std::memory_order_seq_cst);
        if (c->tail.load(std::memory_order_acquire) >= st[t].last_remote) break;
        wait_change(seq, 20000000);
        if (elapsed(last_check) > 0.1) {
          last_check = std::chrono::steady_clock::now();
          check_abort();
          int pid = seg_.hdr()->ranks[tb.send].pid.load();
          if (!process_alive(pid))
            fail("rank " + std::to_string(tb.send) + " died (process " + std::to_string(pid) +
                 " is gone) before reading this rank's last messages");
          if (elapsed(t0) > call.timeout)
            fail("timed out after " + fmt(call.timeout) + " s waiting for rank " + std::to_string(tb.send) +
                 " to read this rank's last messages");
        }
      }
    }
    remote_outstanding_.store(0);
  }

  void execute(Call& call, int workers) {
    check_abort();
    const int ntb = (int)call.prog.tbs.size();
    std::vector<TBState> st(ntb);
    for (int t = 0; t < ntb; ++t) {
      const TB& tb = call.prog.tbs[t];
      if (tb.send >= 0) st[t].posted = seg_.conn(rank_, tb.send, tb.channel)->head.load(std::memory_order_acquire);
      if (tb.recv >= 0) st[t].consumed = seg_.conn(tb.recv, rank_, tb.channel)->tail.load(std::memory_order_acquire);
    }
    int nworkers = workers <= 0 ? ntb : std::min(workers, ntb);
    if (nworkers <= 1) {
      {
        std::lock_guard<std::mutex> lk(pool_mu_);
        pool_size_ = 1;
      }
      schedule(call, st, call.prog.order, bounce_for(0));
      drain(call, st);
      return;
    }
    // one worker thread per group of thread blocks; the calling thread runs group 0
    std::vector<std::vector<int>> groups(nworkers);
    for (int t = 0; t < ntb; ++t) groups[t % nworkers].push_back(t);
    on_pool(nworkers, [&](int w) { schedule(call, st, groups[w], bounce_for(w)); });
    drain(call, st);
  }

  // Run work(0) on the calling thread and work(1 .. nworkers - 1) on the pool's worker
  // threads; the first error of any of them aborts the communicator and is thrown here.
  void on_pool(int nworkers, const std::function<void(int)>& work) {
    ensure_pool(nworkers);
    std::string first_error;
    std::mutex err_mu;
    int remaining = nworkers - 1;  // guarded by pool_mu_ (a count changed outside it could lose the last wake-up)
    auto job = [&](int w) {
      try {
        work(w);
      } catch (std::exception& e) {
        std::lock_guard<std::mutex> lk(err_mu);
        if (first_error.empty()) first_error = e.what();
        abort(e.what());
      }
    };
    {
      std::lock_guard<std::mutex> lk(pool_mu_);
      pool_job_ = [&](int w) {
        job(w);
        std::lock_guard<std::mutex> lk(pool_mu_);
        if (--remaining == 0) pool_done_cv_.notify_all();
      };
      pool_size_ = nworkers;
      ++pool_gen_;
    }
    pool_cv_.notify_all();
    job(0);
    {
      std::unique_lock<std::mutex> lk(pool_mu_);
      pool_done_cv_.wait(lk, [&] { return remaining == 0; });
      pool_job_ = nullptr;
    }
    if (!first_error.empty()) throw CommError(first_error);
  }

  std::vector<char>& bounce_for(int w) {
    while ((int)bounces_.size() <= w) bounces_.emplace_back(std::vector<char>(256 * 1024));
    return bounces_[w];
  }

  void ensure_pool(int nworkers) {
    bounce_for(nworkers);
    while ((int)pool_.size() < nworkers - 1) {
      int w = (int)pool_.size() + 1;
      pool_.emplace_back([this, w] {
        uint64_t seen = 0;
        for (;;) {
          std::function<void(int)> job;
          {
            std::unique_lock<std::mutex> lk(pool_mu_);
            pool_cv_.wait(lk, [&] { return pool_stop_ || (pool_gen_ != seen && w < pool_size_); });
            if (pool_stop_) return;
            seen = pool_gen_;
            job = pool_job_;
          }
          if (job) job(w);
        }
      });
    }
  }

 public:
  ~Communicator() {
    {
      std::lock_guard<std::mutex> lk(pool_mu_);
      pool_stop_ = true;
    }
    pool_cv_.notify_all();
    for (auto& t : pool_) t.join();
    for (auto& kv : windows_) unmap_peers(kv.second);
  }

 private:
  Segment seg_;
  int rank_, n_;
  bool cma_ = false;
  uint64_t call_id_ = 0;
  uint64_t barrier_gen_ = 0;
  uint64_t win_calls_ = 0;              // collectives on shared arrays so far
  std::map<int64_t, Window> windows_;  // shared arrays by id
  double spin_seconds_ = 20e-6, yield_seconds_ = 200e-6;
  volatile uint64_t probe_value_ = PROBE;
  std::atomic<int64_t> remote_outstanding_{0};
  std::vector<Program> programs_;
  std::vector<Prepared> prepared_;
  std::vector<std::vector<char>> bounces_;
  // worker pool (thread-per-thread-block mode)
  std::vector<std::thread> pool_;
  std::mutex pool_mu_;
  std::condition_variable pool_cv_, pool_done_cv_;
  std::function<void(int)> pool_job_;
  uint64_t pool_gen_ = 0;
  int pool_size_ = 1;
  bool pool_stop_ = false;
};

void copy_array(uint64_t dst, uint64_t src, size_t n, bool streaming) {
  copy_bytes((char*)(uintptr_t)dst, (const char*)(uintptr_t)src, n, streaming);
}

void reduce_arrays(uint64_t dst, uint64_t a, uint64_t b, size_t n, int dtype, int op) {
  reduce_fn(dtype, op, (void*)(uintptr_t)dst, (const void*)(uintptr_t)a, (const void*)(uintptr_t)b, n);
}

// dst[i] /= divisor for a floating-point array (the last step of an average)
void divide_array(uint64_t addr, size_t n, int dtype, double divisor) {
  switch (dtype) {
    case DT_F32: {
      float* p = (float*)(uintptr_t)addr;
      for (size_t i = 0; i < n; ++i) p[i] = (float)(p[i] / divisor);
      return;
    }
    case DT_F64: {
      double* p = (double*)(uintptr_t)addr;
      for (size_t i = 0; i < n; ++i) p[i] /= divisor;
      return;
    }
    case DT_F16: {
      uint16_t* p = (uint16_t*)(uintptr_t)addr;
      for (size_t i = 0; i < n; ++i) p[i] = float_to_half((float)(half_to_float(p[i]) / divisor));
      return;
    }
    case DT_BF16: {
      uint16_t* p = (uint16_t*)(uintptr_t)addr;
      for (size_t i = 0; i < n; ++i) p[i] = kernels_generic::f32_to_bf16((float)(kernels_generic::bf16_to_f32(p[i]) / divisor));
      return;
    }
  }
  throw CommError("avg is defined for floating-point types only");
}

// (address, bytes) of a C-contiguous writable buffer (numpy arrays): one call, no copies
std::pair<uint64_t, int64_t> buffer_address(py::handle obj) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) throw py::error_already_set();
  std::pair<uint64_t, int64_t> r{(uint64_t)(uintptr_t)view.buf, (int64_t)view.len};
  PyBuffer_Release(&view);
  return r;
}

}  // namespace

PYBIND11_MODULE(native, m) {
  m.doc() = "arborcc's shared-memory data plane (C++): the IR interpreter over shared-memory FIFOs";
  py::register_exception<CommError>(m, "NativeCommError");
  m.attr("HAVE_AVX2") = HAVE_AVX2;
  m.attr("MAX_RANKS") = MAX_RANKS;
  m.attr("MAX_SLOTS") = MAX_SLOTS;
  m.def("buffer_address", &buffer_address, "address and size in bytes of a contiguous writable buffer");
  m.def("unlink", [](const std::string& name) { return shm_unlink(name.c_str()) == 0; });
  m.def("divide", &divide_array, "divide a floating-point array in place (address, count, dtype code, divisor)");
  m.def("copy", &copy_array, "copy n bytes between addresses that do not overlap, with streaming stores if asked "
        "(and the CPU has AVX2)");
  m.def("reduce", &reduce_arrays, "dst = op(a, b) element-wise (addresses, element count, dtype and op codes)");
  py::class_<Communicator>(m, "Communicator")
      .def(py::init<const std::string&, int, bool, int, int, int, uint64_t>(), py::arg("name"), py::arg("rank"),
           py::arg("create"), py::arg("nranks") = 0, py::arg("channels") = 0, py::arg("slots") = 0,
           py::arg("slot_bytes") = 0)
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("nranks", &Communicator::nranks)
      .def_property_readonly("cma", &Communicator::cma)
      .def_property_readonly("window_calls", &Communicator::window_calls)
      .def("wait_attached", &Communicator::wait_attached, py::call_guard<py::gil_scoped_release>())
      .def("abort", &Communicator::abort)
      .def("abort_message", &Communicator::abort_message)
      .def("register_program", &Communicator::register_program)
      .def("prepare", &Communicator::prepare)
      .def("set_waiting", &Communicator::set_waiting)
      .def("run_prepared", &Communicator::run_prepared, py::call_guard<py::gil_scoped_release>())
      .def("publish", &Communicator::publish)
      .def("wait_published", &Communicator::wait_published, py::call_guard<py::gil_scoped_release>())
      .def("barrier", &Communicator::barrier, py::call_guard<py::gil_scoped_release>())
      .def("map_window", &Communicator::map_window, py::call_guard<py::gil_scoped_release>())
      .def("unmap_window", &Communicator::unmap_window)
      .def("window_collective", &Communicator::window_collective, py::call_guard<py::gil_scoped_release>());
}
