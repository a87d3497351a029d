// The Python module arborcc.compiler.native (pybind11): the compiler passes that walk
// every instruction - instruction generation (instructions.cpp), the instruction DAG's
// scan and reverse depths (dag.cpp), fusion (fusion.cpp), the global order's FIFO checks
// and repair (order.cpp), the automatic thread-block assignment (threadblocks.cpp),
// synchronization (sync.cpp), the schedule's run with steps cut into FIFO slices
// (pieces.cpp) and the IR objects (irobjects.cpp). The instruction table
// (InstrTable), the DAG scan (DagScan, its predecessors as PredRows), an assignment
// (Assignment) and the steps (Schedule) stay here between the passes; Python sees their
// columns as lists on demand. Orders come in and go out as lists of ints.

#include <pybind11/pybind11.h>

#include <string>

#include "dag.hpp"
#include "fusion.hpp"
#include "instructions.hpp"
#include "irobjects.hpp"
#include "order.hpp"
#include "pieces.hpp"
#include "pyints.hpp"
#include "sync.hpp"
#include "step_codes.hpp"
#include "table.hpp"
#include "threadblocks.hpp"

namespace py = pybind11;

namespace compiler {

namespace {

// a row of Python ints as a tuple (the DAG's predecessor lists)
py::tuple to_tuple(const int64_t* b, const int64_t* e, PyObject* empty) {
  if (b == e) return py::reinterpret_borrow<py::tuple>(empty);
  PyObject* t = PyTuple_New(e - b);
  if (!t) throw py::error_already_set();
  for (Py_ssize_t k = 0; b != e; ++b, ++k) PyTuple_SET_ITEM(t, k, PyLong_FromLongLong(*b));
  return py::reinterpret_steal<py::tuple>(t);
}

py::object optional_list(const std::optional<Ints>& v) { return v ? py::object(to_list(*v)) : py::none(); }

// The table's columns, in the order InstrTable.FIELDS names them and its constructor takes them.
const char* const FIELDS[] = {"rank", "kind",  "sbuf", "soff",   "dbuf",   "doff", "cnt",    "speer",
                              "rpeer", "lane", "ch",   "sendtb", "recvtb", "op",   "msg_in", "msg_out"};
Ints Table::* const TABLE_COLUMNS[] = {&Table::rank,  &Table::kind, &Table::sbuf, &Table::soff,   &Table::dbuf,   &Table::doff,
                                 &Table::cnt,   &Table::speer, &Table::rpeer, &Table::lane, &Table::ch,     &Table::sendtb,
                                 &Table::recvtb, &Table::op,  &Table::msg_in, &Table::msg_out};
constexpr size_t NFIELDS = sizeof(FIELDS) / sizeof(FIELDS[0]);

// Replaces the items of a list by vals (in place).
void assign_list(py::handle list, const Ints& vals) {
  py::list fresh = to_list(vals);
  if (PyList_SetSlice(list.ptr(), 0, PyList_GET_SIZE(list.ptr()), fresh.ptr()) < 0) throw py::error_already_set();
}

}  // namespace

}  // namespace compiler

