// Max-min fair rates (fairshare.hpp). Every value is made by the floating-point
// operations of the Python code this replaced, in its order, and compared as it compared
// them: a tie between links goes to the link seen first, frozen flows are taken in the
// flows' order, and a link's capacity left never drops below 0. Only the work is less: a
// link's even split is divided out when its capacity left or its count changes, not in
// every round, and links without open flows are no longer scanned.

#include "fairshare.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sim {

namespace {

// the flows' indices ordered by cap, equal caps in the flows' order
std::vector<int32_t> by_cap(const std::vector<double>& cap) {
  std::vector<int32_t> order(cap.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return cap[a] < cap[b]; });
  return order;
}

// Python's max(0.0, x): x only when greater than 0.0 (so -0.0 and NaN give 0.0)
inline double at_least_zero(double x) { return x > 0.0 ? x : 0.0; }

}  // namespace

void max_min_rates(const LinkFlows& flows, std::vector<double>& rate) {
  const size_t n = flows.cap.size(), links = flows.capacity.size();
  // per link its flows, in the flows' order (compressed rows)
  std::vector<int32_t> user_start(links + 1, 0), users(flows.link.size());
  for (int32_t l : flows.link) ++user_start[(size_t)l + 1];
  for (size_t l = 0; l < links; ++l) user_start[l + 1] += user_start[l];
  std::vector<int64_t> count(links);
  for (size_t l = 0; l < links; ++l) count[l] = user_start[l + 1] - user_start[l];
  {
    std::vector<int32_t> fill(user_start.begin(), user_start.end() - 1);
    for (size_t i = 0; i < n; ++i)
      for (int32_t k = flows.offset[i]; k < flows.offset[i + 1]; ++k) users[(size_t)fill[(size_t)flows.link[(size_t)k]]++] = (int32_t)i;
  }
  std::vector<double> left(flows.capacity);
  const std::vector<int32_t> order = by_cap(flows.cap);
  std::vector<char> frozen_yet(n, 0);
  rate.assign(n, 0.0);
  std::vector<int32_t> frozen;
  std::vector<int32_t> active;  // the links with open flows, in order (the others never bind again)
  std::vector<double> even(links);  // per active link left / count, redone whenever either changes
  for (size_t l = 0; l < links; ++l) {
    if (count[l] != 0) {
      active.push_back((int32_t)l);
      even[l] = left[l] / (double)count[l];
    }
  }
  size_t head = 0, open = n;  // order[head] is the first unfrozen flow by cap
  while (open > 0) {
    while (frozen_yet[(size_t)order[head]]) ++head;
    double share = INFINITY;
    int64_t tight = -1;
    for (int32_t l : active) {
      if (even[(size_t)l] < share) share = even[(size_t)l], tight = l;
    }
    const double capped = flows.cap[(size_t)order[head]];
    double level;
    frozen.clear();
    if (capped <= share) {  // the least cap binds: every open flow with that cap
      level = capped;
      for (size_t p = head; p < n; ++p) {
        const int32_t i = order[p];
        if (frozen_yet[(size_t)i]) continue;
        if (!(flows.cap[(size_t)i] <= capped)) break;  // sorted: no later flow has a cap this low
        frozen.push_back(i);
      }
    } else {  // a link binds: its open flows (tight exists: share is finite, below a cap)
      level = share;
      for (int32_t u = user_start[(size_t)tight]; u < user_start[(size_t)tight + 1]; ++u)
        if (!frozen_yet[(size_t)users[(size_t)u]]) frozen.push_back(users[(size_t)u]);
    }
    for (int32_t i : frozen) {
      frozen_yet[(size_t)i] = 1;
      rate[(size_t)i] = level;
      for (int32_t k = flows.offset[(size_t)i]; k < flows.offset[(size_t)i + 1]; ++k) {
        const size_t l = (size_t)flows.link[(size_t)k];
        left[l] = at_least_zero(left[l] - level);
        if (--count[l] != 0) even[l] = left[l] / (double)count[l];
      }
    }
    open -= frozen.size();
    active.erase(std::remove_if(active.begin(), active.end(), [&](int32_t l) { return count[(size_t)l] == 0; }),
                 active.end());
  }
}

void one_link_rates(const std::vector<double>& cap, double capacity, std::vector<double>& rate) {
  const size_t n = cap.size();
  rate.assign(n, 0.0);
  if (std::all_of(cap.begin(), cap.end(), [](double c) { return c == INFINITY; })) {
    const double share = capacity / (double)n;
    std::fill(rate.begin(), rate.end(), share);
    return;
  }
  const std::vector<int32_t> order = by_cap(cap);
  double left = capacity;
  for (size_t p = 0; p < n; ++p) {
    const size_t i = (size_t)order[p];
    const double share = left / (double)(n - p);
    const double r = share < cap[i] ? share : cap[i];  // Python's min(cap, share)
    rate[i] = r;
    left -= r;
  }
}

}  // namespace sim
