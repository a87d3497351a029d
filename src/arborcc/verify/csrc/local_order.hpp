// Rank-local happens-before for the symbolic run (symbolic.cpp): the part of the race
// rule (docs/ir.md section 5, races) that program order and dependencies decide. What
// they order before a step is always a union of thread block prefixes of its rank,
// written as a vector clock - per thread block of the rank, its highest step so ordered
// (-1: none) - kept per thread block as change points (it changes only at steps with a
// dependency).

#pragma once

#include <algorithm>
#include <vector>

#include "program.hpp"

namespace verify {

class LocalOrder {
 public:
  explicit LocalOrder(const Program& p) : p_(p), cp_step_(p.num_tbs()), cp_at_(p.num_tbs()) {
    gid_tb_.resize(p.num_steps());
    for (int g = 0; g < p.num_tbs(); ++g)
      for (int gid = p.tb_base[g]; gid < p.tb_base[g + 1]; ++gid) gid_tb_[gid] = g;
  }

  int tb_of(int gid) const { return gid_tb_[gid]; }

  // Step i of thread block g waits for step k of thread block tg: it knows what that
  // step knows, and that step and the ones before it.
  void on_dependency(int g, int i, int tg, int k) {
    const int pos = p_.tb_rank_pos[g];
    const int first = p_.rank_first_tb[pos], width = p_.rank_first_tb[pos + 1] - first;
    if (cp_at_[g].empty())
      now_.assign(width, -1);
    else
      now_.assign(pool_.begin() + cp_at_[g].back(), pool_.begin() + cp_at_[g].back() + width);
    bool changed = false;
    const int theirs = known(tg, k);
    if (theirs >= 0)
      for (int h = 0; h < width; ++h)
        if (pool_[theirs + h] > now_[h]) now_[h] = pool_[theirs + h], changed = true;
    if (k > now_[tg - first]) now_[tg - first] = k, changed = true;
    if (changed) {
      cp_step_[g].push_back(i);
      cp_at_[g].push_back((int)pool_.size());
      pool_.insert(pool_.end(), now_.begin(), now_.end());
    }
  }

  // The clock of step i of thread block g: what ordered() needs of the later step.
  int clock(int g, int i) const { return known(g, i); }

  // Is step x before step y (of thread block b, the same rank, whose clock(b, y - its
  // first gid) is `clock`) by program order and dependencies alone?
  bool ordered(int x, int y, int b, int clock) const {
    const int a = gid_tb_[x];
    if (a == b) return x < y;
    return clock >= 0 && pool_[clock + a - p_.rank_first_tb[p_.tb_rank_pos[a]]] >= x - p_.tb_base[a];
  }

 private:
  // where in the pool the clock of step `step` of thread block g starts, -1 for none
  int known(int g, int step) const {
    const std::vector<int>& idx = cp_step_[g];
    auto it = std::upper_bound(idx.begin(), idx.end(), step);
    return it == idx.begin() ? -1 : cp_at_[g][it - idx.begin() - 1];
  }

  const Program& p_;
  std::vector<int> gid_tb_;
  std::vector<std::vector<int>> cp_step_, cp_at_;
  std::vector<int> pool_, now_;
};

}  // namespace verify
