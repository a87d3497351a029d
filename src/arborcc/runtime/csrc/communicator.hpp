// A rank's communicator: the class declaration; its methods are in one .cpp file per
// concern (communicator.cpp start-up, abort and tear-down; waiting.cpp waiting, barrier
// and published values; agreement.cpp the calls' descriptors that the ranks compare;
// blame.cpp which rank a timed-out wait blames; interpreter.cpp registering and running programs, the
// scheduler; steps.cpp one step and its messages; pool.cpp the worker threads;
// windows.cpp shared arrays and their collectives).
//
// arborcc's shared-memory data plane is an interpreter of the IR (MSCCL's model: ranks ->
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
#pragma once

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "call_descriptor.hpp"
#include "os_calls.hpp"
#include "program.hpp"
#include "segment.hpp"
#include "staged_allreduce.hpp"

namespace dataplane {

class Communicator {
 public:
  Communicator(const std::string& name, int rank, bool create, int nranks, int channels, int slots,
               uint64_t slot_bytes);
  ~Communicator();

  int rank() const { return rank_; }
  uint64_t window_calls() const { return win_calls_; }
  uint64_t staged_calls() const { return ring_.calls; }
  uint64_t staged_shared_calls() const { return ring_.shared_calls; }
  int nranks() const { return n_; }
  bool cma() const { return cma_; }

  // Wait until every rank has attached (then the name can be unlinked) and test
  // cross-memory attach with every peer.
  void wait_attached(double timeout);

  void abort(const std::string& msg);
  std::string abort_message() const;

  // One rank's program of an algorithm; `algorithm_copies_only`: no rank's steps reduce.
  int register_program(const std::vector<std::vector<int>>& tbs, const std::vector<std::vector<int>>& steps,
                       bool algorithm_copies_only);

  // Everything about a call except its buffers, stored once per call shape.
  // `what` and `count`: the call's descriptor (call_descriptor.hpp), compared with the
  // peers' at every call.
  int prepare(int program, std::vector<int64_t> cpb, std::vector<int64_t> base, int64_t block_stride,
              int64_t chunk_elems, int dtype, int op, int64_t tile_elems, double timeout, uint64_t cma_threshold,
              uint64_t reduce_cma_threshold, int workers, uint64_t what, uint64_t count);

  // How a rank waits: spin for `spin_seconds`, then yield the CPU for `yield_seconds`,
  // then sleep on its futex.
  void set_waiting(double spin_seconds, double yield_seconds) {
    spin_seconds_ = spin_seconds;
    yield_seconds_ = yield_seconds;
  }

  void run_prepared(int handle, uint64_t in_addr, uint64_t out_addr, uint64_t scratch_addr);

  // Run a registered program once over the buffers (called with the GIL released).
  void run(int program, uint64_t in_addr, uint64_t out_addr, uint64_t scratch_addr, const std::vector<int64_t>& cpb,
           const std::vector<int64_t>& base, int64_t block_stride, int64_t chunk_elems, int dtype, int op,
           int64_t tile_elems, double timeout, uint64_t cma_threshold, int workers, const CallDesc& desc);

  // rank 0 publishes `value` for call `seq`; the other ranks wait for it.
  void publish(uint64_t seq, int64_t value);
  int64_t wait_published(uint64_t seq, double timeout);

  void barrier(double timeout);

  // ---- the staged all-reduce (staged.cpp, staged_allreduce.hpp) ----------------------
  //
  // A staged call of `count` elements of `dtype`, of `kind` (STAGED_OWNER: the owner
  // all-reduce; STAGED_SCATTER: a reduce-scatter of blocks of `count` elements;
  // STAGED_ONESHOT: the one-shot all-reduce, STAGED_GATHER: an all-gather of blocks of
  // `count` elements, both staged_oneshot.hpp) through slots of at most
  // `slot_bytes`: its handle for run_prepared (a reduce-scatter in place passes no output:
  // the rank's block of the input), or -1 when the segment leaves no room for a staging
  // ring (or a one-shot call's input, an all-gather's block, does not fit one slot). The ring takes its shape at the first
  // call and keeps it.
  static constexpr int STAGED_OWNER = 1, STAGED_SCATTER = 2, STAGED_ONESHOT = 3, STAGED_GATHER = 4;
  int prepare_staged(int64_t count, int dtype, int op, uint64_t slot_bytes, double timeout, int kind,
                     uint64_t what, uint64_t call_count);

  // ---- shared arrays: windows of memory that every rank maps ---------------------------
  //
  // Window `id` of a rank is the shared-memory object <prefix><its pid><suffix> of
  // `bytes` bytes that the rank created and mapped at `own_addr` (arborcc.runtime.windows
  // does that, and owns that mapping). Collective: every rank maps every peer's window of
  // the same id; the caller unlinks its own name afterwards (mapped, the memory stays).
  void map_window(int64_t id, uint64_t own_addr, uint64_t bytes, const std::string& prefix, const std::string& suffix,
                  double timeout);

