// Synchronization insertion (arborcc.compiler.sync.emit_steps).

#include "sync.hpp"

#include <algorithm>
#include <unordered_map>

namespace compiler {

Schedule emit_steps(const Table& t, const Ints& order, const Rows& preds, const ThreadBlocks& a) {
  const Ints& rep = t.rep;
  Schedule out;
  out.of_tb.resize(a.size());
  Ints step_of(t.kind.size(), 0);
  // per thread block: id of a thread block of its rank -> last of its steps already waited for
  std::vector<std::unordered_map<int64_t, int64_t>> known(a.size());
  std::unordered_map<int64_t, int64_t> latest;  // per other thread block: its latest step among the preds
  std::vector<std::pair<int64_t, int64_t>> wait;
  for (int64_t i : order) {
    const size_t ii = (size_t)i;
    const int64_t tb = a.tb_of[ii];
    std::vector<StepRow>& steps = out.of_tb[(size_t)tb];
    int64_t dep_tb = -1, dep_step = -1;
    if (a.of_rank[(size_t)a.rank[(size_t)tb]].size() > 1) {  // ranks with one thread block wait for nothing
      const int64_t* pb = preds.begin(ii);
      const int64_t* pe = preds.end(ii);
      latest.clear();
      for (const int64_t* p = pb; p != pe; ++p) {
        const size_t x = (size_t)rep[(size_t)*p];
        const int64_t u = a.tb_of[x];
        if (u == tb) continue;
        auto it = latest.find(u);
        if (it == latest.end()) {
          latest.emplace(u, step_of[x]);
        } else if (it->second < step_of[x]) {
          it->second = step_of[x];
        }
      }
      wait.clear();
      auto& mine = known[(size_t)tb];
      for (const auto& us : latest) {
        const int64_t uid = a.id[(size_t)us.first];
        auto k = mine.find(uid);
        if (k == mine.end() || k->second < us.second) wait.emplace_back(us.first, us.second);
      }
      std::sort(wait.begin(), wait.end(), [&](const auto& x, const auto& y) { return a.id[(size_t)x.first] < a.id[(size_t)y.first]; });
      for (size_t k = 0; k < wait.size(); ++k) {
        const int64_t u = wait[k].first, s = wait[k].second, uid = a.id[(size_t)u];
        mine[uid] = s;
        out.of_tb[(size_t)u][(size_t)s].has_dep = true;
        if (k + 1 < wait.size()) {
          steps.push_back(StepRow{step::NOP, -1, -1, -1, -1, 0, uid, s, false});
          ++out.nops;
        } else {
          dep_tb = uid;
          dep_step = s;
        }
      }
      step_of[ii] = (int64_t)steps.size();
    }
    ++out.kinds[(size_t)t.kind[ii]];
    steps.push_back(StepRow{t.kind[ii], t.sbuf[ii], t.soff[ii], t.dbuf[ii], t.doff[ii], t.cnt[ii], dep_tb, dep_step, false});
  }
  return out;
}

}  // namespace compiler
