// run_layouts (symbolic.hpp) is the verifier's one symbolic run: the greedy schedule (a
// queue of thread blocks; a thread block runs until a dependency, an empty receive FIFO
// or a full send FIFO of `slots` messages stops it), which does not depend on memory, and
// on it, per memory layout, the values (input chunks of sets of ranks, several chunk
// indices and repeated contributions included: the multisets of docs/ir.md section 5),
// the race rule (each slot's last writer and its readers since, in the order they first
// read; a conflicting pair not ordered by the rank's program order and dependencies is a
// candidate, settled through other ranks by races.cpp) and the postcondition
// (arborcc/verify/postconditions.py gives the runs each rank's output must hold).
//
// Memory is kept in segments: before the run, a layout's slots are cut at both ends of
// every range a step accesses (and of the data and the postcondition's runs), so every
// access covers whole segments and the slots of a segment always share their values, last
// writer and readers. A segment's values are runs: slot j of a run holds its value with
// every input chunk index j higher (values of consecutive slots usually differ only so:
// consecutive input chunks). So the run's memory and work grow with the ranges the steps
// access, not with their chunk counts, and every conflicting pair a slot-by-slot run
// finds is found at the same first slot.
//
// It returns findings, which arborcc/verify/findings.py only words: the order the steps
// completed in and the send each receive popped, the count mismatches, the wait of every
// thread block left blocked (a deadlock), the messages never received, and per layout the
// reads of uninitialized memory, the steps reaching outside their buffers, the races and
// the wrong output chunks; a layout with none is proved.
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
constexpr size_t MAX_CANDIDATES = 2000000;  // findings.py: MAX_CANDIDATES

// A value: chunk >= 0: input chunk `chunk` of the ranks of the set `mask`; UNINITIALIZED;
// MIXED: `mask` indexes the table of mixed values.
struct Value {
  int32_t chunk;
  int32_t mask;
};

struct MixedValue {
  std::vector<std::pair<int32_t, int32_t>> parts;  // (chunk, rank set), by chunk
  bool dup;
};

// `length` consecutive slots: slot j holds `v` with every input chunk index j higher.
struct Run {
  long long length;
  Value v;
};

// A list of runs, the first one kept inline: nearly every range a step accesses is one run.
class Runs {
 public:
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  const Run* begin() const { return n_ <= 1 ? &one_ : more_.data(); }
  const Run* end() const { return begin() + n_; }
  const Run& operator[](size_t k) const { return begin()[k]; }
  Run& back() { return n_ <= 1 ? one_ : more_.back(); }
  void clear() {
    n_ = 0;
    more_.clear();
  }
  void push_back(const Run& run) {
    if (n_ == 0) {
      one_ = run;
    } else {
      if (n_ == 1) more_.push_back(one_);
      more_.push_back(run);
    }
    ++n_;
  }

 private:
  Run one_{0, {0, 0}};
  std::vector<Run> more_;  // all of them, when there are two or more
  size_t n_ = 0;
};

// The multiset sum of values, and of runs of them.
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

  // `v` with every input chunk index n higher (the value n slots further along a run);
  // the sum commutes with it, so the sum of two runs is a run
  Value shift(Value v, long long n) {
    if (n == 0 || v.chunk == UNINITIALIZED) return v;
    if (v.chunk >= 0) return {int32_t(v.chunk + n), v.mask};
    std::vector<std::pair<int32_t, int32_t>> out = table_[v.mask].parts;
    for (auto& part : out) part.first = int32_t(part.first + n);
    return mixed(std::move(out), table_[v.mask].dup);
  }

  // does `v` continue a run of `length` slots of `first` (is it shift(first, length))?
  bool continues(Value first, long long length, Value v) const {
    if (first.chunk != v.chunk && (first.chunk < 0 || v.chunk < 0)) return false;
    if (v.chunk == UNINITIALIZED) return true;
    if (v.chunk >= 0) return v.chunk == first.chunk + length && v.mask == first.mask;
    const MixedValue &a = table_[first.mask], &b = table_[v.mask];
    if (a.dup != b.dup || a.parts.size() != b.parts.size()) return false;
    for (size_t k = 0; k < a.parts.size(); ++k)
      if (b.parts[k].first != a.parts[k].first + length || b.parts[k].second != a.parts[k].second) return false;
    return true;
  }

  // `runs` + (length, v), joined to the last run where it continues it
  void append(Runs& runs, long long length, Value v) const {
    if (length <= 0) return;
    if (!runs.empty() && continues(runs.back().v, runs.back().length, v))
      runs.back().length += length;
    else
      runs.push_back({length, v});
  }

  // slots skip .. skip+n-1 of `in`, appended to `out` (uninitialized past its end)
  void slice(const Runs& in, long long skip, long long n, Runs& out) {
    for (const Run& run : in) {
      if (n <= 0) break;
      if (skip >= run.length) {
        skip -= run.length;
        continue;
      }
      const long long take = std::min(run.length - skip, n);
      append(out, take, shift(run.v, skip));
      n -= take;
      skip = 0;
    }
    append(out, n, {UNINITIALIZED, 0});
  }

  // the slot-by-slot sum of two run lists over the same slots
  Runs add_runs(const Runs& a, const Runs& b) {
    Runs out;
    size_t i = 0, j = 0;
    long long ia = 0, jb = 0;  // slots of a[i], b[j] already summed
    while (i < a.size() && j < b.size()) {
      const long long n = std::min(a[i].length - ia, b[j].length - jb);
      append(out, n, add(shift(a[i].v, ia), shift(b[j].v, jb)));
      ia += n, jb += n;
      if (ia == a[i].length) ++i, ia = 0;
      if (jb == b[j].length) ++j, jb = 0;
    }
    return out;
  }

  // the (chunk, ranks) parts and repeated-contribution flag of a value
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

