// The per-step rules of arborcc.verify.structure.check_structure, as a yes/no answer.

#pragma once

#include "program.hpp"

namespace verify {

struct StructureAnswer {
  bool clean = false;       // no violation of the per-rank, per-step and connection rules
  long long unwaited = 0;   // steps that set hasdep without any step waiting on them
};

StructureAnswer check_structure_rules(const Program& p, int num_ranks);

}  // namespace verify
