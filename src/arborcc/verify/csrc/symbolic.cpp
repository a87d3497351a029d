// run_layouts (symbolic.hpp) is the verifier's one symbolic run: the greedy schedule (a
// queue of thread blocks; a thread block runs until a dependency, an empty receive FIFO
// or a full send FIFO of `slots` messages stops it), which does not depend on memory, and
// on it, per memory layout, one value per chunk slot: the values of
// arborcc/verify/values.py (input chunks of sets of ranks, several chunk indices and
// repeated contributions included), the race rule (each slot's last writer and its
// readers since, in the order they first read; a conflicting pair not ordered by the
// rank's program order and dependencies is a candidate, settled through other ranks by
// races.cpp) and the postcondition (arborcc/verify/postconditions.py).
//
// It returns findings, which arborcc/verify/findings.py only formats: the order the
// steps completed in and the send each receive popped, the count mismatches, the wait of
// every thread block left blocked (a deadlock), the messages never received, and per
// layout the reads of uninitialized memory, the races and the wrong output chunks; a
// layout with none is proved. A layout a step reaches outside of is not followed (its
// values are left to arborcc/verify/symbolic.py, as are the layouts the caller does not
// hand over: big buffers, numbers beyond 32 bits).
//
// Rank-local order: local_order.hpp.

#include "symbolic.hpp"

#include <algorithm>
#include <deque>
#include <unordered_set>

#include "local_order.hpp"
#include "masks.hpp"
#include "races.hpp"

namespace verify {

namespace {

constexpr int32_t UNINITIALIZED = -1, MIXED = -2;
constexpr size_t MAX_CANDIDATES = 2000000;  // races.py / symbolic.py: MAX_CANDIDATES

// A slot's value (arborcc/verify/values.py): chunk >= 0: input chunk `chunk` of the ranks
// of the set `mask`; UNINITIALIZED; MIXED: `mask` indexes the table of mixed values.
struct Value {
  int32_t chunk;
  int32_t mask;
};

struct MixedValue {
  std::vector<std::pair<int32_t, int32_t>> parts;  // (chunk, rank set), by chunk
  bool dup;
};

// values.add: the multiset sum of two values.
class Values {
 public:
  explicit Values(MaskTable& masks) : masks_(masks) {}

  Value add(Value a, Value b) {
    if (a.chunk == UNINITIALIZED || b.chunk == UNINITIALIZED) return {UNINITIALIZED, 0};
    if (a.chunk >= 0 && b.chunk >= 0 && a.chunk == b.chunk) {
      const int32_t both = masks_.unite(a.mask, b.mask);
      if (!masks_.overlap(a.mask, b.mask)) return {a.chunk, both};
      return mixed({{a.chunk, both}}, true);
    }
    const auto pa = parts(a), pb = parts(b);
    bool dup = is_dup(a) || is_dup(b);
    std::vector<std::pair<int32_t, int32_t>> out;
    size_t i = 0, j = 0;
    while (i < pa.size() || j < pb.size()) {
      if (j == pb.size() || (i < pa.size() && pa[i].first < pb[j].first)) {
        out.push_back(pa[i++]);
      } else if (i == pa.size() || pb[j].first < pa[i].first) {
        out.push_back(pb[j++]);
      } else {
        if (masks_.overlap(pa[i].second, pb[j].second)) dup = true;
        out.push_back({pa[i].first, masks_.unite(pa[i].second, pb[j].second)});
        ++i, ++j;
      }
    }
    if (!dup && out.size() == 1) return {out[0].first, out[0].second};
    return mixed(std::move(out), dup);
  }

  // (chunk, ranks) parts and the repeated-contribution flag of an initialized value
  WrongValue describe(Value v) const {
    WrongValue w;
    w.initialized = v.chunk != UNINITIALIZED;
    if (!w.initialized) return w;
    w.dup = is_dup(v);
    for (const auto& [c, m] : parts(v)) w.parts.push_back({c, masks_.ranks(m)});
    return w;
  }

 private:
  std::vector<std::pair<int32_t, int32_t>> parts(Value v) const {
    if (v.chunk >= 0) return {{v.chunk, v.mask}};
    return table_[v.mask].parts;
  }
  bool is_dup(Value v) const { return v.chunk == MIXED && table_[v.mask].dup; }
  Value mixed(std::vector<std::pair<int32_t, int32_t>> parts, bool dup) {
    table_.push_back({std::move(parts), dup});
    return {MIXED, int32_t(table_.size() - 1)};
  }

