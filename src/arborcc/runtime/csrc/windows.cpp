// Shared arrays: windows of memory that every rank maps (mapping the peers' windows,
// unmapping them), and the collectives on them that read the peers' blocks with plain
// loads (all-gather, broadcast).

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "communicator.hpp"
#include "errors.hpp"
#include "kernels.hpp"

namespace dataplane {

void Communicator::map_window(int64_t id, uint64_t own_addr, uint64_t bytes, const std::string& prefix, const std::string& suffix,
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

void Communicator::unmap_window(int64_t id) {
  auto it = windows_.find(id);
  if (it == windows_.end()) return;
  unmap_peers(it->second);
  windows_.erase(it);
}

void Communicator::window_collective(int64_t id, uint64_t send_off, uint64_t bytes, uint64_t out_addr, int root,
                                     uint64_t stream_bytes, int threads, double timeout, bool push, uint64_t what,
                                     uint64_t count) {
  check_abort();
  begin_call(CallDesc{what, count});
  auto it = windows_.find(id);
  if (it == windows_.end()) throw CommError("rank " + std::to_string(rank_) + ": no shared array " + std::to_string(id));
  if (send_off + bytes > it->second.bytes)
    throw CommError("rank " + std::to_string(rank_) + ": the send buffer ends outside its shared array");
  const bool gather = root < 0;
  const bool streaming = stream_bytes > 0 && bytes * (gather ? n_ : 1) >= stream_bytes;
  // An all-gather written with streaming stores into an output in this rank's shared
  // arrays takes the peers' blocks from the peers, who write them there themselves
  // (push): each rank then reads its own block once and stores it into every output,
  // instead of reading all n blocks (half the bytes read on 2 ranks).
  int64_t out_id = -1;
  uint64_t out_off = 0;
  if (gather && streaming && push) find_own_window(out_addr, bytes * n_, &out_id, &out_off);
  Header* h = seg_.hdr();
  RankCell& me = h->ranks[rank_];
  const uint64_t seq = ++win_calls_;
  me.win_id.store(id, std::memory_order_relaxed);
  me.win_off.store(send_off, std::memory_order_relaxed);
  me.win_bytes.store(bytes, std::memory_order_relaxed);
  me.win_out_id.store(out_id, std::memory_order_relaxed);
  me.win_out_off.store(out_off, std::memory_order_relaxed);
  me.win_posted.store(seq, std::memory_order_release);
  for (int r = 0; r < n_; ++r)
    if (r != rank_) wake(r);
  char* out = (char*)(uintptr_t)out_addr;
  const char* own = it->second.base[rank_] + send_off;
  // A posted peer's call: the same call as this rank's (call_descriptor.hpp), or the call fails.
  auto check_call = [&](int p) {
    if (!agrees(p)) fail_diverged(p);  // in a shared-array call of this number, but not this call
  };
  const int nthreads = std::max(1, std::min<int>(threads, n_ - 1));
  const bool push_first = gather && streaming && push;
  if (push_first) {
    push_own_block(own, out + (uint64_t)rank_ * bytes, bytes, seq, nthreads, check_call, timeout);
  } else if (gather || root == rank_) {
    copy_bytes(gather ? out + (uint64_t)rank_ * bytes : out, own, bytes, streaming);
  }
  // the peers' blocks this rank reads, in the order they are posted (ranks start on
  // different peers)
  std::vector<int> pending;
  for (int k = 1; k < n_ && out_id < 0; ++k)
    if (gather || (rank_ != root && (rank_ + k) % n_ == root)) pending.push_back((rank_ + k) % n_);
  auto read_peers = [&](std::vector<int> peers) {
    while (!peers.empty()) {
      int p = wait_any(peers, &RankCell::win_posted, seq, "to post its send buffer", timeout);
      check_call(p);
      RankCell& peer = h->ranks[p];
      int64_t pid = peer.win_id.load(std::memory_order_relaxed);
      uint64_t off = peer.win_off.load(std::memory_order_relaxed);
      auto pw = windows_.find(pid);
      if (pw == windows_.end() || off + bytes > pw->second.bytes)
        fail("rank " + std::to_string(p) + " sent " + std::to_string(bytes) + " bytes at offset " +
             std::to_string(off) + " of shared array " + std::to_string(pid) + ", which this rank has not mapped "
             "or which is smaller (do all ranks allocate the same shared arrays?)");
      copy_bytes(gather ? out + (uint64_t)p * bytes : out, pw->second.base[p] + off, bytes, streaming);
      // a peer that pushes (its stream_bytes or push option differ from this rank's) wants this rank's block
      if (gather && !push_first && peer.win_out_id.load(std::memory_order_relaxed) >= 0) {
        char* dst = peer_output(p, bytes);
        copy_to_many(&dst, 1, own, bytes, streaming);
      }
    }
  };
  // with `threads` > 1, the peers' blocks are split over that many threads (while one
  // waits for a peer, another copies; see Options.workers)
  const int readers = std::min<int>(nthreads, (int)pending.size());
  if (readers <= 1) {
    read_peers(pending);
  } else {
    std::vector<std::vector<int>> groups(readers);
    for (size_t i = 0; i < pending.size(); ++i) groups[i % readers].push_back(pending[i]);
    on_pool(readers, [&](int w) { read_peers(groups[w]); });
  }
  pending.clear();
  // done: this rank has read the peers' blocks it reads and written its block into the
  // outputs it writes; it returns once every peer is done with it (read this rank's
  // block, written theirs into this rank's output)
  me.win_done.store(seq, std::memory_order_release);
  for (int r = 0; r < n_; ++r)
    if (r != rank_) wake(r);
  for (int k = 1; k < n_; ++k) pending.push_back((rank_ + k) % n_);
  while (!pending.empty())
    wait_any(pending, &RankCell::win_done, seq, "to finish with this rank's send buffer and output", timeout);
}

void Communicator::push_own_block(const char* own, char* own_dst, uint64_t bytes, uint64_t seq, int nthreads,
                                  const std::function<void(int)>& check_call, double timeout) {
  Header* h = seg_.hdr();
  std::vector<char*> dsts;
  if (own_dst != own) dsts.push_back(own_dst);  // in place the own block is where it belongs
  // every peer's output that lies in its shared arrays gets this rank's block (the other
  // peers read it themselves)
  std::vector<int> peers;
  for (int k = 1; k < n_; ++k) peers.push_back((rank_ + k) % n_);
  while (!peers.empty()) {
    int p = wait_any(peers, &RankCell::win_posted, seq, "to post its send buffer", timeout);
    check_call(p);
    if (h->ranks[p].win_out_id.load(std::memory_order_relaxed) >= 0) dsts.push_back(peer_output(p, bytes));
  }
  // with `threads` > 1 the block is split over that many threads, in whole pages; each
  // part goes in 256 KB pieces, last to first on every other call: the pieces read last
  // by the previous call, still in the core's L2, are read first
  const uint64_t part = align_up((bytes + nthreads - 1) / nthreads, 4096);
  const int parts = nthreads > 1 && part < bytes ? (int)((bytes + part - 1) / part) : 1;
  constexpr uint64_t PIECE = 256 << 10;
  auto copy_part = [&](int w) {
    uint64_t lo = parts == 1 ? 0 : (uint64_t)w * part, hi = parts == 1 ? bytes : std::min(bytes, lo + part);
    std::vector<char*> at(dsts.size());
    const uint64_t pieces = (hi - lo + PIECE - 1) / PIECE;
    for (uint64_t k = 0; k < pieces; ++k) {
      uint64_t from = lo + (seq % 2 ? pieces - 1 - k : k) * PIECE, n = std::min(PIECE, hi - from);
      for (size_t j = 0; j < dsts.size(); ++j) at[j] = dsts[j] + from;
      copy_to_many(at.data(), (int)at.size(), own + from, n, true);
    }
  };
  if (parts == 1) {
    copy_part(0);
  } else {
    on_pool(parts, copy_part);
  }
}

char* Communicator::peer_output(int p, uint64_t bytes) {
  RankCell& peer = seg_.hdr()->ranks[p];
  int64_t id = peer.win_out_id.load(std::memory_order_relaxed);
  uint64_t off = peer.win_out_off.load(std::memory_order_relaxed);
  auto pw = windows_.find(id);
  if (pw == windows_.end() || off + bytes * n_ > pw->second.bytes)
    fail("rank " + std::to_string(p) + "'s output (" + std::to_string(bytes * n_) + " bytes at offset " +
         std::to_string(off) + " of shared array " + std::to_string(id) + ") is not in an array this rank "
         "has mapped (do all ranks allocate the same shared arrays?)");
  return pw->second.base[p] + off + (uint64_t)rank_ * bytes;
}

bool Communicator::find_own_window(uint64_t addr, uint64_t bytes, int64_t* id, uint64_t* off) const {
  for (const auto& kv : windows_) {
    uint64_t base = (uint64_t)(uintptr_t)kv.second.base[rank_];
    if (base <= addr && addr + bytes <= base + kv.second.bytes) {
      *id = kv.first;
      *off = addr - base;
      return true;
    }
  }
  return false;
}

void Communicator::unmap_peers(Window& w) {
  for (int p = 0; p < (int)w.base.size(); ++p)
    if (p != rank_ && w.base[p]) munmap(w.base[p], w.bytes);
}

int Communicator::wait_any(std::vector<int>& peers, std::atomic<uint64_t> RankCell::*field, uint64_t value, const char* what,
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
  Watch w;
  for (;;) {
    int p = ready();
    if (p >= 0) {
      unwatch(w);
      return p;
    }
    uint32_t s = me.seq.load(std::memory_order_seq_cst);
    if ((p = ready()) >= 0) {
      unwatch(w);
      return p;
    }
    wait_change(s, 20000000);
    if (elapsed(last_check) > 0.1) {
      last_check = std::chrono::steady_clock::now();
      check_abort();
      uint64_t mask = 0;
      for (int q : peers) {
        int pid = h->ranks[q].pid.load();
        if (!process_alive(pid))
          fail("rank " + std::to_string(q) + " died (process " + std::to_string(pid) + " is gone) while this rank "
               "waited for it " + what);
        mask |= 1ULL << q;
      }
      watch(w, mask);
      if (elapsed(t0) > timeout)
        fail_timeout(w, mask, timeout, "this rank waits for rank " + std::to_string(peers[0]) + " " + what +
                     "; do all ranks pass shared arrays to the same calls?");
    }
  }
}

}  // namespace dataplane
