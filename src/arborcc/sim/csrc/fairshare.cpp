// Max-min fair rates (fairshare.hpp). Every value is made by the floating-point
// operations of the Python code this replaced, in its order, and compared as it compared
// them: a tie between links goes to the link seen first, frozen flows are taken in the
// flows' order, and a link's capacity left never drops below 0. Only the work is less: a
// link's even split is divided out when its capacity left or its count changes, not in
// every round, and a round rescans only the blocks of links whose splits changed.

#include "fairshare.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sim {

namespace {

// the flows' indices ordered by cap, equal caps in the flows' order, into `order`
void by_cap(const std::vector<double>& cap, std::vector<int32_t>& order) {
  order.resize(cap.size());
  std::iota(order.begin(), order.end(), 0);
  if (std::is_sorted(cap.begin(), cap.end())) return;  // equal caps, the common case: already in order
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return cap[a] < cap[b]; });
}

// The working arrays of max_min_rates, kept per thread from one call to the next: a
// simulation calls it millions of times, and allocating them each time was a quarter of
// its run time. Each call sizes and fills every one it reads.
struct Scratch {
  std::vector<int32_t> user_start, users, fill, order, frozen;
  std::vector<int64_t> count, block_tight;
  std::vector<double> left, even, block_share;
  std::vector<char> frozen_yet, stale;
};
thread_local Scratch scratch;

// Python's max(0.0, x): x only when greater than 0.0 (so -0.0 and NaN give 0.0)
inline double at_least_zero(double x) { return x > 0.0 ? x : 0.0; }

// links per block of the search for the tightest link (max_min_rates)
constexpr size_t BLOCK = 16;

}  // namespace

void max_min_rates(const LinkFlows& flows, std::vector<double>& rate) {
  const size_t n = flows.cap.size(), links = flows.capacity.size();
  Scratch& s = scratch;
  // per link its flows, in the flows' order (compressed rows)
  std::vector<int32_t>& user_start = s.user_start;
  std::vector<int32_t>& users = s.users;
  user_start.assign(links + 1, 0);
  users.resize(flows.link.size());
  for (int32_t l : flows.link) ++user_start[(size_t)l + 1];
  for (size_t l = 0; l < links; ++l) user_start[l + 1] += user_start[l];
  std::vector<int64_t>& count = s.count;
  count.resize(links);
  for (size_t l = 0; l < links; ++l) count[l] = user_start[l + 1] - user_start[l];
  s.fill.assign(user_start.begin(), user_start.end() - 1);
  for (size_t i = 0; i < n; ++i)
    for (int32_t k = flows.offset[i]; k < flows.offset[i + 1]; ++k) users[(size_t)s.fill[(size_t)flows.link[(size_t)k]]++] = (int32_t)i;
  std::vector<double>& left = s.left;
  left.assign(flows.capacity.begin(), flows.capacity.end());
  std::vector<int32_t>& order = s.order;
  by_cap(flows.cap, order);
  std::vector<char>& frozen_yet = s.frozen_yet;
  frozen_yet.assign(n, 0);
  rate.assign(n, 0.0);
  std::vector<int32_t>& frozen = s.frozen;
  // The tightest link - the least even split (left / count) among links with open flows,
  // the first such link on a tie - from the links in blocks of BLOCK: each block keeps
  // its own tightest link, found again only when a split in it changed. A round reads
  // the blocks' minima and rescans the blocks that changed: never much more work than a
  // scan of every link, and far less in a component of many links where a round changes
  // a few.
  std::vector<double>& even = s.even;  // per link left / count, redone whenever either changes
  even.assign(links, 0.0);
  for (size_t l = 0; l < links; ++l)
    if (count[l] != 0) even[l] = left[l] / (double)count[l];
  const size_t blocks = (links + BLOCK - 1) / BLOCK;
  std::vector<double>& block_share = s.block_share;
  std::vector<int64_t>& block_tight = s.block_tight;
  std::vector<char>& stale = s.stale;
  block_share.assign(blocks, INFINITY);
  block_tight.assign(blocks, -1);
  stale.assign(blocks, 1);
  size_t head = 0, open = n;  // order[head] is the first unfrozen flow by cap
  while (open > 0) {
    while (frozen_yet[(size_t)order[head]]) ++head;
    double share = INFINITY;
    int64_t tight = -1;
    for (size_t b = 0; b < blocks; ++b) {
      if (stale[b]) {
        double least = INFINITY;
        int64_t at = -1;
        for (size_t l = b * BLOCK, end = std::min(links, l + BLOCK); l < end; ++l)
          if (count[l] != 0 && even[l] < least) least = even[l], at = (int64_t)l;
        block_share[b] = least, block_tight[b] = at, stale[b] = 0;
      }
      if (block_share[b] < share) share = block_share[b], tight = block_tight[b];
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
        stale[l / BLOCK] = 1;
      }
    }
    open -= frozen.size();
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
  std::vector<int32_t>& order = scratch.order;
  by_cap(cap, order);
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