  MaskTable& masks_;
  std::vector<MixedValue> table_;
};

struct Message {
  int gid, count;
  std::vector<Value> values;  // count per layout, layout after layout
};

struct Fifo {
  std::deque<Message> q;
  bool reader_waiting = false, writer_waiting = false;
};

// Per slot: its value, its last writer (gid, -1 for none) and the latest read of each
// thread block since that write, in the order the thread blocks first read, as a list in
// the layout's reader pool (-1: empty).
struct Slot {
  Value value;
  int32_t writer = -1;
  int32_t readers = -1;
};

struct Reader {
  int32_t tb, gid, next;
};

// One layout's memory and what the run found on it so far.
struct Memory {
  std::vector<Slot> slots;
  std::vector<Reader> pool;  // the reader lists; entries of overwritten slots are reused
  int32_t free = -1;
  bool outside = false;      // an access outside the layout: the values are left to Python
  std::vector<RaceCandidate> candidates;
  std::vector<std::array<long long, 3>> candidate_access;  // per candidate: slot, x writes, y writes
  std::unordered_set<unsigned long long> seen;             // (x, y, received) of the candidates
  LayoutFindings found;
};

}  // namespace

Proof run_layouts(const Program& p, int num_ranks, const std::vector<Layout>& layouts, int slots,
                  bool check_races) {
  const int ntb = p.num_tbs();
  const int nviews = (int)layouts.size();
  Proof proof;
  proof.proved.assign(nviews, false);
  proof.recv_src.assign(p.num_steps(), -1);
  proof.order.reserve(p.num_steps());
  MaskTable masks(num_ranks);
  Values values(masks);

  LocalOrder order(p);

  std::vector<Memory> mem(nviews);
  for (int v = 0; v < nviews; ++v) {
    const Layout& lay = layouts[v];
    Memory& m = mem[v];
    m.slots.assign(lay.total, Slot{Value{UNINITIALIZED, 0}});
    for (size_t pos = 0; pos < p.rank_id.size(); ++pos) {
      int data_ranks = masks.singleton(p.rank_id[pos]);
      for (long long a = lay.data[pos]; a < lay.data_end[pos]; ++a)
        m.slots[a].value = Value{int32_t(a - lay.data[pos]), data_ranks};
    }
  }

  int clock = -1;  // the clock of the step being run (LocalOrder::clock)
  auto other_tb = [&](int w, int g) { return w >= 0 && order.tb_of(w) != g; };  // an access by another thread block
  // races.ConflictLog.check: step prev accessed slot a before step gid of thread block g
  // does, one of them writing: a candidate unless program order and dependencies order it
  auto conflict = [&](Memory& m, int prev, int gid, int g, long long a, bool prev_writes, bool writes,
                      bool received) {
    if (order.ordered(prev, gid, g, clock)) return;
    const unsigned long long key = (uint64_t(uint32_t(prev)) << 33) | (uint64_t(uint32_t(gid)) << 1) | received;
    if (m.candidates.size() < MAX_CANDIDATES && m.seen.insert(key).second) {
      m.candidates.push_back({prev, gid, received});
      m.candidate_access.push_back({a, prev_writes, writes});
    }
  };
  // the accesses of step gid of thread block g to slot a (race rule of races.py)
  auto read_slot = [&](Memory& m, long long a, int gid, int g) {
    if (!check_races) return;
    Slot& slot = m.slots[a];
    if (other_tb(slot.writer, g)) conflict(m, slot.writer, gid, g, a, true, false, false);
    int32_t last = -1;
    for (int32_t k = slot.readers; k >= 0; k = m.pool[k].next) {
      if (m.pool[k].tb == g) {
        m.pool[k].gid = gid;
        return;
      }
      last = k;
    }
    int32_t k = m.free;
    if (k >= 0)
      m.free = m.pool[k].next;
    else
      k = (int32_t)m.pool.size(), m.pool.push_back({});
    m.pool[k] = Reader{g, gid, -1};
    if (last < 0)
      slot.readers = k;
    else
      m.pool[last].next = k;
  };
  auto write_slot = [&](Memory& m, long long a, Value val, int gid, int g, bool received) {
    Slot& slot = m.slots[a];
    if (check_races) {
      if (other_tb(slot.writer, g)) conflict(m, slot.writer, gid, g, a, true, true, received);
      if (slot.readers >= 0) {
        int32_t k = slot.readers;
        while (true) {
          const Reader e = m.pool[k];
          if (e.tb != g) conflict(m, e.gid, gid, g, a, false, true, received);
          if (e.next < 0) break;
          k = e.next;
        }
        m.pool[k].next = m.free;  // the list goes back to the pool
        m.free = slot.readers;
        slot.readers = -1;
      }
    }
    slot.value = val;
    slot.writer = gid;
  };

  std::vector<Fifo> fifos(p.conns.size());
  std::vector<int> pc(ntb, 0), signal(ntb, -1);
  std::vector<std::vector<std::pair<int, int>>> dep_waiters(ntb);
  std::deque<int> ready;
  for (int g = 0; g < ntb; ++g) ready.push_back(g);
  long long seq = 0;
  std::vector<Value> src, got;

  while (!ready.empty()) {
    const int g = ready.front();
    ready.pop_front();
    const int base = p.tb_base[g], nsteps = p.tb_base[g + 1] - base, pos = p.tb_rank_pos[g];
    const int rc = p.recv_conn[g], sc = p.send_conn[g];
    int i = pc[g];
    while (i < nsteps) {
      const int gid = base + i;
      const int tg = p.dep_tb[gid];
      if (tg >= 0 && signal[tg] < p.dep_step[gid]) {
        dep_waiters[tg].push_back({p.dep_step[gid], g});
        break;
      }
      const uint8_t f = p.flags[gid];
      if ((f & RECEIVES) && fifos[rc].q.empty()) {
        fifos[rc].reader_waiting = true;
        break;
      }
      if ((f & SENDS) && (int)fifos[sc].q.size() >= slots) {
        fifos[sc].writer_waiting = true;
        break;
      }
      if (tg >= 0 && check_races) order.on_dependency(g, i, tg, p.dep_step[gid]);
      if (check_races) clock = order.clock(g, i);
      const int cnt = p.count[gid];
      if (f & (SENDS | RECEIVES | READS_SRC | WRITES_DST)) {  // not a nop
        Message in{-1, 0, {}};
        bool mismatch = false;
        if (f & RECEIVES) {
          in = std::move(fifos[rc].q.front());
          fifos[rc].q.pop_front();
          if (fifos[rc].writer_waiting) {
            fifos[rc].writer_waiting = false;
            ready.push_back(p.conns[rc].sender);
          }
          proof.recv_src[gid] = in.gid;
          if (in.count != cnt) {  // a count mismatch: the values received are cut or padded
            mismatch = true;
            proof.mismatches.push_back(gid);
          }
        }
        Message outgoing{gid, cnt, {}};
        if (f & SENDS) outgoing.values.assign(size_t(cnt) * nviews, Value{UNINITIALIZED, 0});
        for (int v = 0; v < nviews; ++v) {
          Memory& m = mem[v];
          if (m.outside) continue;
          if (mismatch) m.found.events.push_back({MISMATCH, gid, in.gid});
          const long long* bases = &layouts[v].bases[3 * pos];
          const long long total = layouts[v].total;
          auto address = [&](uint8_t buf, int off) -> long long {
            if (buf > 2 || bases[buf] < 0) return -1;
            long long a = bases[buf] + off;
            return a >= 0 && a + cnt <= total ? a : -1;
          };
          // the first slot of n from a that holds no data: a read of uninitialized memory
          auto check_initialized = [&](long long a, const std::vector<Value>& read, int what) {
            for (size_t j = 0; j < read.size(); ++j)
              if (read[j].chunk == UNINITIALIZED) {
                m.found.events.push_back({what, gid, a + (long long)j});
                return;
              }
          };
          src.clear();
          got.clear();
          if (f & READS_SRC) {
            long long sa = address(p.src_buf[gid], p.src_off[gid]);
            if (sa < 0) { m.outside = true; continue; }
            for (int j = 0; j < cnt; ++j) {
              read_slot(m, sa + j, gid, g);
              src.push_back(m.slots[sa + j].value);
            }
            check_initialized(sa, src, UNINITIALIZED_SOURCE);
          }
          if (f & RECEIVES) {  // values.fit_runs: the message cut or padded to cnt slots
            got.assign(cnt, Value{UNINITIALIZED, 0});
            const int n = std::min(cnt, in.count);
            for (int j = 0; j < n; ++j) got[j] = in.values[size_t(v) * in.count + j];
          }
          // the step's value: what it writes and what it sends (the step table, arborcc.ir.steps)
          std::vector<Value>& val = (f & RECEIVES) ? got : src;
          if ((f & RECEIVES) && (f & READS_SRC))
            for (int j = 0; j < cnt; ++j) got[j] = values.add(src[j], got[j]);
          if (f & WRITES_DST) {
            long long da = address(p.dst_buf[gid], p.dst_off[gid]);
            if (da < 0) { m.outside = true; continue; }
            if (f & READS_DST) {  // reduce: dst := dst + src
              std::vector<Value> cur(cnt);
              for (int j = 0; j < cnt; ++j) {
                read_slot(m, da + j, gid, g);
                cur[j] = m.slots[da + j].value;
              }
              check_initialized(da, cur, UNINITIALIZED_DESTINATION);
              for (int j = 0; j < cnt; ++j) val[j] = values.add(cur[j], src[j]);
            }
            for (int j = 0; j < cnt; ++j) write_slot(m, da + j, val[j], gid, g, f & RECEIVES);
          }
          if (f & SENDS) std::copy(val.begin(), val.end(), outgoing.values.begin() + size_t(v) * cnt);
        }
        if (f & SENDS) {
          fifos[sc].q.push_back(std::move(outgoing));
          if (fifos[sc].reader_waiting) {
            fifos[sc].reader_waiting = false;
            ready.push_back(p.conns[sc].receiver);
          }
        }
        if (p.has_dep[gid]) {
          signal[g] = i;
          release_waiters(dep_waiters[g], i, ready);
        }
      }
      proof.order.push_back(gid);
      ++seq;
      ++i;
    }
    pc[g] = i;
  }
  proof.steps_run = seq;
  for (int g = 0; g < ntb; ++g) {
    const int base = p.tb_base[g];
    if (pc[g] >= p.tb_base[g + 1] - base) continue;
    // a deadlock: the first condition of the step it stopped at that fails, in the order
    // the run checks them (whatever would lift it would have put it back to run)
    const int gid = base + pc[g], tg = p.dep_tb[gid];
    if (tg >= 0 && signal[tg] < p.dep_step[gid])
      proof.blocked.push_back({g, pc[g], WAITS_FOR_SIGNAL, tg});
    else if ((p.flags[gid] & RECEIVES) && fifos[p.recv_conn[g]].q.empty())
      proof.blocked.push_back({g, pc[g], WAITS_TO_RECEIVE, p.recv_conn[g]});
    else
      proof.blocked.push_back({g, pc[g], WAITS_TO_SEND, p.send_conn[g]});
  }
  for (size_t c = 0; c < fifos.size(); ++c)
    if (!fifos[c].q.empty())  // sent but never received
      proof.unreceived.push_back({(int)c, fifos[c].q.front().gid, (int)fifos[c].q.size()});
  const bool schedule_clean = proof.blocked.empty() && proof.unreceived.empty() && proof.mismatches.empty();
  proof.layouts.resize(nviews);
  for (int v = 0; v < nviews; ++v) {
    Memory& m = mem[v];
    LayoutFindings& found = m.found;
    found.followed = !m.outside;
    if (m.outside) continue;
    // the candidates no path through other ranks orders, each pair once (races.py)
    found.race_candidates = (long long)m.candidates.size();
    found.races_incomplete = m.candidates.size() >= MAX_CANDIDATES;
    const std::vector<bool> ordered = ordered_through_ranks(p, proof.order, proof.recv_src, m.candidates);
    std::unordered_set<unsigned long long> reported;
    for (size_t n = 0; n < m.candidates.size(); ++n) {
      const RaceCandidate& c = m.candidates[n];
      if (ordered[n] || !reported.insert((uint64_t(uint32_t(c.x)) << 32) | uint32_t(c.y)).second) continue;
      found.races.push_back({c.y, c.x, m.candidate_access[n][0], m.candidate_access[n][2], m.candidate_access[n][1]});
    }
    if (proof.blocked.empty()) {  // the postcondition, where the run finished
      const int every = masks.everyone(num_ranks);
      for (size_t k = 0; k < layouts[v].expected.size(); ++k) {
        const auto& run = layouts[v].expected[k];
        const int want = run[3] < 0 ? every : masks.singleton((int)run[3]);
        for (long long j = 0; j < run[1]; ++j) {
          const Slot& slot = m.slots[run[0] + j];
          if (slot.value.chunk != run[2] + j || slot.value.mask != want) {
            WrongValue w = values.describe(slot.value);
            w.run = (int)k;
            w.index = j;
            w.writer = slot.writer;
            found.wrong.push_back(std::move(w));
          }
        }
      }
    }
    proof.proved[v] = schedule_clean && found.events.empty() && found.races.empty() && !found.races_incomplete &&
                      found.wrong.empty();
    proof.layouts[v] = std::move(found);
  }
  return proof;
}

}  // namespace verify
