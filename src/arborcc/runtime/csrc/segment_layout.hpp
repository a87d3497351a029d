// The layout of a communicator's shared-memory segment, which every rank maps: a header
// (sizes, abort flag, one control block per rank, values rank 0 publishes), then per
// connection (sender, receiver, channel) a control block with its FIFO's slot
// descriptors, then the slots' data. Bump MAGIC whenever this layout changes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace dataplane {

constexpr uint64_t MAGIC = 0x61726230726363ULL + 6;  // bump when the layout changes
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
  // the sender's call (call_descriptor.hpp): a receiver compares it with its own
  uint64_t what, count;
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
  // Where the last posted all-gather's output is when it lies in one of this rank's
  // shared arrays and the peers are to write their blocks into it (win_out_id -1: the
  // rank reads the peers' blocks itself).
  std::atomic<int64_t> win_out_id;
  std::atomic<uint64_t> win_out_off;
};

// A rank's calls and progress, which only that rank writes and its peers read: the
// descriptor of each of its last CALL_HISTORY calls (call_descriptor.hpp) under a sequence
// lock (`seq` 0 while it is written), the calls it has begun, and for a peer that times
// out, whether it is moving: `progress` moves whenever it begins a call or a wait of it
// ends; while it waits, `waiting` has bit q set for each rank q it waits for and `beats`
// moves about every 0.1 s. A process stopped (SIGSTOP) or stuck outside the data plane
// moves neither.
constexpr int CALL_HISTORY = 32;

struct CallRecord {
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> what, count;
};

struct alignas(64) RankState {
  std::atomic<uint64_t> calls;
  std::atomic<uint64_t> progress;
  std::atomic<uint64_t> waiting;
  std::atomic<uint64_t> beats;
  CallRecord call[CALL_HISTORY];
};

struct Header {
  uint64_t magic;
  uint32_t nranks, channels, slots, pad;
  uint64_t slot_bytes, total_size, conn_off, data_off;
  std::atomic<int32_t> abort_rank;  // rank + 1 of the first rank that failed (-(rank + 1) while it writes
                                    // abort_msg); 0 none
  char abort_msg[480];
  RankCell ranks[MAX_RANKS];
  RankState state[MAX_RANKS];
  // values rank 0 publishes for a numbered call (the slice size chosen by online tuning)
  std::atomic<uint64_t> published_seq[64];
  std::atomic<int64_t> published_val[64];
};

inline size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

}  // namespace dataplane