  // Forget window `id`: unmap the peers' windows (this rank's own mapping belongs to its caller).
  void unmap_window(int64_t id);

  // All-gather (`root` < 0) or broadcast from `root` on shared arrays: this rank's send
  // buffer is `bytes` bytes at offset `send_off` of its window `id`; every rank reads its
  // peers' blocks straight from their windows with plain loads (no system call, no page
  // pinning) into `out_addr` (block p of the output: rank p's send buffer; a broadcast's
  // output: the root's). Outputs of at least `stream_bytes` bytes (0: never) are written
  // with streaming stores. With `push`, an all-gather with streaming stores into an output
  // that lies in this rank's shared arrays has the peers write their blocks there (each
  // rank reads its own block once and writes it into every such output). A call returns
  // once every peer is done with this rank's block and output.
  // `what` and `count`: the call's descriptor (call_descriptor.hpp).
  void window_collective(int64_t id, uint64_t send_off, uint64_t bytes, uint64_t out_addr, int root,
                         uint64_t stream_bytes, int threads, double timeout, bool push, uint64_t what,
                         uint64_t count);

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
    CallDesc desc;
    int staged = 0;  // 0: not staged, else its STAGED_ kind (staged.cpp) of chunk_elems elements
  };

  struct Call {
    const Program& prog;
    Geometry g;
    int dtype, op;
    int64_t tile, ntiles;
    double timeout;
    bool cma;
    uint64_t cma_threshold;
    uint64_t id;  // this rank's call number (calls_)
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
    CallDesc desc;
    std::atomic<uint64_t> checked{0};  // bit q: rank q's call was found to be this one
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

  // ---- staged.cpp
  // Run a prepared staged all-reduce or reduce-scatter (p.staged) over the caller's buffers.
  void run_staged(const Prepared& p, uint64_t in_addr, uint64_t out_addr);

  // ---- windows.cpp
  void unmap_peers(Window& w);
  // The window of this rank that holds [addr, addr + bytes), and the offset there, if one does.
  bool find_own_window(uint64_t addr, uint64_t bytes, int64_t* id, uint64_t* off) const;
  // Where this rank's block goes in posted peer p's output (which lies in p's shared arrays).
  char* peer_output(int p, uint64_t bytes);
  // An all-gather's push: once every peer has posted, store this rank's block `own` into
  // `own_dst` and into the output of every peer whose output lies in its shared arrays
  // (streaming stores; split over `nthreads` threads).
  void push_own_block(const char* own, char* own_dst, uint64_t bytes, uint64_t seq, int nthreads,
                      const std::function<void(int)>& check_call, double timeout);
  // Wait until the `field` word of one of the ranks `peers` reaches `value` (spin, yield,
  // sleep: wait_change); remove that rank from `peers` and return it. Fails when a peer
  // dies, is found in another call, the communicator is aborted or `timeout` passes.
  int wait_any(std::vector<int>& peers, std::atomic<uint64_t> RankCell::*field, uint64_t value, const char* what,
               double timeout);

  // ---- the calls' descriptors (agreement.cpp)
  // Begin data-plane call calls_ + 1 described by `desc`: publish it for the peers.
  void begin_call(const CallDesc& desc);
  // Rank q's descriptor of call `seq`, if q has begun it and its record is still kept.
  bool record_of(int q, uint64_t seq, CallDesc* desc) const;
  // Fails the communicator when rank q has begun this rank's current call as another call
  // (naming the field); true when q is at this call (or past it, its record gone), false
  // when q has not begun it yet.
  bool agrees(int q);
  // Rank q is in a call of this rank's kind (its staging ring or shared-array counters
  // say so) but at another call number: fails, naming what differs.
  [[noreturn]] void fail_diverged(int q);
  // For a wait that has lasted: fails when a rank in `peers` (bit q: rank q) is found in
  // another call, or behind this rank and waiting for it in a call that differs.
  void check_calls(uint64_t peers);
  // A message of rank q that does not belong to this call (`id`, `desc`): fails, naming
  // what differs.
  [[noreturn]] void fail_message(int q, uint64_t id, const CallDesc& theirs, const Call& call, int channel);

  // ---- who a timed-out wait blames (blame.cpp)
  // What a rank sees of its peers while it waits: when each one's progress or waiting
  // beat last moved.
  struct Watch {
    std::chrono::steady_clock::time_point since;
    bool started = false, published = false;
    uint64_t progress[MAX_RANKS], beats[MAX_RANKS];
    std::chrono::steady_clock::time_point moved[MAX_RANKS];
  };
  // Every ~0.1 s of a wait for the ranks `peers`: publish them as this rank's waiting and
  // beat, note which ranks moved, check their calls (check_calls).
  void watch(Watch& w, uint64_t peers);
  // A wait ended: this rank is no longer waiting and has moved.
  void unwatch(Watch& w);
  // A wait for `peers` timed out after `timeout` s: fail, naming the rank that stopped
  // (following who waits for whom) and how; `detail` says where this rank waited.
  [[noreturn]] void fail_timeout(Watch& w, uint64_t peers, double timeout, const std::string& detail);

