// Registering programs and preparing call shapes, running a call (choosing its tile and
// whether cross-memory attach carries its messages), and the scheduler that interprets a
// rank's thread blocks (steps.cpp executes each step) until they are done, fails a
// stalled call, and drains the REMOTE messages before returning.

#include <algorithm>

#include "communicator.hpp"
#include "dtypes.hpp"
#include "errors.hpp"

namespace dataplane {

int Communicator::register_program(const std::vector<std::vector<int>>& tbs, const std::vector<std::vector<int>>& steps,
                                   bool algorithm_copies_only) {
  Program p;
  p.algorithm_copies_only = algorithm_copies_only;
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

int Communicator::prepare(int program, std::vector<int64_t> cpb, std::vector<int64_t> base, int64_t block_stride,
            int64_t chunk_elems, int dtype, int op, int64_t tile_elems, double timeout, uint64_t cma_threshold,
            uint64_t reduce_cma_threshold, int workers, uint64_t what, uint64_t count) {
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
             prog.copy_only ? cma_threshold : reduce_cma_threshold, workers, CallDesc{what, count}};
  prepared_.push_back(p);
  return (int)prepared_.size() - 1;
}

void Communicator::run_prepared(int handle, uint64_t in_addr, uint64_t out_addr, uint64_t scratch_addr) {
  const Prepared& p = prepared_.at(handle);
  if (p.staged) {
    run_staged(p, in_addr, out_addr);
    return;
  }
  run(p.program, in_addr, out_addr, scratch_addr, p.cpb, p.base, p.block_stride, p.chunk_elems, p.dtype, p.op,
      p.tile_elems, p.timeout, p.cma_threshold, p.workers, p.desc);
}

void Communicator::run(int program, uint64_t in_addr, uint64_t out_addr, uint64_t scratch_addr, const std::vector<int64_t>& cpb,
         const std::vector<int64_t>& base, int64_t block_stride, int64_t chunk_elems, int dtype, int op,
         int64_t tile_elems, double timeout, uint64_t cma_threshold, int workers, const CallDesc& desc) {
  const Program& prog = programs_.at(program);
  if (dtype < 0 || dtype > DT_U8) throw CommError("unknown dtype code");
  begin_call(desc);
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
    // feeds another rank's next one, nothing to keep in cache): one message per chunk -
    // when no rank reduces, else a rank that reduces slices what this one would send whole
    if (apart && prog.copy_only && prog.algorithm_copies_only) tile = chunk_elems;
    if (!apart) tile = std::min(tile, max_tile);
  } else {
    tile = std::min(tile, max_tile);
  }
  if (std::string e = seg_.reserve_call(rank_, prog, g.esize, tile, use_cma, cma_threshold); !e.empty()) fail(e);
  Call call{prog, g, dtype, op, tile, (chunk_elems + tile - 1) / tile, timeout, use_cma, cma_threshold,
            calls_, workers == 1};
  call.desc = desc;
  execute(call, workers);
}

std::string Communicator::blocked_reason(const Call& call, std::vector<TBState>& st, int t, int* peer) {
  // reads only what other worker threads publish atomically: steps done, FIFO heads and tails
  const TB& tb = call.prog.tbs[t];
  const int64_t pc = st[t].done.load(std::memory_order_acquire);
  *peer = -1;
  if (pc >= (int64_t)tb.nsteps * call.ntiles) return "";
  int idx = (int)(pc % tb.nsteps);
  const Step& step = call.prog.steps[tb.first + idx];
  std::string where = "tb " + std::to_string(t) + " step " + std::to_string(idx) + " of tile " +
                      std::to_string(pc / tb.nsteps);
  if (step.dep_tb >= 0) {
    const TB& dep = call.prog.tbs[step.dep_tb];
    if (st[step.dep_tb].done.load() < (pc / tb.nsteps) * dep.nsteps + step.dep_step + 1)
      return where + " waits for tb " + std::to_string(step.dep_tb);
  }
  bool receives = step::has(step.op, step::RECEIVES);
  if (receives) {
    ConnCtl* in = seg_.conn(tb.recv, rank_, tb.channel);
    if (in->head.load() <= in->tail.load()) {
      *peer = tb.recv;
      return where + " waits for a message from rank " + std::to_string(tb.recv);
    }
  }
  if (tb.send < 0) return where + " waits";
  *peer = tb.send;
  return where + " waits for rank " + std::to_string(tb.send) + " to take a message";
}

