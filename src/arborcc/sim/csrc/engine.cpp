// The event-driven run (engine.hpp; the model is docs/simulator.md's, the rules are
// arborcc.sim.engine's module doc). A thread block works through its steps until it must
// wait - for the step it depends on, for data, for a free FIFO slot, for its compute or
// its transfer to end - and is woken by the event that ends the wait. Events of one time
// run in the order they were queued.

#include "engine.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <queue>
#include <unordered_map>
#include <utility>

#include "fairshare.hpp"

namespace sim {

namespace {

// A shared flow: the transfer of one thread block (its key) over links that may be
// oversubscribed, its rate set by max-min fair sharing.
struct Flow {
  bool active = false;
  double remaining = 0, rate = 0, since = 0, cap = 0;
  bool has_due = false;
  double due = 0;  // the time of the finish event queued for it
  uint64_t serial = 0;  // which transfer of the thread block (a stale event names an older one)
  int32_t conn = -1;
  double finish() const { return rate > 0 ? since + remaining / rate : INFINITY; }
};

// The flows under way on the links whose sharing can bind, their rates recomputed for the
// components touched since the last settle (arborcc.sim.fairshare's model).
class FairShare {
 public:
  FairShare(const EngineSetup& setup, size_t num_tbs, std::vector<RatePeriod>* log)
      : flows(num_tbs), setup_(setup), on_link_(setup.link_rate.size()), wide_(setup.link_rate.size(), 0),
        is_dirty_(setup.link_rate.size(), 0), seen_(setup.link_rate.size(), 0),
        local_(setup.link_rate.size(), -1), met_(num_tbs, 0), log_(log) {}

  bool dirty() const { return !dirty_.empty(); }

  void start(double now, int32_t key, double nbytes, int32_t conn, double cap) {
    Flow& f = flows[(size_t)key];
    f.active = true;
    f.remaining = nbytes;
    f.rate = 0.0;
    f.since = now;
    f.cap = cap;
    f.has_due = false;
    f.conn = conn;
    ++f.serial;
    if (!any_cap_) {
      any_cap_ = true;
      first_cap_ = cap;
    } else if (cap != first_cap_) {
      mixed_caps_ = true;
    }
    const int32_t a = setup_.shared_start[(size_t)conn], b = setup_.shared_start[(size_t)conn + 1];
    for (int32_t k = a; k < b; ++k) {
      const int32_t l = setup_.shared_link[(size_t)k];
      on_link_[(size_t)l].push_back(key);
      if (b - a > 1) ++wide_[(size_t)l];
      mark(l);
    }
  }

  void end(double now, int32_t key) {
    Flow& f = flows[(size_t)key];
    f.active = false;
    close(key, f, now);
    const int32_t a = setup_.shared_start[(size_t)f.conn], b = setup_.shared_start[(size_t)f.conn + 1];
    for (int32_t k = a; k < b; ++k) {
      const int32_t l = setup_.shared_link[(size_t)k];
      std::vector<int32_t>& on = on_link_[(size_t)l];
      on.erase(std::find(on.begin(), on.end(), key));
      if (b - a > 1) --wide_[(size_t)l];
      mark(l);
    }
  }

