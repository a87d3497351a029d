// ordered_through_ranks (races.hpp): the happens-before of the race rule (docs/ir.md
// section 5, races) across ranks. X happens before Y when there is a path X -> ... -> Y whose last edge is program
// order or a dependency; a send S -> the receive R that pops its data is a weak edge (it
// orders what comes after R, not R itself), and a write of received data by Y is also
// ordered after a path ending strongly at the send that produced the data.
//
// All candidates are answered in one pass: the run's steps are replayed in completion
// order (a path X -> Y implies X finished first in every execution, in particular in
// the symbolic run, so completion order is a topological order of the edges) while
// vector clocks, restricted to the thread blocks that are the earlier side of some
// candidate, are propagated along every edge. A step's clock at its start ("strong":
// what program order and dependencies bring) answers the candidates whose later step
// it is, or whose later step received its data.

#include "races.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <unordered_map>

namespace verify {

namespace {

using Clock = std::shared_ptr<const std::vector<long long>>;  // per source thread block: highest step known

Clock maximum(const Clock& a, const Clock& b) {
  if (!a) return b;
  if (!b) return a;
  auto out = std::make_shared<std::vector<long long>>(*a);
  for (size_t j = 0; j < out->size(); ++j) (*out)[j] = std::max((*out)[j], (*b)[j]);
  return out;
}

}  // namespace

std::vector<bool> ordered_through_ranks(const Program& p, const std::vector<int>& order,
                                        const std::vector<int>& recv_src,
                                        const std::vector<RaceCandidate>& candidates) {
  std::vector<bool> answers(candidates.size(), false);
  if (candidates.empty()) return answers;
  const int total = p.num_steps(), ntb = p.num_tbs();
  std::vector<int> gid_tb(total), done_seq(total, 0);  // completion rank in the run, from 1 (0: not run)
  for (int g = 0; g < ntb; ++g)
    for (int gid = p.tb_base[g]; gid < p.tb_base[g + 1]; ++gid) gid_tb[gid] = g;
  for (size_t k = 0; k < order.size(); ++k) done_seq[order[k]] = (int)k + 1;

  std::vector<int> col(ntb, -1);  // source thread block -> its column in the clocks
  for (const RaceCandidate& c : candidates) col[gid_tb[c.x]] = 0;
  int m = 0;
  for (int g = 0; g < ntb; ++g)
    if (col[g] >= 0) col[g] = m++;
  struct Query {
    int column;
    long long step;
    size_t n;
  };
  std::unordered_map<int, std::vector<Query>> at_step;
  int lo = total + 1, hi = 0;
  for (size_t n = 0; n < candidates.size(); ++n) {
    const RaceCandidate& c = candidates[n];
    const int a = gid_tb[c.x];
    const Query q{col[a], c.x - p.tb_base[a], n};
    at_step[c.y].push_back(q);
    if (c.y_received && recv_src[c.y] >= 0) at_step[recv_src[c.y]].push_back(q);
    lo = std::min(lo, done_seq[c.x]);
    hi = std::max(hi, done_seq[c.y]);
  }
  auto dep_target = [&](int z) {  // the gid step z waited for, -1 for none
    const int tg = p.dep_tb[z];
    if (tg < 0) return -1;
    const long long d = (long long)p.tb_base[tg] + p.dep_step[z];
    return d >= p.tb_base[tg] && d < p.tb_base[tg + 1] ? (int)d : -1;
  };
  // dependency targets whose end clock must be kept until their dependents in the window ran
  std::unordered_map<int, int> waits;
  for (int k = std::max(lo, 1); k <= hi; ++k) {
    const int z = order[k - 1], d = dep_target(z);
    if (d >= 0 && lo <= done_seq[d]) ++waits[d];
  }
  std::vector<Clock> cur(ntb);           // per thread block: the clock at the end of its last step
  std::unordered_map<int, Clock> kept;   // dependency target gid -> its end clock
  std::unordered_map<int, Clock> msgs;   // send gid -> its end clock, until received
  for (int k = std::max(lo, 1); k <= hi; ++k) {
    const int z = order[k - 1], g = gid_tb[z];
    Clock strong = cur[g];
    const int d = dep_target(z);
    if (d >= 0) {
      auto it = kept.find(d);
      if (it != kept.end()) {
        strong = maximum(strong, it->second);
        if (--waits[d] == 0) kept.erase(it);
      }
    }
    auto qs = at_step.find(z);
    if (qs != at_step.end() && strong)
      for (const Query& q : qs->second)
        if ((*strong)[q.column] >= q.step) answers[q.n] = true;
    Clock end = strong;
    if (recv_src[z] >= 0) {
      auto it = msgs.find(recv_src[z]);
      if (it != msgs.end()) {
        end = maximum(end, it->second);
        msgs.erase(it);
      }
    }
    if (col[g] >= 0) {
      auto mine = end ? std::make_shared<std::vector<long long>>(*end)
                      : std::make_shared<std::vector<long long>>(m, -1);
      (*mine)[col[g]] = z - p.tb_base[g];
      end = mine;
    }
    if (end) {
      cur[g] = end;
      if (p.flags[z] & SENDS) msgs[z] = end;
      auto w = waits.find(z);
      if (w != waits.end() && w->second > 0) kept[z] = end;
    }
  }
  return answers;
}

}  // namespace verify
