// The step table of arborcc.ir.steps (STEP_KINDS) for C++: every step type's code and
// what it does, the one C++ definition every extension module includes (setup.py puts
// this folder on the include path). A module that takes step codes from Python exports
// STEP_NAMES and FLAGS (as STEP_CODES and STEP_FLAGS), and the Python module handing it
// codes checks them against the table at import (arborcc.ir.steps.check_native_step_codes),
// so the two sides cannot drift apart.
#pragma once

namespace step {

enum Code : int { SEND = 0, RECV = 1, REDUCE = 2, COPY = 3, RRC = 4, RRS = 5, RCS = 6, RRCS = 7, NOP = 8 };

constexpr int NUM_CODES = 9;

// the step type names (Op values) in code order
constexpr const char* STEP_NAMES[NUM_CODES] = {"s", "r", "re", "cpy", "rrc", "rrs", "rcs", "rrcs", "nop"};

// what a step type does: bit k is field k + 1 of arborcc.ir.steps.StepKind
enum Flag : unsigned { SENDS = 1, RECEIVES = 2, READS_SRC = 4, READS_DST = 8, WRITES_DST = 16 };

constexpr unsigned FLAGS[NUM_CODES] = {
    SENDS | READS_SRC,                             // s
    RECEIVES | WRITES_DST,                         // r
    READS_SRC | READS_DST | WRITES_DST,            // re
    READS_SRC | WRITES_DST,                        // cpy
    RECEIVES | READS_SRC | WRITES_DST,             // rrc
    SENDS | RECEIVES | READS_SRC,                  // rrs
    SENDS | RECEIVES | WRITES_DST,                 // rcs
    SENDS | RECEIVES | READS_SRC | WRITES_DST,     // rrcs
    0,                                             // nop
};

// whether step code `code` has every flag of `f` (false for a code outside the table)
constexpr bool has(int code, unsigned f) { return code >= 0 && code < NUM_CODES && (FLAGS[code] & f) == f; }

}  // namespace step