void Communicator::check_stalled(const Call& call, std::vector<TBState>& st, std::chrono::steady_clock::time_point since,
                                 Watch& w) {
  check_abort();
  // every thread block of the rank, also those of other worker threads: a dependency on
  // one of them leads to the rank it waits for. A dead peer fails the call at once; a
  // silent one after the timeout.
  std::string reason;
  int peer = -1;
  uint64_t peers = 0;
  for (int t = 0; t < (int)call.prog.tbs.size(); ++t) {
    int p;
    std::string r = blocked_reason(call, st, t, &p);
    if (r.empty()) continue;
    if (p >= 0 && !process_alive(seg_.hdr()->ranks[p].pid.load()))
      fail("rank " + std::to_string(p) + " died (process " + std::to_string(seg_.hdr()->ranks[p].pid.load()) +
           " is gone); " + r);
    if (p >= 0) peers |= 1ULL << p;
    if (reason.empty() || (peer < 0 && p >= 0)) {
      reason = r;
      peer = p;
    }
  }
  watch(w, peers);
  if (elapsed(since) > call.timeout) {
    if (peers) fail_timeout(w, peers, call.timeout, reason);
    fail("timed out after " + fmt(call.timeout) + " s (" + reason + ")");
  }
}

void Communicator::schedule(Call& call, std::vector<TBState>& st, const std::vector<int>& mine, std::vector<char>& bounce) {
  RankCell& me = seg_.hdr()->ranks[rank_];
  auto last_progress = std::chrono::steady_clock::now();
  auto last_check = last_progress;
  std::vector<int> active(mine);
  Watch w;
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
      unwatch(w);
      continue;
    }
    if (active.empty()) break;
    // nothing can move: spin briefly, then sleep until a peer bumps our sequence word
    wait_change(seq, 20000000);  // 20 ms slices between checks
    auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_check).count() > 0.1 ||
        std::chrono::duration<double>(now - last_progress).count() > call.timeout) {
      last_check = now;
      check_stalled(call, st, last_progress, w);
    }
  }
  unwatch(w);
}

void Communicator::drain(Call& call, std::vector<TBState>& st) {
  if (!call.cma) return;
  auto t0 = std::chrono::steady_clock::now();
  for (size_t t = 0; t < call.prog.tbs.size(); ++t) {
    const TB& tb = call.prog.tbs[t];
    if (tb.send < 0 || st[t].last_remote == 0) continue;
    ConnCtl* c = seg_.conn(rank_, tb.send, tb.channel);
    const uint64_t last = st[t].last_remote;
    wait_for_peer([&] { return c->tail.load(std::memory_order_acquire) >= last; }, tb.send, t0, call.timeout,
                  [](bool gone) {
                    return std::string(gone ? "before reading" : "to read") + " this rank's last messages";
                  });
  }
  remote_outstanding_.store(0);
}

void Communicator::execute(Call& call, int workers) {
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
    check_unread(call);
    return;
  }
  // one worker thread per group of thread blocks; the calling thread runs group 0
  std::vector<std::vector<int>> groups(nworkers);
  for (int t = 0; t < ntb; ++t) groups[t % nworkers].push_back(t);
  on_pool(nworkers, [&](int w) { schedule(call, st, groups[w], bounce_for(w)); });
  drain(call, st);
  check_unread(call);
}

void Communicator::check_unread(Call& call) {
  // a rank that only sent to a peer (a broadcast's root) compares that peer's call now if
  // the peer has begun it, without waiting; else the peer finds the mismatch in the
  // message, aborts, and this rank fails at its next call
  const uint64_t checked = call.checked.load(std::memory_order_relaxed);
  for (const TB& tb : call.prog.tbs)
    if (tb.send >= 0 && tb.send != rank_ && !(checked >> tb.send & 1)) agrees(tb.send);
}

}  // namespace dataplane
