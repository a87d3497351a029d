// run_layouts (symbolic.hpp) is the verifier's one symbolic run: the greedy schedule (a
// queue of thread blocks; a thread block runs until a dependency, an empty receive FIFO
// or a full send FIFO of `slots` messages stops it), which does not depend on memory, and
// on it, per memory layout, the proof that the run reports nothing: the values of
// arborcc/verify/values.py (a slot holds input chunk c of a set of ranks), the race rule
// (each slot's last writer and its readers since, every conflicting pair ordered by the
// rank's program order and dependencies) and the postcondition
// (arborcc/verify/postconditions.py), one value per slot.
//
// What the schedule finds is returned as findings the Python side only formats: the
// order the steps completed in and the send each receive popped, the count mismatches,
// the wait of every thread block left blocked (a deadlock) and the messages never
// received. A layout is not proved where the run would report a violation - a deadlock,
// a count mismatch, data left unreceived, a read of uninitialized memory, a wrong output
// chunk - or would have to look further - a value with several chunk indices or a
// repeated contribution (values.Mixed: legal, but never a correct result), or a
// conflicting pair that the rank's program order and dependencies do not order (a race
// candidate, which races.resolve_candidates settles through other ranks); for those,
// arborcc/verify/symbolic.py follows the values over the order this run returns and
// explains what is wrong.
//
// Rank-local order: local_order.hpp.

#include "symbolic.hpp"

#include <algorithm>
#include <deque>

#include "local_order.hpp"
#include "masks.hpp"

namespace verify {

namespace {

struct Value {
  int32_t chunk;  // -1: uninitialized
  int32_t mask;
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
// thread block since that write, as a list in the layout's reader pool (-1: empty).
struct Slot {
  Value value;
  int32_t writer = -1;
  int32_t readers = -1;
};

struct Reader {
  int32_t tb, gid, next;
};

struct Memory {
  std::vector<Slot> slots;
  std::vector<Reader> pool;  // the reader lists; entries of overwritten slots are reused
  int32_t free = -1;
  bool failed = false;
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

  LocalOrder order(p);

  std::vector<Memory> mem(nviews);
  for (int v = 0; v < nviews; ++v) {
    const Layout& lay = layouts[v];
    Memory& m = mem[v];
    m.slots.assign(lay.total, Slot{Value{-1, -1}});
    for (size_t pos = 0; pos < p.rank_id.size(); ++pos) {
      int data_ranks = masks.singleton(p.rank_id[pos]);
      for (long long a = lay.data[pos]; a < lay.data_end[pos]; ++a)
        m.slots[a].value = Value{int32_t(a - lay.data[pos]), data_ranks};
    }
  }