// the first uninitialized slot of `runs`, -1 if every slot holds data
long long first_uninitialized(const Runs& runs) {
  long long pos = 0;
  for (const Run& run : runs) {
    if (run.v.chunk == UNINITIALIZED) return pos;
    pos += run.length;
  }
  return -1;
}

struct Message {
  int gid, count;
  std::vector<Runs> values;  // per layout
};

struct Fifo {
  std::deque<Message> q;
  bool reader_waiting = false, writer_waiting = false;
};

// Slots that share their values, their last writer (gid, -1 for none) and the latest read
// of each thread block since that write, in the order the thread blocks first read, as a
// list in the layout's reader pool (-1: empty).
struct Segment {
  Runs runs;
  int32_t writer = -1;
  int32_t readers = -1;
};

struct Reader {
  int32_t tb, gid, next;
};

// One layout's memory and what the run found on it so far.
struct Memory {
  std::vector<long long> starts;  // segment k is slots starts[k] .. starts[k+1]-1
  std::vector<int32_t> segment_at;  // when not empty: per slot (and the end), the segment starting there
  std::vector<Segment> segments;
  std::vector<Reader> pool;  // the reader lists; entries of overwritten segments are reused
  int32_t free = -1;
  bool stopped = false;      // a step reached outside its buffer: the values are not followed past it
  std::vector<RaceCandidate> candidates;
  std::vector<std::array<long long, 3>> candidate_access;  // per candidate: slot, x writes, y writes
  std::unordered_set<unsigned long long> seen;             // (x, y, received) of the candidates
  LayoutFindings found;

  // the segments from a to b (both segment ends)
  std::pair<size_t, size_t> range(long long a, long long b) const {
    if (!segment_at.empty()) return {size_t(segment_at[a]), size_t(segment_at[b])};
    const size_t i = std::lower_bound(starts.begin(), starts.end(), a) - starts.begin();
    return {i, std::lower_bound(starts.begin() + i, starts.end(), b) - starts.begin()};
  }
};

// Where step gid of rank position pos reads its source (buffer code, offset) or accesses
// its destination in `lay`: the first slot, or -1 when the range is not inside the rank's
// buffer (or names none).
long long address(const Program& p, const Layout& lay, int pos, uint8_t buf, int off, int cnt) {
  if (buf > 2 || lay.bases[3 * pos + buf] < 0 || off < 0 || (long long)off + cnt > p.rank_sizes[3 * pos + buf])
    return -1;
  return lay.bases[3 * pos + buf] + off;
}

