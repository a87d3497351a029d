// The Python module arborcc.compiler.native (pybind11): the compiler passes that walk
// every instruction - instruction generation (instructions.cpp), the instruction DAG's
// scan and reverse depths (dag.cpp), fusion (fusion.cpp), the global order's FIFO checks
// and repair (order.cpp), the automatic thread-block assignment (threadblocks.cpp),
// synchronization (sync.cpp) and the IR objects (irobjects.cpp). Columns come in as
// lists of ints (or int64 arrays); predecessor lists stay here as compressed rows
// (PredRows), an assignment and the steps as Assignment and Schedule.

#include <pybind11/pybind11.h>

#include <algorithm>
#include <string>

#include "dag.hpp"
#include "fusion.hpp"
#include "instructions.hpp"
#include "irobjects.hpp"
#include "order.hpp"
#include "pyints.hpp"
#include "sync.hpp"
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

InstrLinks links(py::handle rank, py::handle lane, py::handle msg_in, py::handle msg_out, py::handle alive) {
  return InstrLinks{to_ints(rank), to_ints(lane), to_ints(msg_in), to_ints(msg_out), to_ints(alive)};
}

py::object optional_list(const std::optional<Ints>& v) { return v ? py::object(to_list(*v)) : py::none(); }

// The fusion columns of an instruction table (those unfuse and the thread-block
// assignment read; dbuf, doff and recvtb are left empty).
FusionColumns unfuse_columns(py::handle t) {
  FusionColumns c;
  const char* names[] = {"kind", "ch", "msg_in", "msg_out", "lane", "sbuf", "soff", "speer", "sendtb", "alive"};
  Ints* cols[] = {&c.kind, &c.ch, &c.msg_in, &c.msg_out, &c.lane, &c.sbuf, &c.soff, &c.speer, &c.sendtb, &c.alive};
  for (size_t k = 0; k < 10; ++k) *cols[k] = to_ints(t.attr(names[k]));
  return c;
}

// A fused receive's record in the table's fusions: (send, kind, sbuf, soff, sendtb, ch).
Fused fusion_record(py::handle fusions, int64_t r) {
  PyObject* rec = PyDict_GetItemWithError(fusions.ptr(), py::int_(r).ptr());
  if (!rec) {
    if (PyErr_Occurred()) throw py::error_already_set();
    throw py::key_error("instruction " + std::to_string(r) + " is not fused");
  }
  const Ints f = to_ints(rec);
  if (f.size() != 6) throw py::value_error("a fusion record has six fields");
  return Fused{r, f[0], f[1], f[2], f[3], f[4], f[5]};
}

void set_item(py::handle list, int64_t i, PyObject* value) {  // steals value
  if (!value || PyList_SetItem(list.ptr(), (Py_ssize_t)i, value) < 0) throw py::error_already_set();
}