  int clock = -1;  // the clock of the step being run (LocalOrder::clock)
  auto ordered_locally = [&](int x, int y, int b) { return order.ordered(x, y, b, clock); };
  auto other_tb = [&](int w, int g) { return w >= 0 && order.tb_of(w) != g; };  // an access by another thread block
  // the accesses of step gid of thread block g to slot a of layout v (race rule of races.py)
  auto read_slot = [&](Memory& m, long long a, int gid, int g) {
    if (!check_races) return;
    Slot& slot = m.slots[a];
    if (other_tb(slot.writer, g) && !ordered_locally(slot.writer, gid, g)) m.failed = true;
    for (int32_t k = slot.readers; k >= 0; k = m.pool[k].next)
      if (m.pool[k].tb == g) {
        m.pool[k].gid = gid;
        return;
      }
    int32_t k = m.free;
    if (k >= 0)
      m.free = m.pool[k].next;
    else
      k = (int32_t)m.pool.size(), m.pool.push_back({});
    m.pool[k] = Reader{g, gid, slot.readers};
    slot.readers = k;
  };
  auto write_slot = [&](Memory& m, long long a, Value val, int gid, int g) {
    Slot& slot = m.slots[a];
    if (check_races) {
      if (other_tb(slot.writer, g) && !ordered_locally(slot.writer, gid, g)) m.failed = true;
      if (slot.readers >= 0) {
        int32_t k = slot.readers;
        while (true) {
          const Reader& e = m.pool[k];
          if (e.tb != g && !ordered_locally(e.gid, gid, g)) m.failed = true;
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
  auto add = [&](Memory& m, Value x, Value y) {  // values.add, where its result is a pair
    if (x.chunk != y.chunk || masks.overlap(x.mask, y.mask)) {
      m.failed = true;
      return x;
    }
    return Value{x.chunk, masks.unite(x.mask, y.mask)};
  };

  std::vector<Fifo> fifos(p.conns.size());
  std::vector<int> pc(ntb, 0), signal(ntb, -1);
  std::vector<std::vector<std::pair<int, int>>> dep_waiters(ntb);
  std::deque<int> ready;
  for (int g = 0; g < ntb; ++g) ready.push_back(g);
  bool schedule_failed = false;
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
        Message in;
        if (f & RECEIVES) {
          in = std::move(fifos[rc].q.front());
          fifos[rc].q.pop_front();
          if (fifos[rc].writer_waiting) {
            fifos[rc].writer_waiting = false;
            ready.push_back(p.conns[rc].sender);
          }
          proof.recv_src[gid] = in.gid;
          if (in.count != cnt) {  // a count mismatch: the values stop here, the schedule goes on
            schedule_failed = true;
            proof.mismatches.push_back(gid);
          }
        }
        Message outgoing{gid, cnt, {}};
        if (f & SENDS) outgoing.values.assign(size_t(cnt) * nviews, Value{-1, -1});
        for (int v = 0; v < nviews; ++v) {
          Memory& m = mem[v];
          if (m.failed || schedule_failed) continue;
          const long long* bases = &layouts[v].bases[3 * pos];
          const long long total = layouts[v].total;
          auto address = [&](uint8_t buf, int off) -> long long {
            if (buf > 2 || bases[buf] < 0) return -1;
            long long a = bases[buf] + off;
            return a >= 0 && a + cnt <= total ? a : -1;
          };
          src.clear();
          got.clear();
          if (f & READS_SRC) {
            long long sa = address(p.src_buf[gid], p.src_off[gid]);
            if (sa < 0) { m.failed = true; continue; }
            for (int j = 0; j < cnt; ++j) {
              read_slot(m, sa + j, gid, g);
              if (m.slots[sa + j].value.chunk < 0) m.failed = true;  // uninitialized
              src.push_back(m.slots[sa + j].value);
            }
          }
          if (f & RECEIVES) got.assign(in.values.begin() + size_t(v) * cnt, in.values.begin() + size_t(v + 1) * cnt);
          // the step's value: what it writes and what it sends (the step table, arborcc.ir.steps)
          std::vector<Value>& val = (f & RECEIVES) ? got : src;
          if ((f & RECEIVES) && (f & READS_SRC))
            for (int j = 0; j < cnt; ++j) got[j] = add(m, src[j], got[j]);
          if (f & WRITES_DST) {
            long long da = address(p.dst_buf[gid], p.dst_off[gid]);
            if (da < 0) { m.failed = true; continue; }
            if (f & READS_DST)  // reduce: dst := dst + src
              for (int j = 0; j < cnt; ++j) {
                read_slot(m, da + j, gid, g);
                if (m.slots[da + j].value.chunk < 0) m.failed = true;
                val[j] = add(m, m.slots[da + j].value, src[j]);
              }
            for (int j = 0; j < cnt; ++j) write_slot(m, da + j, val[j], gid, g);
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
    schedule_failed = true;
    const int gid = base + pc[g], tg = p.dep_tb[gid];
    if (tg >= 0 && signal[tg] < p.dep_step[gid])
      proof.blocked.push_back({g, pc[g], WAITS_FOR_SIGNAL, tg});
    else if ((p.flags[gid] & RECEIVES) && fifos[p.recv_conn[g]].q.empty())
      proof.blocked.push_back({g, pc[g], WAITS_TO_RECEIVE, p.recv_conn[g]});
    else
      proof.blocked.push_back({g, pc[g], WAITS_TO_SEND, p.send_conn[g]});
  }
  for (size_t c = 0; c < fifos.size(); ++c)
    if (!fifos[c].q.empty()) {  // sent but never received
      schedule_failed = true;
      proof.unreceived.push_back({(int)c, fifos[c].q.front().gid, (int)fifos[c].q.size()});
    }
  if (schedule_failed) return proof;
  for (int v = 0; v < nviews; ++v) {
    Memory& m = mem[v];
    if (m.failed) continue;
    int every = masks.everyone(num_ranks);
    for (const auto& run : layouts[v].expected) {
      const int want = run[3] < 0 ? every : masks.singleton((int)run[3]);
      for (long long j = 0; j < run[1] && !m.failed; ++j) {
        const Value got_value = m.slots[run[0] + j].value;
        if (got_value.chunk != run[2] + j || got_value.mask != want) m.failed = true;
      }
    }
    proof.proved[v] = !m.failed;
  }
  return proof;
}

}  // namespace verify
