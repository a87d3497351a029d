// The Python module arborcc.lang.native (pybind11): the DSL's bulk tracing of chunk
// copies and reduces (trace.cpp), which Program.trace_copies, Program.trace_reduces and
// Program.trace_broadcasts drive.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "trace.hpp"

namespace py = pybind11;

namespace {

// The binding of one bulk tracer: ``reduce`` says whether its operations are reduces.
auto operations_tracer(bool reduce) {
  return [reduce](py::handle operations, Py_ssize_t start, py::list seqs, py::list ops, Py_ssize_t max_ops,
                  Py_ssize_t num_ranks, py::handle input, py::handle output, py::handle named, py::handle meant,
                  long long shift, bool by_source, py::object why_not, py::handle kind, py::handle lanes,
                  py::handle where) {
    lang::TraceTarget t{seqs, ops, max_ops, num_ranks, input, output, named, meant, shift, by_source,
                        why_not, {}, kind, lanes, where, reduce};
    return lang::trace_operations(t, operations, start);
  };
}

}  // namespace

PYBIND11_MODULE(native, m) {
  m.doc() = "arborcc's chunk DSL, the per-operation work of Program.trace_copies and trace_reduces (C++)";
  m.def("trace_copies", operations_tracer(false),
        "Trace copies[start:] while each is the common case of Program.trace_copies; the index of the "
        "first that is not (len(copies) when all were traced).");
  m.def("trace_reduces", operations_tracer(true),
        "Trace reduces[start:] while each is the common case of Program.trace_reduces; the index of the "
        "first that is not (len(reduces) when all were traced).");
  m.def(
      "trace_broadcasts",
      [](py::handle blocks, Py_ssize_t start, Py_ssize_t first_hop, py::list seqs, py::list ops, Py_ssize_t max_ops,
         Py_ssize_t num_ranks, py::handle input, py::handle output, py::handle named, py::handle meant, long long shift,
         bool by_source, py::object why_not, py::handle kind, py::handle lanes,
         py::handle where) {
        lang::TraceTarget t{seqs, ops, max_ops, num_ranks, input, output, named, meant, shift, by_source,
                            why_not, {}, kind, lanes, where, false};
        return lang::trace_broadcasts(t, blocks, start, first_hop);
      },
      "Trace the copies of blocks[start:] (from hop first_hop of the first) while each is the common case of "
      "Program.trace_broadcasts; (block, hop) of the first that is not ((len(blocks), 0) when all were traced).");
}
