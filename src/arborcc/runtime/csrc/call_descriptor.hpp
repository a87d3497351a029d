// What a collective call is, as every rank of it must agree (collective, element type,
// operator, element count, root, in place or not), packed into two words that Python
// computes once per call shape (arborcc.runtime.communicator) and the data plane compares
// with its peers' before data moves; and the words for the line that names what differs.
#pragma once

#include <cstdint>
#include <string>

namespace dataplane {

// Field codes. Python encodes with these tables (native.CALL_COLLECTIVES, CALL_DTYPES,
// CALL_OPS), so the two sides share one definition.
inline constexpr const char* CALL_COLLECTIVES[] = {"allreduce", "allgather", "reducescatter", "alltoall",
                                                   "broadcast", "reduce",    "gather",        "scatter",
                                                   "custom"};
inline constexpr const char* CALL_DTYPES[] = {"float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"};
inline constexpr const char* CALL_OPS[] = {"none", "sum", "prod", "min", "max", "avg"};
// how a rank passes its buffers, where it matters (0: it does not, the staged all-reduce)
inline constexpr const char* CALL_MODES[] = {"", "in place", "out of place", "on shared arrays"};
inline constexpr int CALL_NCOLLECTIVES = sizeof CALL_COLLECTIVES / sizeof *CALL_COLLECTIVES;
inline constexpr int CALL_NDTYPES = sizeof CALL_DTYPES / sizeof *CALL_DTYPES;
inline constexpr int CALL_NOPS = sizeof CALL_OPS / sizeof *CALL_OPS;
inline constexpr int CALL_NMODES = sizeof CALL_MODES / sizeof *CALL_MODES;

// One call: `what` packs collective (bits 0-7), dtype (8-15), op (16-23, 0: none), mode
// (24-31: CALL_MODES) and root + 1 (32-63, 0: none); `count`
// is the elements of one rank's block.
struct CallDesc {
  uint64_t what = 0, count = 0;
  bool operator==(const CallDesc& o) const { return what == o.what && count == o.count; }
  bool operator!=(const CallDesc& o) const { return !(*this == o); }
  int collective() const { return (int)(what & 0xff); }
  int dtype() const { return (int)((what >> 8) & 0xff); }
  int op() const { return (int)((what >> 16) & 0xff); }
  int mode() const { return (int)((what >> 24) & 0xff); }
  int64_t root() const { return (int64_t)(what >> 32) - 1; }
};

inline std::string call_name(const char* const* table, int n, int code) {
  return code >= 0 && code < n ? table[code] : "code " + std::to_string(code);
}

// "call mismatch: rank 1 calls allgather, rank 0 allreduce" and the like: the first field
// in which rank `peer`'s call `theirs` differs from rank `me`'s call `mine`.
inline std::string call_mismatch(int peer, const CallDesc& theirs, int me, const CallDesc& mine) {
  const std::string p = "call mismatch: rank " + std::to_string(peer), m = "rank " + std::to_string(me);
  if (theirs.collective() != mine.collective())
    return p + " calls " + call_name(CALL_COLLECTIVES, CALL_NCOLLECTIVES, theirs.collective()) + ", " + m + " " +
           call_name(CALL_COLLECTIVES, CALL_NCOLLECTIVES, mine.collective());
  const std::string calls = p + " calls " + call_name(CALL_COLLECTIVES, CALL_NCOLLECTIVES, mine.collective());
  if (theirs.op() != mine.op())
    return p + " reduces with " + call_name(CALL_OPS, CALL_NOPS, theirs.op()) + ", " + m + " with " +
           call_name(CALL_OPS, CALL_NOPS, mine.op());
  if (theirs.dtype() != mine.dtype())
    return calls + " on " + call_name(CALL_DTYPES, CALL_NDTYPES, theirs.dtype()) + " vs " + m + " on " +
           call_name(CALL_DTYPES, CALL_NDTYPES, mine.dtype());
  if (theirs.count != mine.count)
    return calls + " on " + std::to_string(theirs.count) + " elements vs " + m + " on " + std::to_string(mine.count) +
           " (per rank block)";
  if (theirs.root() != mine.root())
    return calls + " from root " + std::to_string(theirs.root()) + " vs " + m + " from root " +
           std::to_string(mine.root());
  if (theirs.mode() != mine.mode())
    return calls + " " + call_name(CALL_MODES, CALL_NMODES, theirs.mode()) + " vs " + m + " " +
           call_name(CALL_MODES, CALL_NMODES, mine.mode());
  return p + " and " + m + " make the same call";
}

}  // namespace dataplane
