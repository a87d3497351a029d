// Max-min fair rates of flows sharing links (arborcc.sim.fairshare): progressive
// filling over any component, and the single-link rule for a component whose flows all
// cross one link only. Both do the same floating-point operations, in the same order,
// as the Python code they replace (tests/sim/test_fairshare_native.py keeps that code as
// its oracle), so every simulated time is the same to the bit.

#pragma once

#include <cstdint>
#include <vector>

namespace sim {

// Flows as flat arrays. Flow i crosses the links link[offset[i]] .. link[offset[i + 1] - 1],
// each a local index into capacity, numbered in order of first appearance over the flows
// in order (the order in which the rates' ties are broken), no link twice in a flow; cap[i]
// is its own rate cap (not NaN).
struct LinkFlows {
  std::vector<int32_t> offset{0};
  std::vector<int32_t> link;
  std::vector<double> cap;
  std::vector<double> capacity;
};

// Progressive filling: repeatedly the tightest constraint - a link's capacity left split
// evenly among its unfrozen flows (the first such link on a tie), or the least cap - and
// the flows it binds frozen at that rate. rate gets one entry per flow.
void max_min_rates(const LinkFlows& flows, std::vector<double>& rate);

// The same when every flow crosses one link of the given capacity and no other: an even
// split when no flow is capped, else the flows by cap (stably), each the lesser of its cap
// and an even split of what the earlier ones left.
void one_link_rates(const std::vector<double>& cap, double capacity, std::vector<double>& rate);

}  // namespace sim