PYBIND11_MODULE(native, m) {
  using namespace compiler;
  m.doc() = "arborcc's compiler passes over every instruction (C++): instruction generation, the DAG scan, fusion, the FIFO-order repair, thread blocks, synchronization and the IR objects";

  m.attr("SAFE_SLOTS") = SAFE_SLOTS;
  py::list step_names, step_flags;  // the step table this module was built with (step_codes.hpp)
  for (int code = 0; code < step::NUM_CODES; ++code) {
    step_names.append(step::STEP_NAMES[code]);
    step_flags.append(step::FLAGS[code]);
  }
  m.attr("STEP_CODES") = step_names;
  m.attr("STEP_FLAGS") = step_flags;

  py::class_<Rows>(m, "PredRows", "per instruction, its same-rank predecessors (compressed rows), for the passes here");

  py::class_<Table> table(m, "InstrTable",
                          "Instructions as columns; instruction i is index i of every column (arborcc.compiler.instructions)");
  table
      .def(py::init([](py::args columns) {
             if (columns.size() != NFIELDS) throw py::type_error("InstrTable takes one list per field of FIELDS");
             Table t;
             for (size_t k = 0; k < NFIELDS; ++k) {
               t.*TABLE_COLUMNS[k] = to_ints(columns[k]);
               if ((t.*TABLE_COLUMNS[k]).size() != t.rank.size()) throw py::value_error("InstrTable: columns of different lengths");
             }
             t.unfused_start();
             return t;
           }),
           "from one list per field of FIELDS; every instruction alive, none fused")
      .def("__len__", &Table::size)
      .def_property_readonly("alive", [](const Table& t) { return to_bool_list(t.alive); },
                             "per instruction: False for a send fused into a receive")
      .def_property_readonly("rep", [](const Table& t) { return to_list(t.rep); },
                             "the alias map: the instruction that now does what i did")
      .def_property_readonly(
          "fusions",
          [](const Table& t) {
            py::dict out;
            for (const Fused& f : t.fusions)
              if (f.recv >= 0) out[py::int_(f.recv)] = py::make_tuple(f.send, f.kind, f.sbuf, f.soff, f.sendtb, f.ch);
            return out;
          },
          "fused receive -> (the send fused into it, and the receive's own kind, sbuf, soff, sendtb, ch before "
          "fusion), in the order made")
      .def_property_readonly("fusion_count", &Table::fusion_count)
      .def(
          "fused_receives",
          [](const Table& t) {
            Ints out;
            for (const Fused& f : t.fusions)
              if (f.recv >= 0) out.push_back(f.recv);
            return to_list(out);
          },
          "the fused receives, in the order fused (the keys of fusions)");
  for (size_t k = 0; k < NFIELDS; ++k) {
    Ints Table::*column = TABLE_COLUMNS[k];
    table.def_property_readonly(FIELDS[k], [column](const Table& t) { return to_list(t.*column); });
  }
  py::tuple fields(NFIELDS);
  for (size_t k = 0; k < NFIELDS; ++k) fields[k] = py::str(FIELDS[k]);
  table.attr("FIELDS") = fields;

  m.def(
      "lower_direct",
      [](py::handle ops, py::handle region_offset) {
        PyObject* list = ops.ptr();
        if (!PyList_Check(list)) throw py::type_error("lower_direct needs the list of traced operations");
        std::vector<TracedOp> traced((size_t)PyList_GET_SIZE(list));
        for (size_t i = 0; i < traced.size(); ++i) {
          PyObject* op = PyList_GET_ITEM(list, (Py_ssize_t)i);
          if (!PyTuple_Check(op) || PyTuple_GET_SIZE(op) < 11) throw py::type_error("a traced operation is a tuple");
          int64_t f[11];
          for (Py_ssize_t k = 0; k < 11; ++k) {
            f[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(op, k));
            if (f[k] == -1 && PyErr_Occurred()) throw py::error_already_set();
          }
          traced[i] = TracedOp{f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10]};
        }
        std::vector<Ints> regions;
        for (py::handle r : region_offset) regions.push_back(to_ints(r));
        return lower_direct(traced, regions);
      },
      "the instruction table of traced operations without parallelize or instances");

  py::class_<DagScan>(m, "DagScan", "the DAG scan's results (arborcc.compiler.dag.Dag reads them on demand)")
      .def_property_readonly(
          "pred_rows", [](const DagScan& s) -> const Rows& { return s.preds; }, py::return_value_policy::reference_internal)
      .def_property_readonly("preds",
                             [](const DagScan& s) {
                               py::tuple empty;
                               const size_t n = s.preds.size();
                               py::list preds(n);
                               for (size_t i = 0; i < n; ++i) preds[i] = to_tuple(s.preds.begin(i), s.preds.end(i), empty.ptr());
                               return preds;
                             })
      .def_property_readonly("depth", [](const DagScan& s) { return to_list(s.depth); })
      .def_property_readonly("readers", [](const DagScan& s) { return to_list(s.readers); })
      .def_property_readonly("forwards",
                             [](const DagScan& s) {
                               py::dict forwards;
                               for (size_t k = 0; k < s.forwarded.size(); ++k)
                                 forwards[py::int_(s.forwarded[k])] = to_list(s.forwards[k]);
                               return forwards;
                             })
      .def_property_readonly("final", [](const DagScan& s) { return py::set(to_list(s.final_writers)); })
      .def_property_readonly("has_forwards", [](const DagScan& s) { return !s.forwarded.empty(); })
      .def_property_readonly("has_rdepth", [](const DagScan& s) { return !s.rdepth.empty() || s.depth.empty(); })
      .def_readonly("multi_forwards", &DagScan::multi_forwards);

  m.def(
      "scan_dependencies", [](const Table& t, py::handle sizes) { return scan_dependencies(t, to_ints(sizes)); },
      "the DAG scan (a DagScan); sizes = flat [rank * 3 + IR buffer] chunk counts");

  m.def(
      "fuse_instructions",
      [](Table& t, const DagScan& scan, py::handle significant, bool manual) {
        const size_t n = t.size();
        FusionInput in{scan.forwarded, scan.forwards, scan.readers, scan.rdepth, std::vector<char>(n, 0),
                       to_flags(significant, 3), manual};
        for (int64_t w : scan.final_writers)
          if (w >= 0 && (size_t)w < n) in.final[(size_t)w] = 1;
        fuse_instructions(t, in);
      },
      "fuse in place: the table's columns, alias map and fusions");

  m.def(
      "reverse_depths",
      [](DagScan& scan, const Table& t, bool fused) {
        const Ints none;
        scan.rdepth = reverse_depths(scan.preds, t.msg_in, fused ? t.alive : none, fused ? t.rep : none);
      },
      "the longest path from each instruction to the end (of the fused DAG when fused), kept as the scan's rdepth");

  m.def(
      "global_order", [](const Table& t, const DagScan& scan) { return to_list(global_order(t.alive, scan.depth, scan.rdepth)); },
      "the alive instructions by depth, then reverse depth (larger first; the scan's), then index");

  m.def(
      "fifo_consistent", [](const Table& t, py::handle order) { return fifo_consistent(t, to_ints(order)); },
      "whether every pair's receives follow the order of its sends");
  m.def(
      "slot_safe", [](const Table& t, py::handle order, int64_t slots) { return slot_safe(t, to_ints(order), slots); },
      "whether no send finds `slots` messages of its pair in flight");

  m.def(
      "unfuse",
      [](Table& t, py::handle receives) {
        for (int64_t r : to_ints(receives)) unfuse(t, r);
      },
      "undo the fusion of each of `receives` in the table");

  py::class_<ThreadBlocks>(m, "Assignment", "every alive instruction's thread block, and the thread blocks")
      .def(py::init([](py::handle tb_of, py::handle rank, py::handle id, py::handle send, py::handle recv, py::handle ch,
                       py::handle lane, int64_t num_ranks) {
             ThreadBlocks a;
             a.tb_of = to_ints(tb_of);
             a.of_rank.resize((size_t)num_ranks);
             const Ints r = to_ints(rank), i = to_ints(id), s = to_ints(send), v = to_ints(recv), c = to_ints(ch),
                        q = to_ints(lane);
             for (size_t k = 0; k < r.size(); ++k) {
               if (r[k] < 0 || r[k] >= num_ranks || i[k] != (int64_t)a.of_rank[(size_t)r[k]].size())
                 throw py::value_error("Assignment: thread blocks must come per rank in id order from 0");
               a.add(r[k], s[k], v[k], c[k], q[k]);
             }
             return a;
           }),
           "from per-instruction thread-block indices and per thread block (rank, id, send, recv, channel, lane)");

  m.def(
      "assign_auto",
      [](Table& t, py::handle order, const Rows& preds, int64_t num_ranks, int64_t max_channels) {
        Ints ord = to_ints(order);
        const size_t before = ord.size();
        ThreadBlocks a = assign_auto(t, preds, num_ranks, max_channels, ord);
        if (ord.size() != before) assign_list(order, ord);
        return a;
      },
      "the automatic thread-block assignment (an Assignment); fusions it undoes are undone in the table, their "
      "sends inserted in the order (a list, changed in place)");

  py::class_<Schedule>(m, "Schedule", "every thread block's steps (of one instance)")
      .def_readonly("nops", &Schedule::nops)
      .def_property_readonly("kinds", [](const Schedule& s) { return to_list(s.kinds); }, "steps per instruction kind");

  m.def(
      "emit_steps",
      [](const Table& t, py::handle order, const Rows& preds, const ThreadBlocks& a) {
        return emit_steps(t, to_ints(order), preds, a);
      },
      "every instruction as a step of its thread block, with dependencies and nop steps (a Schedule)");

  m.def(
      "finishes_in_pieces",
      [](const Schedule& s, const ThreadBlocks& a, int64_t capacity, int64_t per_piece) {
        return finishes_in_pieces(s, a, capacity, per_piece);
      },
      "whether every thread block finishes with a step of cnt chunks moving cnt * per_piece slices through "
      "connections of `capacity` slices");

  m.def(
      "build_threadblocks",
      [](const Schedule& s, const ThreadBlocks& a, int64_t instances, py::handle shifts, py::tuple classes,
         py::tuple fields, py::tuple ops, py::tuple buffers) {
        if (classes.size() != 3 || fields.size() != 3) throw py::value_error("three classes and their fields");
        IrClasses cls{classes[0], classes[1], classes[2], fields[0], fields[1], fields[2], ops, buffers};
        return build_threadblocks(s, a, instances, to_ints(shifts), cls);
      },
      "per rank, its ThreadBlock objects (classes: Step, ThreadBlock, Dependency; fields: theirs)");

  py::class_<OrderGraph>(m, "OrderGraph", "the dependency graph and message pairs the FIFO repair schedules")
      .def(py::init([](const Table& t, py::handle order, const Rows& preds) { return OrderGraph(t, to_ints(order), preds); }))
      .def("kahn", [](const OrderGraph& g, py::handle order, bool by_priority) {
        return optional_list(g.kahn(to_ints(order), by_priority));
      })
      .def("kahn_fifo", [](const OrderGraph& g, py::handle order, const Table& t) {
        KahnFifo r = g.kahn_fifo(to_ints(order));
        return py::make_tuple(optional_list(r.order), to_list(stuck_fusions(r, t)));
      })
      .def("program_order", [](const OrderGraph& g, py::handle order) { return to_list(g.program_order(to_ints(order))); })
      .def("fifo_schedule", [](const OrderGraph& g, py::handle order) { return g.fifo_schedule(to_ints(order)); });
}
