// One step of a thread block (try_step) and its messages: the byte ranges it moves,
// posting INLINE or REMOTE messages, reading them (from a slot or with process_vm_readv),
// demoting pinned REMOTE messages before their source is written, and inline messages
// that share one copy of the same bytes.

#include <immintrin.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "communicator.hpp"
#include "kernels.hpp"

namespace dataplane {

void Communicator::pieces(const Call& call, int buf, int off, int cnt, int64_t tile, Pieces& p) {
  int64_t lo = tile * call.tile;
  int64_t len = std::min(call.tile, call.g.chunk_elems - lo);
  p.n = cnt;
  p.len = (uint64_t)len * call.g.esize;
  for (int i = 0; i < cnt; ++i) p.addr[i] = chunk_addr(call.g, buf, off + i, lo);
}

bool Communicator::overlaps(const Pieces& a, const SlotDesc& d) {
  for (int i = 0; i < a.n; ++i)
    for (uint32_t j = 0; j < d.npieces; ++j)
      if (a.addr[i] < d.addrs[j] + d.piece_bytes && d.addrs[j] < a.addr[i] + a.len) return true;
  return false;
}

bool Communicator::unpin(const Call& call, const Pieces& dst) {
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
      if (std::string e = seg_.reserve_demotion(rank_, tb.send, tb.channel, m % slots, (uint64_t)d.npieces * d.piece_bytes); !e.empty()) fail(e);
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

void Communicator::copy_pieces(const Pieces& dst, const Pieces& src) {
  for (int i = 0; i < dst.n; ++i)
    if (dst.addr[i] != src.addr[i])  // in place the copy of a rank's own block is a no-op
      std::memmove((void*)(uintptr_t)dst.addr[i], (const void*)(uintptr_t)src.addr[i], dst.len);
}

void Communicator::reduce_pieces(const Call& call, const Pieces& dst, const Pieces& a, const Pieces& b) {
  size_t n = dst.len / call.g.esize;
  for (int i = 0; i < dst.n; ++i)
    reduce_fn(call.dtype, call.op, (void*)(uintptr_t)dst.addr[i], (const void*)(uintptr_t)a.addr[i],
              (const void*)(uintptr_t)b.addr[i], n);
}

void Communicator::inline_pieces(char* data, const Pieces& like, Pieces& p) {
  p.n = like.n;
  p.len = like.len;
  for (int i = 0; i < like.n; ++i) p.addr[i] = (uint64_t)(uintptr_t)(data + i * like.len);
}

void Communicator::read_remote(int pid, const SlotDesc& d, uint64_t piece_off, uint64_t bytes, const Pieces& dst, int peer) {
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

const Communicator::Call::Shared* Communicator::find_shared(const Call& call, const std::vector<TBState>& st, const Pieces& src) const {
  for (int k = 0; k < call.nshared; ++k) {
    const Call::Shared& e = call.shared[k];
    if (e.src.n != src.n || e.src.len != src.len || st[e.tb].posted >= e.msg + (uint64_t)seg_.slots()) continue;
    if (std::equal(src.addr, src.addr + src.n, e.src.addr)) return &e;
  }
  return nullptr;
}

void Communicator::remember_shared(Call& call, const Pieces& src, int tb, uint64_t msg, SlotDesc* desc) {
  if (!call.share) return;
  int k = call.nshared < 8 ? call.nshared++ : (int)(msg % 8);
  call.shared[k] = {src, tb, msg, desc};
}

void Communicator::forget_shared(Call& call, const Pieces& dst) {
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

bool Communicator::try_step(Call& call, std::vector<TBState>& st, int t, std::vector<char>& bounce) {
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
  const bool receives = step::has(step.op, step::RECEIVES);
  const bool sends = step::has(step.op, step::SENDS);
  const bool writes = step::has(step.op, step::WRITES_DST);
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
    // the sender's call must be this one (call_descriptor.hpp) ...
    if (md->call_id != call.id || md->what != call.desc.what || md->count != call.desc.count)
      fail_message(tb.recv, md->call_id, CallDesc{md->what, md->count}, call, tb.channel);
    const uint64_t bit = 1ULL << tb.recv;
    if (!(call.checked.load(std::memory_order_relaxed) & bit)) call.checked.fetch_or(bit, std::memory_order_relaxed);
    // ... and run the same program
    if ((uint64_t)md->npieces * md->piece_bytes != msg_bytes || (int)md->npieces != step.cnt) {
      fail("message mismatch from rank " + std::to_string(tb.recv) + " on channel " +
           std::to_string(tb.channel) + ": got " + std::to_string(md->npieces) + " x " +
           std::to_string(md->piece_bytes) + " bytes, expected " + std::to_string(step.cnt) +
           " chunks of the same call (do all ranks run the same plan?)");
    }
    if (!remote_in) inline_pieces(seg_.base() + md->data_off, dst.n ? dst : src, recvd);
  }
  int peer_pid = receives ? seg_.hdr()->ranks[tb.recv].pid.load(std::memory_order_relaxed) : 0;
  char* out_data = sends ? seg_.slot_data(rank_, tb.send, tb.channel, s.posted % slots) : nullptr;
  SlotDesc* od = sends ? &out->slots[s.posted % slots] : nullptr;
  bool remote_out = false;  // post the destination (or source) region instead of copying it

  switch (step.op) {
    case step::NOP:
      break;
    case step::COPY:
      copy_pieces(dst, src);
      break;
    case step::REDUCE:
      reduce_pieces(call, dst, dst, src);
      break;
    case step::SEND:
      remote_out = call.cma && msg_bytes >= call.cma_threshold;
      break;
    case step::RECV:
    case step::RCS:
      if (remote_in) {
        read_remote(peer_pid, *md, 0, dst.len, dst, tb.recv);
      } else {
        copy_pieces(dst, recvd);
      }
      remote_out = step.op == step::RCS && call.cma && msg_bytes >= call.cma_threshold;
      break;
    case step::RRC:
    case step::RRCS:
    case step::RRS: {
      Pieces target;
      Pieces slot_target;
      if (step.op == step::RRS) {
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
      remote_out = step.op == step::RRCS && call.cma && msg_bytes >= call.cma_threshold;
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
    const Pieces& payload = step.op == step::SEND ? src : dst;
    od->call_id = call.id;
    od->what = call.desc.what;
    od->count = call.desc.count;
    od->npieces = (uint32_t)step.cnt;
    od->piece_bytes = step.op == step::RRS ? src.len : payload.len;
    od->data_off = seg_.offset(out_data);
    od->owner_off = 0;
    if (step.op == step::RRS) {
      od->state.store(INLINE_DATA, std::memory_order_release);
    } else if (remote_out) {
      for (int i = 0; i < payload.n; ++i) od->addrs[i] = payload.addr[i];
      remote_outstanding_.fetch_add(1);
      s.last_remote = s.posted + 1;
      od->state.store(REMOTE, std::memory_order_release);
    } else {
      const Call::Shared* same = step.op == step::SEND ? find_shared(call, st, payload) : nullptr;
      if (same) {  // these bytes already sit in a slot of this call: share them
        od->data_off = same->desc->data_off;
        od->owner_off = seg_.offset(same->desc);
        same->desc->sharers.fetch_add(1, std::memory_order_acq_rel);
      } else {
        for (int i = 0; i < payload.n; ++i)
          std::memcpy(out_data + i * payload.len, (const void*)(uintptr_t)payload.addr[i], payload.len);
        if (step.op == step::SEND) remember_shared(call, payload, t, s.posted, od);
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

}  // namespace dataplane