// `lay`'s memory at the start of a call: cut at both ends of every range a step accesses,
// of each rank's data and of each run of the postcondition; slot data + j of a rank's data
// holds input chunk j of that rank, every other slot nothing. Where the layout has few
// slots for its cuts (most steps move a chunk or a few), the cuts are sorted by marking
// slots and a slot's segment is looked up in a table (4 bytes a slot), else by sorting
// and binary search.
Memory initial_memory(const Program& p, const Layout& lay, MaskTable& masks) {
  Memory m;
  std::vector<long long>& at = m.starts;
  at.push_back(0);
  at.push_back(lay.total);
  for (size_t pos = 0; pos < p.rank_id.size(); ++pos) at.push_back(lay.data[pos]), at.push_back(lay.data_end[pos]);
  for (const auto& run : lay.expected) at.push_back(run[0]), at.push_back(run[0] + run[1]);
  for (int g = 0; g < p.num_tbs(); ++g) {
    const int pos = p.tb_rank_pos[g];
    for (int gid = p.tb_base[g]; gid < p.tb_base[g + 1]; ++gid) {
      const uint8_t f = p.flags[gid];
      const int cnt = p.count[gid];
      if (cnt < 1) continue;
      long long a = -1;
      if ((f & READS_SRC) && (a = address(p, lay, pos, p.src_buf[gid], p.src_off[gid], cnt)) >= 0)
        at.push_back(a), at.push_back(a + cnt);
      if ((f & (WRITES_DST | READS_DST)) && (a = address(p, lay, pos, p.dst_buf[gid], p.dst_off[gid], cnt)) >= 0)
        at.push_back(a), at.push_back(a + cnt);
    }
  }
  if (lay.total <= 4 * (long long)at.size() + (1 << 16)) {
    std::vector<char> cut(lay.total + 1, 0);
    for (long long a : at) cut[a] = 1;
    at.clear();
    m.segment_at.resize(lay.total + 1);
    for (long long a = 0; a <= lay.total; ++a) {
      if (cut[a]) at.push_back(a);
      m.segment_at[a] = int32_t(at.size() - 1);
    }
  } else {
    std::sort(at.begin(), at.end());
    at.erase(std::unique(at.begin(), at.end()), at.end());
  }
  m.segments.resize(at.size() - 1);
  for (size_t k = 0; k + 1 < at.size(); ++k) m.segments[k].runs.push_back({at[k + 1] - at[k], {UNINITIALIZED, 0}});
  for (size_t pos = 0; pos < p.rank_id.size(); ++pos) {
    const int data_ranks = masks.singleton(p.rank_id[pos]);
    const auto [i, j] = m.range(lay.data[pos], lay.data_end[pos]);
    for (size_t k = i; k < j; ++k) m.segments[k].runs.back().v = {int32_t(at[k] - lay.data[pos]), data_ranks};
  }
  return m;
}

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

  std::vector<Memory> mem;
  mem.reserve(nviews);
  for (int v = 0; v < nviews; ++v) mem.push_back(initial_memory(p, layouts[v], masks));

  int clock = -1;  // the clock of the step being run (LocalOrder::clock)
  auto other_tb = [&](int w, int g) { return w >= 0 && order.tb_of(w) != g; };  // an access by another thread block
  // step prev accessed slot a before step gid of thread block g does, one of them writing:
  // a candidate unless program order and dependencies order it
  auto conflict = [&](Memory& m, int prev, int gid, int g, long long a, bool prev_writes, bool writes,
                      bool received) {
    if (order.ordered(prev, gid, g, clock)) return;
    const unsigned long long key = (uint64_t(uint32_t(prev)) << 33) | (uint64_t(uint32_t(gid)) << 1) | received;
    if (m.candidates.size() < MAX_CANDIDATES && m.seen.insert(key).second) {
      m.candidates.push_back({prev, gid, received});
      m.candidate_access.push_back({a, prev_writes, writes});
    }
  };
  // step gid of thread block g reads segment k (the race rule)
  auto read_segment = [&](Memory& m, size_t k, int gid, int g) {
    if (!check_races) return;
    Segment& seg = m.segments[k];
    if (other_tb(seg.writer, g)) conflict(m, seg.writer, gid, g, m.starts[k], true, false, false);
    int32_t last = -1;
    for (int32_t r = seg.readers; r >= 0; r = m.pool[r].next) {
      if (m.pool[r].tb == g) {
        m.pool[r].gid = gid;
        return;
      }
      last = r;
    }
    int32_t r = m.free;
    if (r >= 0)
      m.free = m.pool[r].next;
    else
      r = (int32_t)m.pool.size(), m.pool.push_back({});
    m.pool[r] = Reader{g, gid, -1};
    if (last < 0)
      seg.readers = r;
    else
      m.pool[last].next = r;
  };
  // the values of slots a .. a+cnt-1, read by step gid of thread block g
  auto read = [&](Memory& m, long long a, int cnt, int gid, int g) {
    const auto [i, j] = m.range(a, a + cnt);
    Runs out;
    for (size_t k = i; k < j; ++k) {
      read_segment(m, k, gid, g);
      for (const Run& run : m.segments[k].runs) values.append(out, run.length, run.v);
    }
    return out;
  };
  // step gid of thread block g writes `runs` to slots a .. a+cnt-1; received: the data
  // comes from a receive
  auto write = [&](Memory& m, long long a, int cnt, const Runs& runs, int gid, int g, bool received) {
    const auto [i, j] = m.range(a, a + cnt);
    long long done = 0;
    for (size_t k = i; k < j; ++k) {
      Segment& seg = m.segments[k];
      if (check_races) {
        const long long at = m.starts[k];
        if (other_tb(seg.writer, g)) conflict(m, seg.writer, gid, g, at, true, true, received);
        if (seg.readers >= 0) {
          int32_t r = seg.readers;
          while (true) {
            const Reader e = m.pool[r];
            if (e.tb != g) conflict(m, e.gid, gid, g, at, false, true, received);
            if (e.next < 0) break;
            r = e.next;
          }
          m.pool[r].next = m.free;  // the list goes back to the pool
          m.free = seg.readers;
          seg.readers = -1;
        }
      }
      const long long length = m.starts[k + 1] - m.starts[k];
      seg.runs.clear();
      values.slice(runs, done, length, seg.runs);
      seg.writer = gid;
      done += length;
    }
  };

  std::vector<Fifo> fifos(p.conns.size());
  std::vector<int> pc(ntb, 0), signal(ntb, -1);
  std::vector<std::vector<std::pair<int, int>>> dep_waiters(ntb);
  std::deque<int> ready;
  for (int g = 0; g < ntb; ++g) ready.push_back(g);
  long long seq = 0;

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
        if (f & SENDS) outgoing.values.resize(nviews);
        for (int v = 0; v < nviews; ++v) {
          Memory& m = mem[v];
          if (m.stopped) continue;
          if (mismatch) m.found.events.push_back({MISMATCH, gid, in.gid});
          Runs src, val;
          if (f & READS_SRC) {
            const long long sa = address(p, layouts[v], pos, p.src_buf[gid], p.src_off[gid], cnt);
            if (sa < 0) {
              m.found.events.push_back({OUTSIDE_SOURCE, gid, 0});
              m.stopped = true;
              continue;
            }
            src = read(m, sa, cnt, gid, g);
            const long long j = first_uninitialized(src);
            if (j >= 0) m.found.events.push_back({UNINITIALIZED_SOURCE, gid, sa + j});
          }
          // the step's value: received (cut or padded to cnt slots), + src where it reads
          // its source, or dst + src; written where it writes, pushed where it sends
          if (f & RECEIVES) {
            values.slice(in.values[v], 0, cnt, val);
            if (f & READS_SRC) val = values.add_runs(src, val);
          } else {
            val = src;
          }
          if (f & WRITES_DST) {
            const long long da = address(p, layouts[v], pos, p.dst_buf[gid], p.dst_off[gid], cnt);
            if (da < 0) {
              m.found.events.push_back({OUTSIDE_DESTINATION, gid, 0});
              m.stopped = true;
              continue;
            }
            if (f & READS_DST) {  // reduce: dst := dst + src
              const Runs cur = read(m, da, cnt, gid, g);
              const long long j = first_uninitialized(cur);
              if (j >= 0) m.found.events.push_back({UNINITIALIZED_DESTINATION, gid, da + j});
              val = values.add_runs(cur, src);
            }
            write(m, da, cnt, val, gid, g, f & RECEIVES);
          }
          if (f & SENDS) outgoing.values[v] = std::move(val);
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
    if (!m.stopped) {
      // the candidates no path through other ranks orders, each pair once
      found.race_candidates = (long long)m.candidates.size();
      found.races_incomplete = m.candidates.size() >= MAX_CANDIDATES;
      const std::vector<bool> ordered = ordered_through_ranks(p, proof.order, proof.recv_src, m.candidates);
      std::unordered_set<unsigned long long> reported;
      for (size_t n = 0; n < m.candidates.size(); ++n) {
        const RaceCandidate& c = m.candidates[n];
        if (ordered[n] || !reported.insert((uint64_t(uint32_t(c.x)) << 32) | uint32_t(c.y)).second) continue;
        found.races.push_back(
            {c.y, c.x, m.candidate_access[n][0], m.candidate_access[n][2], m.candidate_access[n][1]});
      }
    }
    if (!m.stopped && proof.blocked.empty()) {  // the postcondition, where the run finished
      const int every = masks.everyone(num_ranks);
      for (size_t k = 0; k < layouts[v].expected.size(); ++k) {
        const auto& want_run = layouts[v].expected[k];
        const int want = want_run[3] < 0 ? every : masks.singleton((int)want_run[3]);
        const auto [i, j] = m.range(want_run[0], want_run[0] + want_run[1]);
        long long index = 0;  // of the slot a run starts at, in the expected run
        for (size_t s = i; s < j; ++s) {
          for (const Run& run : m.segments[s].runs) {
            // a run holds what is wanted in every slot or in none: both go one chunk up per slot
            if (run.v.chunk != want_run[2] + index || run.v.mask != want) {
              WrongValue w = values.describe(run.v);
              w.run = (int)k;
              w.index = index;
              w.length = run.length;
              w.writer = m.segments[s].writer;
              found.wrong.push_back(std::move(w));
            }
            index += run.length;
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
