// A rank's view of a communicator's shared segment (segment_layout.hpp): creating or
// opening and mapping it (segment.cpp), where each connection's control block and slots
// are (inline here: the interpreter asks at every step), and reserving in /dev/shm the
// parts a rank will touch.
//
// The segment is sparse: at the defaults its slots span gigabytes, and tmpfs gives a page
// memory only when it is first touched; a page touched when /dev/shm is full kills the
// process with SIGBUS. So every part is reserved (fallocate on the segment's file) before
// it is first touched: the header when the segment is created, a connection's control
// block and the bytes of its slots that a call writes before the call runs (a REMOTE
// message demoted into its slot just before it is copied there), a staging ring's slots
// as far as a call of its size fills them. A reservation that does not fit fails with a message
// that names the bytes needed and /dev/shm's free bytes (space_message).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "program.hpp"
#include "segment_layout.hpp"

namespace dataplane {

class Segment {
 public:
  Segment(const std::string& name, bool create, int nranks, int channels, int slots, uint64_t slot_bytes);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

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

  // Reserve what a call of `prog` on rank `rank` touches (elements of `esize` bytes, its
  // tile, whether cross-memory attach carries messages of `cma_threshold` bytes): the
  // control block of each of its connections, and of every slot of each send connection
  // the bytes the call writes there (slot_bytes_written). Remembers what it reserved: a
  // repeated call costs a pass over the program's steps and a comparison per thread
  // block. Returns "" or why it failed (space_message).
  std::string reserve_call(int rank, const Program& prog, size_t esize, int64_t tile, bool cma,
                           uint64_t cma_threshold);

  // Reserve the first `bytes` of slot `slot` of rank `rank`'s connection to `dst` on
  // channel `ch`, for a REMOTE message about to be demoted (copied into its slot: rare,
  // so reserved only then). Returns "" or why it failed.
  std::string reserve_demotion(int rank, int dst, int ch, uint64_t slot, uint64_t bytes);

  // Reserve the staging rings (each rank's area is the slots of its connection to itself):
  // the first `head_bytes` of every rank's area (peers read them), and of each of the
  // `slots` ring slots of `slot_bytes` after this rank's head (it writes them) the first
  // `call_bytes` (at most the slot). Remembers what it reserved. Returns "" or why it failed.
  std::string reserve_staging(int rank, uint64_t head_bytes, int slots, uint64_t slot_bytes, uint64_t call_bytes);

 private:
  // Reserve the byte ranges (offset, length) of the segment, `what` they are for; "" or
  // why not (space_message with `remedy`).
  std::string reserve(const std::vector<std::pair<uint64_t, uint64_t>>& ranges, const std::string& what,
                      const std::string& remedy);

  char* base_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;  // kept open for reservations (the name is unlinked once every rank has mapped it)
  Header* hdr_ = nullptr;
  std::vector<uint64_t> sent_;    // per (receiver, channel) of this rank's sends: 1 + bytes per slot reserved
  std::vector<char> received_;    // per (sender, channel) of its receives: control block reserved
  uint64_t staged_ = 0;           // 1 + bytes per staging ring slot reserved; 0: nothing yet
};

// The most bytes a call writes into one slot of a send connection as it posts messages:
// its largest message (the program's largest step of `tile` elements), or, where
// cross-memory attach carries the messages of at least `cma_threshold` bytes, only the
// smaller ones, which travel in the slots (unless the program has receive-reduce-send
// steps, whose messages always do). A REMOTE message demoted into its slot later is
// reserved then (reserve_demotion). At most `slot_bytes`.
uint64_t slot_bytes_written(const Program& prog, size_t esize, int64_t tile, bool cma, uint64_t cma_threshold,
                            uint64_t slot_bytes);

// "not enough shared memory: /dev/shm has F bytes free (of T), this rank needs N bytes of it for
// WHAT; give it more (a container: docker run --shm-size=...)" [" or " + remedy].
std::string space_message(uint64_t needed, const std::string& what, const std::string& remedy);

}  // namespace dataplane
