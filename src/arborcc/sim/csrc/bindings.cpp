// The Python module arborcc.sim.native (pybind11): the simulator's event-driven run
// (engine.cpp) over a program flattened once (EngineProgram), and the max-min fair share
// (fairshare.cpp) over arborcc.sim.fairshare's Flow objects.

#include <pybind11/pybind11.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine.hpp"
#include "fairshare.hpp"

namespace py = pybind11;

namespace sim {

namespace {

// a new reference, or the Python error raised
PyObject* checked(PyObject* obj) {
  if (obj == nullptr) throw py::error_already_set();
  return obj;
}

double as_double(PyObject* obj) {
  const double x = PyFloat_AsDouble(obj);
  if (x == -1.0 && PyErr_Occurred()) throw py::error_already_set();
  return x;
}

// a Python int's value, or the Python error raised
long long as_int(PyObject* obj) {
  const long long x = PyLong_AsLongLong(obj);
  if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
  return x;
}

// the names of Flow's attributes read here, made once
struct FlowNames {
  py::str links{"links"}, cap{"cap"};
};
const FlowNames& names() {
  static const FlowNames* made = new FlowNames();  // never freed: outlives the interpreter's teardown order
  return *made;
}

// The links' capacities (a list or tuple of numbers, indexed by link) and a per-link
// scratch index that is -1 between calls.
class Links {
 public:
  explicit Links(py::handle capacity)
      : seq_(py::reinterpret_steal<py::object>(checked(PySequence_Fast(capacity.ptr(), "the capacities must be a list")))),
        size_(PySequence_Fast_GET_SIZE(seq_.ptr())) {
    if (scratch().size() < (size_t)size_) scratch().resize((size_t)size_, -1);
  }
  py::ssize_t size() const { return size_; }
  double capacity(int64_t l) const { return as_double(PySequence_Fast_GET_ITEM(seq_.ptr(), (py::ssize_t)l)); }
  // the link a Python int names, checked against the capacities
  int64_t index(PyObject* obj) const {
    const long long l = as_int(obj);
    if (l < 0 || l >= size_) throw py::index_error("link " + std::to_string(l) + " has no capacity");
    return l;
  }
  static std::vector<int32_t>& scratch() {
    thread_local std::vector<int32_t> local;
    return local;
  }

 private:
  py::object seq_;
  py::ssize_t size_;
};

// Flow objects' links and caps as LinkFlows (links numbered by first appearance)
class FlowReader {
 public:
  explicit FlowReader(const Links& links) : links_(links) {}
  ~FlowReader() {
    for (int64_t l : global_) Links::scratch()[(size_t)l] = -1;
  }
  // the flow's links and cap
  void add(PyObject* flow) {
    py::object links = py::reinterpret_steal<py::object>(checked(PyObject_GetAttr(flow, names().links.ptr())));
    py::object seq = py::reinterpret_steal<py::object>(checked(PySequence_Fast(links.ptr(), "a flow's links must be a tuple")));
    const py::ssize_t k = PySequence_Fast_GET_SIZE(seq.ptr());
    std::vector<int32_t>& local = Links::scratch();
    for (py::ssize_t j = 0; j < k; ++j) {
      PyObject* item = PySequence_Fast_GET_ITEM(seq.ptr(), j);
      const int64_t l = links_.index(item);
      if (local[(size_t)l] < 0) {
        local[(size_t)l] = (int32_t)global_.size();
        global_.push_back(l);
        flows.capacity.push_back(links_.capacity(l));
      }
      const int32_t index = local[(size_t)l];
      for (int32_t m = flows.offset.back(); m < (int32_t)flows.link.size(); ++m)
        if (flows.link[(size_t)m] == index) throw py::value_error("a flow crosses link " + std::to_string(l) + " twice");
      flows.link.push_back(index);
    }
    flows.offset.push_back((int32_t)flows.link.size());
    const double cap = as_double(py::reinterpret_steal<py::object>(checked(PyObject_GetAttr(flow, names().cap.ptr()))).ptr());
    if (std::isnan(cap)) throw py::value_error("a flow's cap is NaN");
    flows.cap.push_back(cap);
  }

  LinkFlows flows;

