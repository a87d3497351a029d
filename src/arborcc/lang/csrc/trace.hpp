// Tracing many chunk copies or reduces of a DSL program at once (Program.trace_copies,
// Program.trace_reduces): the common case of each - checked and recorded exactly as the
// Python verbs would - without a Python call per operation. Anything else is handed
// back to Python (see trace.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include <unordered_map>
#include <utility>

namespace lang {

namespace py = pybind11;

// What a program's trace_copies reads and writes besides the copies themselves.
struct TraceTarget {
  py::list seqs;          // per rank, per buffer code, the list of each slot's last writer
  py::list ops;           // the traced operations (tuples), appended to
  Py_ssize_t max_ops;     // operations allowed: the copy that would pass it is handed back
  Py_ssize_t num_ranks;
  py::handle input, output;           // the canonical buffer names of codes 0 and 1
  py::handle named, meant;            // in-place aliasing by a simple rule (named = a sentinel if none)
  long long shift;                    // index shift per rank of that rule
  bool by_source;                     // a destination index is mapped with the source rank
  py::object why_not;                 // connectivity's why_not(src, dst), or None (all connected)
  std::unordered_map<long long, bool> refused;  // src * ranks + dst -> no route joins them (this call)
  py::handle kind, lanes, where;      // the operation tuple's kind, lanes and where fields
  bool reduce;                        // the operations are reduces (dst = dst (+) src), not copies
};

// Trace operations[start:] - each (src rank, src buffer, src index, dst rank, dst buffer,
// dst index, count, ch), a copy or a reduce as t.reduce says - while each is the common
// case; returns the index of the first one that is not (len(operations) when all were
// traced), for Python to do as written.
Py_ssize_t trace_operations(TraceTarget& t, py::handle operations, Py_ssize_t start);

// Copies of broadcast blocks (hops, buffer, index, size): block i is the copies
// (parent, buffer, index, child, buffer, index, size, ch) for each (parent, child, ch)
// of its hops, in order. Starts at hop first_hop of block start; returns (block, hop) of
// the first copy that is not the common case ((len(blocks), 0) when all were traced).
std::pair<Py_ssize_t, Py_ssize_t> trace_broadcasts(TraceTarget& t, py::handle blocks, Py_ssize_t start,
                                                   Py_ssize_t first_hop);

}  // namespace lang
