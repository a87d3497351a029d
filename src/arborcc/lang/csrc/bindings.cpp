// The Python module arborcc.lang.native (pybind11): the DSL's bulk tracing of chunk
// copies (trace.cpp), which Program.trace_copies and Program.trace_broadcasts drive.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "trace.hpp"

namespace py = pybind11;

PYBIND11_MODULE(native, m) {
  m.doc() = "arborcc's chunk DSL, the per-copy work of Program.trace_copies (C++)";
  m.def(
      "trace_copies",
      [](py::handle copies, Py_ssize_t start, py::list seqs, py::list ops, Py_ssize_t max_ops, Py_ssize_t num_ranks,
         py::handle input, py::handle output, py::handle named, py::handle meant, long long shift, bool by_source,
         py::object why_not, py::handle copy_kind, py::handle lanes, py::handle where) {
        lang::TraceTarget t{seqs, ops, max_ops, num_ranks, input, output, named, meant, shift, by_source,
                            why_not, {}, copy_kind, lanes, where};
        return lang::trace_copies(t, copies, start);
      },
      "Trace copies[start:] while each is the common case of Program.trace_copies; the index of the "
      "first that is not (len(copies) when all were traced).");
  m.def(
      "trace_broadcasts",
      [](py::handle blocks, Py_ssize_t start, Py_ssize_t first_hop, py::list seqs, py::list ops, Py_ssize_t max_ops,
         Py_ssize_t num_ranks, py::handle input, py::handle output, py::handle named, py::handle meant, long long shift,
         bool by_source, py::object why_not, py::handle copy_kind, py::handle lanes,
         py::handle where) {
        lang::TraceTarget t{seqs, ops, max_ops, num_ranks, input, output, named, meant, shift, by_source,
                            why_not, {}, copy_kind, lanes, where};
        return lang::trace_broadcasts(t, blocks, start, first_hop);
      },
      "Trace the copies of blocks[start:] (from hop first_hop of the first) while each is the common case of "
      "Program.trace_broadcasts; (block, hop) of the first that is not ((len(blocks), 0) when all were traced).");
}