  // The rates of every component touched since the last call; the flows whose rate
  // changed (new ones included) go to `changed`, in order.
  void settle(double now, std::vector<int32_t>& changed) {
    changed.clear();
    if (dirty_.empty()) return;
    std::sort(dirty_.begin(), dirty_.end());
    walked_.clear();
    const bool common = any_cap_ && !mixed_caps_;
    for (int32_t l : dirty_) {
      if (seen_[(size_t)l]) continue;
      const std::vector<int32_t>& on = on_link_[(size_t)l];
      if (on.empty()) continue;
      if (wide_[(size_t)l] == 0) {  // every flow here crosses this link only
        const double share = setup_.link_rate[(size_t)l] / (double)on.size();
        bool even = true;
        double rate;
        if (common) {
          rate = first_cap_ >= share ? share : first_cap_;
        } else {
          double low = INFINITY;
          for (int32_t k : on) low = std::min(low, flows[(size_t)k].cap);
          if (low >= share) {
            rate = share;
          } else {
            rate = low;
            for (int32_t k : on) even = even && flows[(size_t)k].cap == low;
          }
        }
        if (even) {
          for (int32_t k : on) {
            Flow& f = flows[(size_t)k];
            if (f.rate != rate) {
              set(k, f, rate, now);
              changed.push_back(k);
            }
          }
          continue;
        }
      }
      component(l, now, changed);
    }
    for (int32_t l : dirty_) is_dirty_[(size_t)l] = 0;
    for (int32_t l : walked_) seen_[(size_t)l] = 0;
    dirty_.clear();
  }

  std::vector<Flow> flows;  // by key (thread block)

 private:
  void mark(int32_t l) {
    if (!is_dirty_[(size_t)l]) {
      is_dirty_[(size_t)l] = 1;
      dirty_.push_back(l);
    }
  }

  void close(int32_t key, const Flow& f, double now) {
    if (log_ != nullptr && f.rate > 0 && now > f.since) log_->push_back({key, f.since, now, f.rate});
  }

  void set(int32_t key, Flow& f, double rate, double now) {
    close(key, f, now);
    const double left = f.remaining - f.rate * (now - f.since);
    f.remaining = left > 0.0 ? left : 0.0;
    f.since = now;
    f.rate = rate;
  }

  // the component of flows link `start` reaches through shared links: walked from a stack
  // of links, each link's flows in order, a flow's links in order; its links marked seen;
  // its max-min fair rates set
  void component(int32_t start, double now, std::vector<int32_t>& changed) {
    LinkFlows& lf = lf_;  // the buffers of the last walk, emptied (their memory kept)
    lf.offset.assign(1, 0);
    lf.link.clear();
    lf.cap.clear();
    lf.capacity.clear();
    std::vector<int32_t>& members = members_;
    std::vector<int32_t>& global = global_;
    std::vector<int32_t>& todo = todo_;
    members.clear();
    global.clear();
    todo.assign(1, start);
    while (!todo.empty()) {
      const int32_t l = todo.back();
      todo.pop_back();
      for (int32_t key : on_link_[(size_t)l]) {
        if (met_[(size_t)key]) continue;
        met_[(size_t)key] = 1;
        members.push_back(key);
        const Flow& f = flows[(size_t)key];
        const int32_t a = setup_.shared_start[(size_t)f.conn], b = setup_.shared_start[(size_t)f.conn + 1];
        for (int32_t k = a; k < b; ++k) {
          const int32_t lk = setup_.shared_link[(size_t)k];
          if (local_[(size_t)lk] < 0) {
            local_[(size_t)lk] = (int32_t)global.size();
            global.push_back(lk);
            lf.capacity.push_back(setup_.link_rate[(size_t)lk]);
            if (lk != start) todo.push_back(lk);
          }
          lf.link.push_back(local_[(size_t)lk]);
        }
        lf.offset.push_back((int32_t)lf.link.size());
        lf.cap.push_back(f.cap);
      }
    }
    for (int32_t key : members) met_[(size_t)key] = 0;
    for (int32_t l : global) {
      local_[(size_t)l] = -1;
      if (!seen_[(size_t)l]) {
        seen_[(size_t)l] = 1;
        walked_.push_back(l);
      }
    }
    if (members.empty()) return;
    std::vector<double>& rate = rate_;
    if (global.size() == 1 && lf.link.size() == lf.cap.size())
      one_link_rates(lf.cap, lf.capacity[0], rate);
    else
      max_min_rates(lf, rate);
    for (size_t i = 0; i < members.size(); ++i) {
      Flow& f = flows[(size_t)members[i]];
      if (rate[i] != f.rate) {
        set(members[i], f, rate[i], now);
        changed.push_back(members[i]);
      }
    }
  }