 private:
  const Links& links_;
  std::vector<int64_t> global_;  //: the links in order of first appearance
};

py::list rates_list(const std::vector<double>& rate) {
  py::list out(rate.size());
  for (size_t i = 0; i < rate.size(); ++i) PyList_SET_ITEM(out.ptr(), (py::ssize_t)i, checked(PyFloat_FromDouble(rate[i])));
  return out;
}

py::list max_min_rates_py(py::handle flows, py::handle capacity) {
  const Links links(capacity);
  FlowReader reader(links);
  py::object seq = py::reinterpret_steal<py::object>(checked(PySequence_Fast(flows.ptr(), "the flows must be a list")));
  for (py::ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq.ptr()); ++i) reader.add(PySequence_Fast_GET_ITEM(seq.ptr(), i));
  std::vector<double> rate;
  max_min_rates(reader.flows, rate);
  return rates_list(rate);
}

// the items of a Python sequence, each through `item`
template <class Item>
void each(py::handle seq_obj, const char* what, Item&& item) {
  py::object seq = py::reinterpret_steal<py::object>(checked(PySequence_Fast(seq_obj.ptr(), what)));
  const py::ssize_t k = PySequence_Fast_GET_SIZE(seq.ptr());
  for (py::ssize_t i = 0; i < k; ++i) item(PySequence_Fast_GET_ITEM(seq.ptr(), i));
}


std::vector<double> doubles(py::handle seq, const char* what) {
  std::vector<double> out;
  each(seq, what, [&](PyObject* x) { out.push_back(as_double(x)); });
  return out;
}

// arborcc.sim.program.CompiledAlgorithm's thread blocks, flattened (engine.hpp)
EngineProgram engine_program(py::handle tb_flags, py::handle tb_counts, py::handle tb_deps, py::handle tb_send,
                             py::handle tb_recv, int32_t num_conns) {
  EngineProgram prog;
  prog.num_conns = num_conns;
  each(tb_flags, "tb_flags must be a list", [&](PyObject* flags) {
    each(flags, "a thread block's flags must be a list", [&](PyObject* f) { prog.flags.push_back((int32_t)as_int(f)); });
    prog.step_start.push_back((int64_t)prog.flags.size());
  });
  each(tb_counts, "tb_counts must be a list", [&](PyObject* counts) {
    each(counts, "a thread block's counts must be a list", [&](PyObject* k) { prog.counts.push_back(as_int(k)); });
  });
  const int32_t n = (int32_t)prog.step_start.size() - 1;
  int32_t t = 0;
  each(tb_deps, "tb_deps must be a list", [&](PyObject* deps) {
    const int64_t steps = prog.step_start[(size_t)t + 1] - prog.step_start[(size_t)t];
    if (deps == Py_None) {
      prog.dep_tb.insert(prog.dep_tb.end(), (size_t)steps, -1);
      prog.dep_step.insert(prog.dep_step.end(), (size_t)steps, -1);
    } else {
      each(deps, "a thread block's dependencies must be a list", [&](PyObject* d) {
        if (d == Py_None) {
          prog.dep_tb.push_back(-1);
          prog.dep_step.push_back(-1);
          return;
        }
        py::object pair = py::reinterpret_steal<py::object>(checked(PySequence_Fast(d, "a dependency must be a pair")));
        if (PySequence_Fast_GET_SIZE(pair.ptr()) != 2) throw py::value_error("a dependency must be a pair");
        const long long dt = as_int(PySequence_Fast_GET_ITEM(pair.ptr(), 0));
        const long long ds = as_int(PySequence_Fast_GET_ITEM(pair.ptr(), 1));
        if (dt < 0 || dt >= n) throw py::index_error("a dependency names thread block " + std::to_string(dt));
        prog.dep_tb.push_back((int32_t)dt);
        prog.dep_step.push_back((int32_t)ds);
      });
    }
    ++t;
  });
  each(tb_send, "tb_send must be a list", [&](PyObject* c) { prog.send_conn.push_back((int32_t)as_int(c)); });
  each(tb_recv, "tb_recv must be a list", [&](PyObject* c) { prog.recv_conn.push_back((int32_t)as_int(c)); });
  if (prog.counts.size() != prog.flags.size() || prog.dep_tb.size() != prog.flags.size() || t != n ||
      prog.send_conn.size() != (size_t)n || prog.recv_conn.size() != (size_t)n)
    throw py::value_error("the thread blocks' lists differ in length");
  for (int32_t c : prog.send_conn)
    if (c >= num_conns) throw py::index_error("a thread block sends on connection " + std::to_string(c));
  for (int32_t c : prog.recv_conn)
    if (c >= num_conns) throw py::index_error("a thread block receives from connection " + std::to_string(c));
  return prog;
}

// One run (engine.cpp): (tb_finish, stuck, rate_log, pieces) - stuck is None or (thread
// block, step, iteration) of the first that never finished; rate_log (thread block, start,
// end, rate) and pieces (tb, step, iteration, cause, ref, ready, compute, send, end) are
// None unless recording
py::tuple run_events_py(const EngineProgram& prog, int64_t iterations, double tile, int64_t most_chunks,
                        int64_t fifo_depth, double inv_reduce, double inv_copy, py::handle latency,
                        py::handle free_rate, py::handle shared_links, py::handle link_rate, bool record) {
  EngineSetup setup;
  setup.iterations = iterations;
  setup.tile = tile;
  setup.most_chunks = std::max<int64_t>(1, most_chunks);
  setup.fifo_depth = fifo_depth;
  setup.inv_reduce = inv_reduce;
  setup.inv_copy = inv_copy;
  setup.latency = doubles(latency, "latency must be a list");
  setup.free_rate = doubles(free_rate, "free_rate must be a list");
  setup.link_rate = doubles(link_rate, "link_rate must be a list");
  setup.record = record;
  const int64_t links = (int64_t)setup.link_rate.size();
  each(shared_links, "shared_links must be a list", [&](PyObject* ls) {
    if (ls != Py_None) {
      each(ls, "a connection's shared links must be a tuple", [&](PyObject* l) {
        const long long x = as_int(l);
        if (x < 0 || x >= links) throw py::index_error("link " + std::to_string(x) + " has no capacity");
        setup.shared_link.push_back((int32_t)x);
      });
    }
    setup.shared_start.push_back((int32_t)setup.shared_link.size());
  });
  const size_t nconn = (size_t)prog.num_conns;
  if (setup.latency.size() != nconn || setup.free_rate.size() != nconn || setup.shared_start.size() != nconn + 1)
    throw py::value_error("latency, free_rate and shared_links need one entry per connection");
  EngineOutcome out;
  {
    py::gil_scoped_release unlocked;
    run_events(prog, setup, out);
  }
  py::list finish(out.tb_finish.size());
  for (size_t i = 0; i < out.tb_finish.size(); ++i)
    PyList_SET_ITEM(finish.ptr(), (py::ssize_t)i, checked(PyFloat_FromDouble(out.tb_finish[i])));
  py::object stuck = py::none();
  if (out.stuck_tb >= 0) stuck = py::make_tuple(out.stuck_tb, out.stuck_step, out.stuck_iteration);
  if (!record) return py::make_tuple(finish, stuck, py::none(), py::none());
  static const char* causes[] = {"start", "prev", "dep", "data", "fifo"};
  py::list log(out.rate_log.size());
  for (size_t i = 0; i < out.rate_log.size(); ++i) {
    const RatePeriod& r = out.rate_log[i];
    PyList_SET_ITEM(log.ptr(), (py::ssize_t)i, py::make_tuple(r.tb, r.start, r.end, r.rate).release().ptr());
  }
  py::list pieces(out.pieces.size());
  for (size_t i = 0; i < out.pieces.size(); ++i) {
    const PieceRecord& r = out.pieces[i];
    py::object compute = r.has_compute ? py::object(py::make_tuple(r.compute0, r.compute1)) : py::object(py::none());
    py::object send = r.has_send ? py::object(py::make_tuple(r.send0, r.send1)) : py::object(py::none());
    PyList_SET_ITEM(pieces.ptr(), (py::ssize_t)i,
                    py::make_tuple(r.tb, r.step, r.iteration, causes[r.cause], r.ref, r.ready, compute, send, r.end)
                        .release().ptr());
  }
  return py::make_tuple(finish, stuck, log, pieces);
}

}  // namespace

}  // namespace sim