  // ---- waiting and failing (waiting.cpp, communicator.cpp)
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
  void wait_change(uint32_t s, long nanos);
  // Wait (wait_change) until ready() holds, for rank q. Every 0.1 s the call fails on an
  // abort, when q's process is gone ("rank q died (process P is gone) " + ending(true)),
  // when q is found in another call (check_calls), or `timeout` s after t0 (fail_timeout:
  // "... this rank waits for rank q " + ending(false)); the ending is only built when the
  // call fails.
  void wait_for_peer(const std::function<bool()>& ready, int q, std::chrono::steady_clock::time_point t0,
                     double timeout, const std::function<std::string(bool)>& ending);
  void sleep_on_seq(uint32_t s, long nanos);

  [[noreturn]] void fail(const std::string& msg);
  // an aborted communicator stays aborted (as NCCL's): every later call fails at once
  void check_abort();

  // ---- one step and its messages (steps.cpp). The helpers of try_step are declared
  // inline and defined, and used, in steps.cpp only: the compiler then inlines them into
  // try_step, as it did when the data plane was one file.
  static inline void pieces(const Call& call, int buf, int off, int cnt, int64_t tile, Pieces& p);
  static inline bool overlaps(const Pieces& a, const SlotDesc& d);
  // Before writing `dst`, make sure no REMOTE message of this rank still reads it.
  // Returns false if a receiver is reading it right now (try again later).
  inline bool unpin(const Call& call, const Pieces& dst);
  inline void copy_pieces(const Pieces& dst, const Pieces& src);
  inline void reduce_pieces(const Call& call, const Pieces& dst, const Pieces& a, const Pieces& b);
  static inline void inline_pieces(char* data, const Pieces& like, Pieces& p);
  // read bytes [piece_off, piece_off + bytes) of every piece of the remote message into dst
  inline void read_remote(int pid, const SlotDesc& d, uint64_t piece_off, uint64_t bytes, const Pieces& dst, int peer);
  // The inline message of this call that holds the bytes `src` now, if its slot still
  // holds them (not reused by a later message of its connection).
  inline const Call::Shared* find_shared(const Call& call, const std::vector<TBState>& st, const Pieces& src) const;
  inline void remember_shared(Call& call, const Pieces& src, int tb, uint64_t msg, SlotDesc* desc);
  // A step is about to write `dst`: inline copies of what was there are stale.
  inline void forget_shared(Call& call, const Pieces& dst);
  // Try to execute the next step of thread block t. Returns true if it did.
  bool try_step(Call& call, std::vector<TBState>& st, int t, std::vector<char>& bounce);

  // ---- the scheduler (interpreter.cpp)
  // Why thread block t cannot move (for timeout messages): the rank it waits for, or -1.
  std::string blocked_reason(const Call& call, std::vector<TBState>& st, int t, int* peer);
  void check_stalled(const Call& call, std::vector<TBState>& st, std::chrono::steady_clock::time_point since,
                     Watch& w);
  // Interpret the thread blocks in `mine` until all are done.
  void schedule(Call& call, std::vector<TBState>& st, const std::vector<int>& mine, std::vector<char>& bounce);
  // Wait until receivers have read every REMOTE message of this call: the caller may
  // reuse its buffers once we return.
  void drain(Call& call, std::vector<TBState>& st);
  void execute(Call& call, int workers);
  // After a call: compare the call of each peer this rank sent to but never read from, if
  // that peer has begun it (no waiting).
  void check_unread(Call& call);

  // ---- worker threads (pool.cpp)
  // Run work(0) on the calling thread and work(1 .. nworkers - 1) on the pool's worker
  // threads; the first error of any of them aborts the communicator and is thrown here.
  void on_pool(int nworkers, const std::function<void(int)>& work);
  std::vector<char>& bounce_for(int w);
  void ensure_pool(int nworkers);

  Segment seg_;
  int rank_, n_;
  bool cma_ = false;
  uint64_t calls_ = 0;  // data-plane calls begun (every path: the sequence the ranks compare)
  CallDesc desc_;       // the current call's descriptor
  uint64_t barrier_gen_ = 0;
  uint64_t win_calls_ = 0;              // collectives on shared arrays so far
  staged::Ring ring_;                   // the staging ring of staged all-reduces
  std::map<int64_t, Window> windows_;  // shared arrays by id
  double spin_seconds_ = 20e-6, yield_seconds_ = 200e-6;
  // no yield phase before this time (steady clock, ns): set when a single yield lost the
  // CPU for longer than the whole phase (wait_change); atomic: worker threads wait too
  std::atomic<int64_t> yields_resume_ns_{0};
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

}  // namespace dataplane
