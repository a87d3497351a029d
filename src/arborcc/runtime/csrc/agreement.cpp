// The calls' descriptors (call_descriptor.hpp) that the ranks compare before data moves:
// each rank publishes its call's in its RankState at call entry; a rank compares a peer's
// with its own the first time in a call it reads a message of that peer (the message
// carries the sender's descriptor and call number) or finds that peer in a call of its
// staging ring or shared arrays, and, while a wait lasts, every ~0.1 s. A mismatch fails
// the call on this rank and aborts the communicator, so every rank fails with the line
// that names the rank and the field.

#include "communicator.hpp"

namespace dataplane {

static std::string describe(const CallDesc& d) {
  std::string s = call_name(CALL_COLLECTIVES, CALL_NCOLLECTIVES, d.collective()) + " of " + std::to_string(d.count) +
                  " " + call_name(CALL_DTYPES, CALL_NDTYPES, d.dtype());
  if (d.op()) s += " with " + call_name(CALL_OPS, CALL_NOPS, d.op());
  if (d.root() >= 0) s += " from root " + std::to_string(d.root());
  return s;
}

void Communicator::begin_call(const CallDesc& desc) {
  RankState& me = seg_.hdr()->state[rank_];
  const uint64_t seq = ++calls_;
  desc_ = desc;
  CallRecord& r = me.call[seq % CALL_HISTORY];
  r.seq.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  r.what.store(desc.what, std::memory_order_relaxed);
  r.count.store(desc.count, std::memory_order_relaxed);
  r.seq.store(seq, std::memory_order_release);
  me.calls.store(seq, std::memory_order_release);
  me.progress.store(me.progress.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

bool Communicator::record_of(int q, uint64_t seq, CallDesc* desc) const {
  const CallRecord& r = seg_.hdr()->state[q].call[seq % CALL_HISTORY];
  if (seq == 0 || r.seq.load(std::memory_order_acquire) != seq) return false;
  desc->what = r.what.load(std::memory_order_relaxed);
  desc->count = r.count.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  return r.seq.load(std::memory_order_relaxed) == seq;
}

bool Communicator::agrees(int q) {
  // one cache line of the peer's: its record of this call number's slot
  const CallRecord& r = seg_.hdr()->state[q].call[calls_ % CALL_HISTORY];
  const uint64_t at = r.seq.load(std::memory_order_acquire);
  if (at != calls_) return at > calls_;  // 0 or an earlier call: not begun; a later one: far ahead, gone
  CallDesc theirs;
  if (record_of(q, calls_, &theirs) && theirs != desc_) fail(call_mismatch(q, theirs, rank_, desc_));
  return true;
}

void Communicator::fail_diverged(int q) {
  const uint64_t theirs_at = seg_.hdr()->state[q].calls.load(std::memory_order_acquire);
  const uint64_t at = std::min(theirs_at, calls_);
  CallDesc theirs, mine;
  if (record_of(q, at, &theirs) && record_of(rank_, at, &mine) && theirs != mine)
    fail(call_mismatch(q, theirs, rank_, mine));
  std::string who = "call mismatch: rank " + std::to_string(q) + " is at its call " + std::to_string(theirs_at);
  if (record_of(q, theirs_at, &theirs)) who += " (" + describe(theirs) + ")";
  fail(who + ", this rank at its call " + std::to_string(calls_) + " (" + describe(desc_) +
       "): do all ranks make the same calls in the same order?");
}

void Communicator::check_calls(uint64_t peers) {
  for (int q = 0; q < n_; ++q) {
    if (!(peers >> q & 1) || agrees(q)) continue;
    // q has not begun this call: if it waits for this rank in an earlier call, that call differs
    const RankState& s = seg_.hdr()->state[q];
    const uint64_t at = s.calls.load(std::memory_order_acquire);
    CallDesc theirs, mine;
    if ((s.waiting.load(std::memory_order_relaxed) >> rank_ & 1) && record_of(q, at, &theirs) &&
        record_of(rank_, at, &mine) && theirs != mine)
      fail(call_mismatch(q, theirs, rank_, mine));
  }
}

void Communicator::fail_message(int q, uint64_t id, const CallDesc& theirs, const Call& call, int channel) {
  if (id == call.id) fail(call_mismatch(q, theirs, rank_, call.desc));
  // the message belongs to another call: compare the two ranks' calls of the earlier number
  CallDesc a, b;
  const uint64_t at = std::min(id, call.id);
  if (record_of(rank_, at, &b) && (at == id ? (a = theirs, true) : record_of(q, at, &a)) && a != b)
    fail(call_mismatch(q, a, rank_, b));
  fail("call mismatch: rank " + std::to_string(q) + " sent a message of its call " + std::to_string(id) + " (" +
       describe(theirs) + ") on channel " + std::to_string(channel) + " to this rank's call " +
       std::to_string(call.id) + " (" + describe(call.desc) + "): do all ranks make the same calls in the same order?");
}

}  // namespace dataplane
