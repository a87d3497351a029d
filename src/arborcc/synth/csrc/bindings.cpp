// The Python module arborcc.synth.native (pybind11): the tree packing's inner oracle,
// the minimum spanning arborescence (arborescence.cpp).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "arborescence.hpp"

namespace py = pybind11;

namespace synth {

namespace {

// cost[u][v] from nested lists of numbers or a 2-d array
Costs to_costs(py::handle obj) {
  Costs out;
  if (py::isinstance<py::array>(obj)) {
    auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(obj);
    if (!a || a.ndim() != 2) throw py::type_error("the costs must be a square matrix");
    const size_t rows = (size_t)a.shape(0), cols = (size_t)a.shape(1);
    out.assign(rows, std::vector<double>(cols));
    for (size_t u = 0; u < rows; ++u)
      for (size_t v = 0; v < cols; ++v) out[u][v] = a.at((py::ssize_t)u, (py::ssize_t)v);
    return out;
  }
  for (py::handle row : obj) {
    std::vector<double> r;
    for (py::handle x : row) {
      const double c = PyFloat_AsDouble(x.ptr());
      if (c == -1.0 && PyErr_Occurred()) throw py::error_already_set();
      r.push_back(c);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

}  // namespace synth

PYBIND11_MODULE(native, m) {
  using namespace synth;
  m.doc() = "arborcc's tree packing oracle (C++): the minimum spanning arborescence";
  m.def(
      "min_arborescence",
      [](py::handle cost, int64_t root) -> py::object {
        int64_t unreachable = -1;
        std::vector<int64_t> par = min_arborescence(to_costs(cost), root, unreachable);
        if (par.empty()) return py::int_(unreachable);
        py::list out(par.size());
        for (size_t v = 0; v < par.size(); ++v) out[v] = py::int_(par[v]);
        return std::move(out);
      },
      "parent of every vertex (root: -1), or the number of a vertex that cannot be reached");
}
