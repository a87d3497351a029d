// The symbolic run of arborcc.verify.symbolic (simulate_layouts) as a proof: it decides
// whether a layout's run is free of every violation the Python run reports, and only
// that; anything else is left to the Python run, which explains what is wrong.

#pragma once

#include <array>
#include <vector>

#include "program.hpp"

namespace verify {

// One kind of call's memory (arborcc.verify.layout.MemoryMap), flat slot addresses.
struct Layout {
  long long total = 0;                   // slots of all ranks
  std::vector<long long> bases;          // per rank position: 3 IR buffer bases (-1: none)
  std::vector<long long> data, data_end; // per rank position: slots holding its input
  // what the postcondition requires: (first address, length, input chunk, rank whose
  // contribution is needed, or -1 for every rank)
  std::vector<std::array<long long, 4>> expected;
};

struct Proof {
  std::vector<bool> proved;  // per layout: no violation at all
  long long steps_run = 0;   // steps run (all of them when proved)
};

Proof prove_layouts(const Program& p, int num_ranks, const std::vector<Layout>& layouts, int slots,
                    bool check_races);

}  // namespace verify