  const EngineSetup& setup_;
  std::vector<std::vector<int32_t>> on_link_;  // per link its flows, in the order they started
  std::vector<int32_t> wide_;  // per link, its flows that cross other links too
  std::vector<int32_t> dirty_;  // links whose flows changed since the last settle
  std::vector<char> is_dirty_, seen_;
  std::vector<int32_t> walked_;  // links seen in this settle
  std::vector<int32_t> local_;  // per link its index in the component being walked, else -1
  std::vector<char> met_;  // per flow key: met in the component being walked
  // the component walk's buffers, kept from one walk to the next (a run walks millions)
  LinkFlows lf_;
  std::vector<int32_t> members_, global_, todo_;
  std::vector<double> rate_;
  bool any_cap_ = false, mixed_caps_ = false;
  double first_cap_ = 0.0;  // the one cap of every flow so far, while mixed_caps_ is false
  std::vector<RatePeriod>* log_;
};

// An event: thread block t ready again (kind READY), its fixed-rate transfer drained
// (DRAINED), or its shared flow's expected finish (FINISH, of transfer `serial`)
enum Kind : int32_t { READY = 0, DRAINED = 1, FINISH = 2 };
struct Event {
  int32_t t;
  int32_t kind;
  uint64_t serial;
};

// the queue: distinct times in a heap, the events of each time in the order queued
class Events {
 public:
  void schedule(double at, Event e) {
    auto it = bucket_.find(at);
    if (it == bucket_.end()) {
      bucket_.emplace(at, std::vector<Event>{e});
      times_.push(at);
    } else {
      it->second.push_back(e);
    }
  }
  bool empty() const { return times_.empty(); }
  // the earliest time and its events, taken out of the queue
  double pop(std::vector<Event>& out) {
    const double now = times_.top();
    times_.pop();
    auto it = bucket_.find(now);
    out.swap(it->second);
    bucket_.erase(it);
    return now;
  }