// Writes what unfusing `receives` changed in c and rep back into the table's lists (in
// place) and rep, and drops their fusion records.
void write_unfused(py::handle t, const FusionColumns& c, py::handle rep, const Ints& receives) {
  py::object fusions = t.attr("fusions");
  py::object kind = t.attr("kind"), sbuf = t.attr("sbuf"), soff = t.attr("soff"), sendtb = t.attr("sendtb"),
             ch = t.attr("ch"), speer = t.attr("speer"), msg_in = t.attr("msg_in"), msg_out = t.attr("msg_out"),
             alive = t.attr("alive");
  for (int64_t r : receives) {
    const size_t ri = (size_t)r;
    const int64_t s = fusion_record(fusions, r).send;
    const size_t si = (size_t)s, qi = (size_t)c.msg_out[si];
    set_item(kind, r, PyLong_FromLongLong(c.kind[ri]));
    set_item(sbuf, r, PyLong_FromLongLong(c.sbuf[ri]));
    set_item(soff, r, PyLong_FromLongLong(c.soff[ri]));
    set_item(sendtb, r, PyLong_FromLongLong(c.sendtb[ri]));
    set_item(ch, r, PyLong_FromLongLong(c.ch[ri]));
    set_item(speer, r, PyLong_FromLongLong(c.speer[ri]));
    set_item(msg_out, r, PyLong_FromLongLong(c.msg_out[ri]));
    set_item(msg_in, (int64_t)qi, PyLong_FromLongLong(c.msg_in[qi]));
    set_item(msg_out, s, PyLong_FromLongLong(c.msg_out[si]));
    set_item(alive, s, py::bool_(c.alive[si] != 0).release().ptr());
    set_item(rep, s, PyLong_FromLongLong(s));
    if (PyDict_DelItem(fusions.ptr(), py::int_(r).ptr()) < 0) throw py::error_already_set();
  }
}

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

  py::class_<Rows>(m, "PredRows", "per instruction, its same-rank predecessors (compressed rows), for the passes here");

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
        std::vector<Ints> col = lower_direct(traced, regions);
        py::list out;
        for (size_t k = 0; k < col.size(); ++k) out.append(k == OP ? py::object(to_array(col[k])) : py::object(to_list(col[k])));
        return out;
      },
      "the instruction columns (rank, kind, sbuf, soff, dbuf, doff, cnt, speer, rpeer, ch, sendtb, recvtb, op as "
      "an int64 array, msg_in, msg_out) of traced operations without parallelize or instances");

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
      .def_readonly("multi_forwards", &DagScan::multi_forwards);

  m.def(
      "scan_dependencies",
      [](py::handle rank, py::handle kind, py::handle sbuf, py::handle dbuf, py::handle soff, py::handle doff,
         py::handle cnt, py::handle msg_in, py::handle sizes) {
        InstrColumns t{to_ints(rank), to_ints(kind), to_ints(sbuf), to_ints(dbuf), to_ints(soff),
                       to_ints(doff),  to_ints(cnt),  to_ints(msg_in)};
        return scan_dependencies(t, to_ints(sizes));
      },
      "the DAG scan (a DagScan); sizes = flat [rank * 3 + IR buffer] chunk counts");

  m.def(
      "fuse_instructions",
      [](py::object t, const DagScan& scan, py::handle rdepth, py::handle significant, bool manual) {
        FusionColumns c;
        const char* names[] = {"kind", "ch", "msg_in", "msg_out", "lane", "sbuf", "soff", "dbuf", "speer",
                               "sendtb", "recvtb", "doff", "alive"};
        Ints* cols[] = {&c.kind, &c.ch, &c.msg_in, &c.msg_out, &c.lane, &c.sbuf, &c.soff, &c.dbuf, &c.speer,
                        &c.sendtb, &c.recvtb, &c.doff, &c.alive};
        for (size_t k = 0; k < 13; ++k) *cols[k] = to_ints(t.attr(names[k]));
        const size_t n = c.kind.size();
        FusionInput in{scan.forwarded, scan.forwards, scan.readers, {}, std::vector<char>(n, 0), {}, manual};
        if (!rdepth.is_none()) in.rdepth = to_ints(rdepth);
        for (int64_t w : scan.final_writers)
          if (w >= 0 && (size_t)w < n) in.final[(size_t)w] = 1;
        in.significant = to_flags(significant, 3);
        Ints rep;
        std::vector<Fused> fused = fuse_instructions(c, in, rep);
        py::dict fusions = t.attr("fusions");
        for (const Fused& f : fused)
          fusions[py::int_(f.recv)] = py::make_tuple(f.send, f.kind, f.sbuf, f.soff, f.sendtb, f.ch);
        for (const char* name : {"kind", "sbuf", "soff", "speer", "sendtb", "ch", "msg_out", "msg_in"}) {
          const size_t k = std::find_if(std::begin(names), std::end(names),
                                        [&](const char* x) { return std::string(x) == name; }) - std::begin(names);
          t.attr(name) = to_list(*cols[k]);
        }
        t.attr("alive") = to_bool_list(c.alive);
        return to_list(rep);
      },
      "fuse in place (the table's columns replaced, its fusions filled); returns the alias map");

  m.def(
      "reverse_depths",
      [](const Rows& preds, py::handle msg_in, py::handle alive, py::handle rep) {
        return to_list(reverse_depths(preds, to_ints(msg_in), rep.is_none() ? Ints() : to_ints(alive),
                                      rep.is_none() ? Ints() : to_ints(rep)));
      },
      "longest path from each instruction to the end (fused DAG when rep is not None)");

  m.def(
      "global_order",
      [](py::handle alive, py::handle depth, py::handle rdepth) {
        return to_list(global_order(to_ints(alive), to_ints(depth), rdepth.is_none() ? Ints() : to_ints(rdepth)));
      },
      "the alive instructions by depth, then reverse depth (larger first), then index");

  m.def(
      "fifo_consistent",
      [](py::handle rank, py::handle lane, py::handle msg_in, py::handle msg_out, py::handle alive, py::handle order) {
        return fifo_consistent(links(rank, lane, msg_in, msg_out, alive), to_ints(order));
      },
      "whether every pair's receives follow the order of its sends");
  m.def(
      "slot_safe",
      [](py::handle rank, py::handle lane, py::handle msg_in, py::handle msg_out, py::handle alive, py::handle order,
         int64_t slots) { return slot_safe(links(rank, lane, msg_in, msg_out, alive), to_ints(order), slots); },
      "whether no send finds `slots` messages of its pair in flight");

  m.def(
      "unfuse",
      [](py::object t, py::handle rep, py::handle receives) {
        FusionColumns c = unfuse_columns(t);
        Ints alias = to_ints(rep);
        py::object fusions = t.attr("fusions");
        const Ints undo = to_ints(receives);
        for (int64_t r : undo) unfuse(c, alias, fusion_record(fusions, r));
        write_unfused(t, c, rep, undo);
      },
      "undo the fusion of each of `receives` in the table (its lists changed in place) and in rep");

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
           "from per-instruction thread-block indices and per thread block (rank, id, send, recv, channel, lane)")
      .def_property_readonly("thread_blocks", [](const ThreadBlocks& a) { return a.size(); });

  m.def(
      "assign_auto",
      [](py::object t, py::handle order, const Rows& preds, py::handle rep, int64_t num_ranks, int64_t max_channels) {
        FusionColumns c = unfuse_columns(t);
        const Ints rank = to_ints(t.attr("rank")), rpeer = to_ints(t.attr("rpeer"));
        py::object fusions = t.attr("fusions");
        AssignInput in{rank, rpeer, preds, num_ranks, max_channels,
                       [&](int64_t r) { return fusion_record(fusions, r); }};
        Ints ord = to_ints(order), alias = to_ints(rep), unfused;
        ThreadBlocks a = assign_auto(c, in, ord, alias, unfused);
        if (!unfused.empty()) {
          write_unfused(t, c, rep, unfused);
          assign_list(order, ord);
        }
        return a;
      },
      "the automatic thread-block assignment (an Assignment); fusions it undoes are undone in the table, rep and "
      "order (in place)");

  py::class_<Schedule>(m, "Schedule", "every thread block's steps").def_readonly("nops", &Schedule::nops);

  m.def(
      "emit_steps",
      [](py::handle t, py::handle order, const Rows& preds, py::handle rep, const ThreadBlocks& a) {
        StepColumns c{to_ints(t.attr("kind")), to_ints(t.attr("sbuf")), to_ints(t.attr("soff")),
                      to_ints(t.attr("dbuf")), to_ints(t.attr("doff")), to_ints(t.attr("cnt"))};
        return emit_steps(c, to_ints(order), preds, to_ints(rep), a);
      },
      "every instruction as a step of its thread block, with dependencies and nop steps (a Schedule)");

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
      .def(py::init([](py::handle rank, py::handle lane, py::handle msg_in, py::handle msg_out, py::handle alive,
                       py::handle order, const Rows& preds, py::handle rep) {
        return OrderGraph(links(rank, lane, msg_in, msg_out, alive), to_ints(order), preds, to_ints(rep));
      }))
      .def("kahn", [](const OrderGraph& g, py::handle order, bool by_priority) {
        return optional_list(g.kahn(to_ints(order), by_priority));
      })
      .def("kahn_fifo", [](const OrderGraph& g, py::handle order) {
        KahnFifo r = g.kahn_fifo(to_ints(order));
        return py::make_tuple(optional_list(r.order), to_list(r.blocked), to_list(r.waiting));
      })
      .def("fifo_schedule", [](const OrderGraph& g, py::handle order) { return g.fifo_schedule(to_ints(order)); });
}
