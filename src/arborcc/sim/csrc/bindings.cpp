// The Python module arborcc.sim.native (pybind11): the simulator's max-min fair share
// (fairshare.cpp) over arborcc.sim.fairshare's Flow objects, and the walk that finds the
// component of flows a changed link reaches, in the order the Python walk it replaced
// visited them (the order of Python's own sets), so the rates' ties fall the same way.

#include <pybind11/pybind11.h>

#include <cmath>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

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

// the names of Flow's attributes read here, made once
struct FlowNames {
  py::str links{"links"}, cap{"cap"}, rate{"rate"};
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
    const long long l = PyLong_AsLongLong(obj);
    if (l == -1 && PyErr_Occurred()) throw py::error_already_set();
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
  // the flow's links and cap; each link it is the first to cross goes to new_link(index, link)
  template <class NewLink>
  void add(PyObject* flow, NewLink&& new_link) {
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
        new_link(l, item);
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
  void add(PyObject* flow) {
    add(flow, [](int64_t, PyObject*) {});
  }
  // every flow crosses the same one link
  bool one_link() const { return global_.size() == 1 && flows.link.size() == flows.cap.size(); }

  LinkFlows flows;

 private:
  const Links& links_;
  std::vector<int64_t> global_;  //: the links in order of first appearance
};

// The flow keys met so far in one walk: a flag per key for the small keys the engine
// uses (its thread blocks), a hash set for any other; cleared when the walk ends.
class KeysMet {
 public:
  ~KeysMet() {
    for (long long k : small_) flags()[(size_t)k] = 0;
  }
  // true the first time a key is met
  bool first(long long k) {
    if (k < 0 || k >= SMALL) return other_.insert(k).second;
    std::vector<char>& met = flags();
    if ((size_t)k >= met.size()) met.resize((size_t)k + 1, 0);
    if (met[(size_t)k]) return false;
    met[(size_t)k] = 1;
    small_.push_back(k);
    return true;
  }

 private:
  static constexpr long long SMALL = 1 << 22;
  static std::vector<char>& flags() {
    thread_local std::vector<char> met;
    return met;
  }
  std::vector<long long> small_;
  std::unordered_set<long long> other_;
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

// The flows connected to `link` through shared links (on_link: link -> set of flow keys,
// flows: key -> Flow), walked as FairShare's Python walk did: links from a stack, each
// link's flows in its set's order, a flow's links in its order. Their links go into
// `seen`. Returns (flow, rate) for every flow whose rate differs from its current one, in
// the walk's order.
py::list settle_component(py::handle link, py::dict on_link, py::dict flows, py::handle capacity, py::set seen) {
  const Links links(capacity);
  const int64_t start = links.index(link.ptr());
  FlowReader reader(links);  // numbers the links as the walk first meets them in the flows
  std::vector<PyObject*> component;  // borrowed from `flows`, which nothing changes during the call
  std::vector<py::object> walked;  // the links met, in order
  KeysMet keys_met;
  std::vector<py::object> todo{py::reinterpret_borrow<py::object>(link)};
  const auto met_link = [&](int64_t l, PyObject* obj) {
    walked.push_back(py::reinterpret_borrow<py::object>(obj));
    if (l != start) todo.push_back(walked.back());  // the start link is walked first
  };
  while (!todo.empty()) {
    const py::object l = std::move(todo.back());
    todo.pop_back();
    PyObject* on = PyDict_GetItemWithError(on_link.ptr(), l.ptr());
    if (on == nullptr) {
      if (PyErr_Occurred()) throw py::error_already_set();
      continue;
    }
    py::object keys = py::reinterpret_steal<py::object>(checked(PyObject_GetIter(on)));
    while (PyObject* raw = PyIter_Next(keys.ptr())) {
      const py::object key = py::reinterpret_steal<py::object>(raw);
      const long long k = PyLong_AsLongLong(raw);
      if (k == -1 && PyErr_Occurred()) throw py::error_already_set();
      if (!keys_met.first(k)) continue;
      PyObject* flow = PyDict_GetItemWithError(flows.ptr(), raw);
      if (flow == nullptr) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, raw);
        throw py::error_already_set();
      }
      component.push_back(flow);
      reader.add(flow, met_link);
    }
    if (PyErr_Occurred()) throw py::error_already_set();
  }
  py::list changed;
  if (component.empty()) return changed;
  for (const py::object& m : walked)
    if (PySet_Add(seen.ptr(), m.ptr()) != 0) throw py::error_already_set();
  std::vector<double> rate;
  if (reader.one_link())
    one_link_rates(reader.flows.cap, reader.flows.capacity[0], rate);
  else
    max_min_rates(reader.flows, rate);
  for (size_t i = 0; i < component.size(); ++i) {
    PyObject* flow = component[i];
    const double now = as_double(py::reinterpret_steal<py::object>(checked(PyObject_GetAttr(flow, names().rate.ptr()))).ptr());
    if (rate[i] != now) changed.append(py::make_tuple(py::reinterpret_borrow<py::object>(flow), rate[i]));
  }
  return changed;
}

}  // namespace

}  // namespace sim

PYBIND11_MODULE(native, m) {
  m.doc() = "arborcc's simulator loops (C++): the max-min fair share of links among flows";
  m.def("max_min_rates", &sim::max_min_rates_py, py::arg("flows"), py::arg("capacity"),
        "Progressive filling: the max-min fair rate of every Flow in ``flows`` (one per flow, in "
        "order) on links of the given capacities (indexed by link); no flow may list a link twice.");
  m.def("settle_component", &sim::settle_component, py::arg("link"), py::arg("on_link"), py::arg("flows"),
        py::arg("capacity"), py::arg("seen"),
        "The component of flows ``link`` reaches through shared links (``on_link``: link -> set of "
        "flow keys; ``flows``: key -> Flow), walked in FairShare's order, its links added to ``seen``; "
        "its fair rates (one link's rule when every flow crosses that link alone, else progressive "
        "filling); (flow, rate) for each flow whose rate changed, in the walk's order.");
}