PYBIND11_MODULE(native, m) {
  m.doc() = "arborcc's simulator loops (C++): the event-driven run and the max-min fair share of links among flows";
  m.attr("RECEIVES") = (int)sim::RECEIVES;
  m.attr("SENDS") = (int)sim::SENDS;
  m.attr("REDUCES") = (int)sim::REDUCES;
  m.attr("COPIES") = (int)sim::COPIES;
  py::class_<sim::EngineProgram>(m, "EngineProgram",
                                 "A CompiledAlgorithm's thread blocks flattened for run_events (made once per program).")
      .def(py::init(&sim::engine_program), py::arg("tb_flags"), py::arg("tb_counts"), py::arg("tb_deps"),
           py::arg("tb_send"), py::arg("tb_recv"), py::arg("num_conns"))
      .def_property_readonly("num_tbs", &sim::EngineProgram::num_tbs);
  m.def("run_events", &sim::run_events_py, py::arg("program"), py::arg("iterations"), py::arg("tile"),
        py::arg("most_chunks"), py::arg("fifo_depth"), py::arg("inv_reduce"), py::arg("inv_copy"),
        py::arg("latency"), py::arg("free_rate"), py::arg("shared_links"), py::arg("link_rate"), py::arg("record"),
        "One event-driven run of ``iterations`` iterations (arborcc.sim.engine): (tb_finish, stuck, rate_log, "
        "pieces); stuck is None or (thread block, step, iteration) of the first thread block that never "
        "finished; rate_log and pieces are None unless ``record``.");
  m.def("max_min_rates", &sim::max_min_rates_py, py::arg("flows"), py::arg("capacity"),
        "Progressive filling: the max-min fair rate of every Flow in ``flows`` (one per flow, in "
        "order) on links of the given capacities (indexed by link); no flow may list a link twice.");
}