 private:
  std::priority_queue<double, std::vector<double>, std::greater<double>> times_;
  std::unordered_map<double, std::vector<Event>> bucket_;
};

}  // namespace

void run_events(const EngineProgram& prog, const EngineSetup& setup, EngineOutcome& out) {
  const int32_t n = prog.num_tbs();
  const int64_t iters = setup.iterations, m = setup.most_chunks, depth = setup.fifo_depth;
  const double tile = setup.tile;
  const bool record = setup.record;
  const size_t nconn = (size_t)prog.num_conns;
  std::vector<int64_t> len(n);
  for (int32_t t = 0; t < n; ++t) len[t] = prog.step_start[t + 1] - prog.step_start[t];
  auto shared = [&](int32_t c) { return setup.shared_start[(size_t)c + 1] > setup.shared_start[(size_t)c]; };

  FairShare fair(setup, (size_t)n, record ? &out.rate_log : nullptr);
  std::vector<int64_t> pos(n, 0), it(n, 0), piece(n, 0);
  std::vector<int32_t> phase(n, 0);
  std::vector<std::vector<std::pair<int64_t, int32_t>>> dep_waiters(n);
  std::vector<int32_t> recv_wait(nconn, -1), fifo_wait(nconn, -1);
  std::vector<std::deque<double>> arrivals(nconn);
  std::vector<int64_t> posted(nconn, 0), consumed(nconn, 0);
  out.tb_finish.assign(n, 0.0);
  Events events;
  double now = 0.0;
  std::deque<int32_t> ready;
  for (int32_t t = 0; t < n; ++t) {
    if (len[t])
      ready.push_back(t);
    else
      it[t] = iters;
  }
  // recording (critical path): the piece each thread block is on, what woke it
  std::vector<PieceRecord>& pieces = out.pieces;
  std::vector<int64_t> current(record ? n : 0, -1), last_done(record ? n : 0, -1);
  std::vector<std::pair<int32_t, int64_t>> woke(record ? n : 0, {-1, 0});  // cause -1: none
  std::vector<std::deque<int64_t>> sent_by(record ? nconn : 0);
  std::vector<int32_t> changed;
  std::vector<Event> due_now;

  while (true) {
    while (!ready.empty()) {
      const int32_t t = ready.front();
      ready.pop_front();
      const int64_t L = len[t], base = prog.step_start[t];
      while (true) {
        int64_t p = pos[t];
        if (p == L) {
          ++it[t];
          pos[t] = p = 0;
          if (it[t] == iters) {
            out.tb_finish[t] = now;
            break;
          }
        }
        const int32_t f = prog.flags[(size_t)(base + p)];
        int32_t ph = phase[t];
        if (record && current[t] < 0) {
          current[t] = (int64_t)pieces.size();
          const int64_t ref = last_done[t];
          PieceRecord r{t, (int32_t)p, it[t], ref >= 0 ? CAUSE_PREV : CAUSE_START, ref, now};
          r.end = now;
          pieces.push_back(r);
        }
        if (ph == 0) {
          const int32_t dt = prog.dep_tb[(size_t)(base + p)];
          if (dt >= 0 && piece[t] == 0) {
            const int64_t need = it[t] * len[dt] + prog.dep_step[(size_t)(base + p)] + 1;
            if (it[dt] * len[dt] + pos[dt] < need) {
              dep_waiters[dt].emplace_back(need, t);
              break;
            }
          }
          if (f & RECEIVES) {
            const int32_t c = prog.recv_conn[t];
            std::deque<double>& q = arrivals[(size_t)c];
            if (q.empty()) {
              recv_wait[(size_t)c] = t;
              break;
            }
            if (q.front() > now) {
              events.schedule(q.front(), {t, READY, 0});
              if (record) woke[t] = {CAUSE_DATA, sent_by[(size_t)c].front()};
              break;
            }
            q.pop_front();
            ++consumed[(size_t)c];
            if (record) sent_by[(size_t)c].pop_front();
            const int32_t w = fifo_wait[(size_t)c];
            if (w >= 0) {
              fifo_wait[(size_t)c] = -1;
              ready.push_back(w);
              if (record) woke[w] = {CAUSE_FIFO, current[t]};
            }
          }
          if (record && woke[t].first >= 0) {
            PieceRecord& rec = pieces[(size_t)current[t]];
            rec.cause = woke[t].first;
            rec.ref = woke[t].second;
            rec.ready = now;
            woke[t].first = -1;
          }
          if (f & (REDUCES | COPIES)) {
            const double nbytes = (double)std::min(m, prog.counts[(size_t)(base + p)] - piece[t] * m) * tile;
            const double dur = nbytes * ((f & REDUCES) ? setup.inv_reduce : setup.inv_copy);
            if (dur > 0) {
              const int32_t c = (f & SENDS) ? prog.send_conn[t] : -1;
              if (c >= 0 && !record && !shared(c) && posted[(size_t)c] - consumed[(size_t)c] < depth) {
                // compute, then a transfer at a fixed rate: nothing can change in between
                ++posted[(size_t)c];
                phase[t] = 2;
                events.schedule(now + dur + nbytes / setup.free_rate[(size_t)c], {t, DRAINED, 0});
                break;
              }
              phase[t] = 1;
              events.schedule(now + dur, {t, READY, 0});
              if (record) {
                PieceRecord& rec = pieces[(size_t)current[t]];
                rec.has_compute = true;
                rec.compute0 = now;
                rec.compute1 = now + dur;
              }
              break;
            }
          }
          ph = 1;
        }
        if (ph == 1 && (f & SENDS)) {
          const int32_t c = prog.send_conn[t];
          if (posted[(size_t)c] - consumed[(size_t)c] >= depth) {
            phase[t] = 1;
            fifo_wait[(size_t)c] = t;
            break;
          }
          ++posted[(size_t)c];
          const double nbytes = (double)std::min(m, prog.counts[(size_t)(base + p)] - piece[t] * m) * tile;
          phase[t] = 2;
          if (record) {
            PieceRecord& rec = pieces[(size_t)current[t]];
            if (woke[t].first >= 0) {  // a FIFO slot was what it waited for last
              rec.cause = woke[t].first;
              rec.ref = woke[t].second;
              woke[t].first = -1;
            }
            rec.has_send = true;
            rec.send0 = rec.send1 = now;
          }
          if (!shared(c)) {
            const double end = now + nbytes / setup.free_rate[(size_t)c];
            events.schedule(end, {t, DRAINED, 0});
            if (record) out.rate_log.push_back({t, now, end, setup.free_rate[(size_t)c]});
          } else {
            fair.start(now, t, nbytes, c, setup.free_rate[(size_t)c]);  // its slowest link bounds it too
          }
          break;
        }
        // the piece is done
        if (record) {
          pieces[(size_t)current[t]].end = now;
          last_done[t] = current[t];
          current[t] = -1;
        }
        phase[t] = 0;
        const int64_t k = piece[t] + 1;
        if (k < (prog.counts[(size_t)(base + p)] + m - 1) / m) {
          piece[t] = k;
          continue;
        }
        piece[t] = 0;
        pos[t] = p + 1;
        std::vector<std::pair<int64_t, int32_t>>& waiters = dep_waiters[t];
        if (!waiters.empty()) {
          const int64_t done = it[t] * L + p + 1;
          size_t kept = 0;
          for (const auto& [need, w] : waiters) {
            if (need <= done) {
              ready.push_back(w);
              if (record) woke[w] = {CAUSE_DEP, last_done[t]};
            } else {
              waiters[kept++] = {need, w};
            }
          }
          waiters.resize(kept);
        }
      }
    }
    if (fair.dirty()) {
      fair.settle(now, changed);
      for (int32_t key : changed) {
        // its finish event: only when it comes earlier than the one queued (a later
        // finish is queued when the earlier event comes, below)
        Flow& fl = fair.flows[(size_t)key];
        const double at = fl.finish();
        if (!fl.has_due || at < fl.due) {
          fl.has_due = true;
          fl.due = at;
          events.schedule(at, {key, FINISH, fl.serial});
        }
      }
    }
    if (events.empty()) break;
    now = events.pop(due_now);
    for (const Event& e : due_now) {
      const int32_t t = e.t;
      if (e.kind == READY) {
        ready.push_back(t);
        continue;
      }
      if (e.kind == FINISH) {  // stale unless the flow still expects it now
        Flow& fl = fair.flows[(size_t)t];
        if (!fl.active || fl.serial != e.serial || fl.due != now) continue;
        const double at = fl.finish();
        if (at > now) {  // its rate fell since the event was queued: the finish comes later
          fl.due = at;
          events.schedule(at, {t, FINISH, fl.serial});
          continue;
        }
        fair.end(now, t);
      }
      // the transfer of thread block t has drained: its data arrives after the latency
      const int32_t c = prog.send_conn[t];
      const double arrive = now + setup.latency[(size_t)c];
      arrivals[(size_t)c].push_back(arrive);
      if (record) {
        pieces[(size_t)current[t]].send1 = now;
        sent_by[(size_t)c].push_back(current[t]);
      }
      const int32_t w = recv_wait[(size_t)c];
      if (w >= 0) {
        recv_wait[(size_t)c] = -1;
        events.schedule(arrive, {w, READY, 0});
        if (record) woke[w] = {CAUSE_DATA, current[t]};
      }
      ready.push_back(t);
    }
  }
  for (int32_t t = 0; t < n; ++t) {
    if (it[t] < iters) {
      out.stuck_tb = t;
      out.stuck_step = pos[t];
      out.stuck_iteration = it[t];
      break;
    }
  }
}

}  // namespace sim
