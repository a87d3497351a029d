// The Python module arborcc.synth.native (pybind11): the tree packing's pricing oracle,
// the minimum spanning arborescence (arborescence.cpp) and the cheapest routes and
// trees over relays (routes.cpp); chunk rounding's greedy step (rounding.cpp); orbits
// from a group's generators (orbits.cpp).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "arborescence.hpp"
#include "orbits.hpp"
#include "rounding.hpp"
#include "routes.hpp"

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

std::vector<int64_t> to_ints(py::handle obj) {
  auto a = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(obj);
  if (!a || a.ndim() != 1) throw py::type_error("expected a 1-d array of integers");
  return std::vector<int64_t>(a.data(), a.data() + a.shape(0));
}

// a 1-d float array of exactly `size` entries (converted if needed)
py::array_t<double, py::array::c_style | py::array::forcecast> to_doubles(py::handle obj, int64_t size) {
  auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(obj);
  if (!a || a.ndim() != 1 || a.shape(0) != size) throw py::value_error("expected one number per arc");
  return a;
}

// (root, hops, load): hops as (parent, child, (arc, ...)), load as a float array
py::object tree_to_python(CheapestTree& t) {
  py::tuple hops(t.hops.size());
  for (size_t i = 0; i < t.hops.size(); ++i) {
    const Hop& h = t.hops[i];
    py::tuple arcs(h.arcs.size());
    for (size_t j = 0; j < h.arcs.size(); ++j) arcs[j] = py::int_(h.arcs[j]);
    hops[i] = py::make_tuple(h.parent, h.child, std::move(arcs));
  }
  py::array_t<double> load((py::ssize_t)t.load.size());
  std::copy(t.load.begin(), t.load.end(), load.mutable_data());
  return py::make_tuple(t.root, std::move(hops), std::move(load));
}

// the trees, or (why, root) when some root has none
py::object trees_to_python(std::vector<CheapestTree>& trees, TreeFailure failure, int64_t root) {
  if (failure == TreeFailure::reaches_no_rank) return py::make_tuple("reaches no rank", root);
  if (failure == TreeFailure::some_unreached) return py::make_tuple("some rank unreached", root);
  py::list out(trees.size());
  for (size_t i = 0; i < trees.size(); ++i) out[i] = tree_to_python(trees[i]);
  return std::move(out);
}

}  // namespace

}  // namespace synth

PYBIND11_MODULE(native, m) {
  using namespace synth;
  m.doc() = "arborcc's synthesis loops (C++): minimum spanning arborescences, cheapest routes and trees, the rounding's chunk hand-out, automorphism orbit labels";
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
  m.def(
      "hand_out_chunks",
      [](py::handle members, py::handle starts, py::handle leftover, py::handle weight, py::handle step,
         py::array_t<int64_t> counts, py::array_t<double> util) {
        auto w = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(weight);
        auto s = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(step);
        if (!w || !s || s.ndim() != 2) throw py::type_error("weight must be 1-d and step 2-d numbers");
        const int64_t trees = s.shape(0), links = s.shape(1);
        if (w.ndim() != 1 || w.shape(0) != trees || counts.ndim() != 1 || counts.shape(0) != trees ||
            util.ndim() != 1 || util.shape(0) != links)
          throw py::value_error("weight, counts (one per tree) and util (one per link) do not fit step");
        if (!(counts.flags() & py::array::c_style) || !(util.flags() & py::array::c_style))
          throw py::value_error("counts and util must be contiguous (they are updated in place)");
        const std::vector<int64_t> m_ = to_ints(members), st = to_ints(starts), left = to_ints(leftover);
        if (st.size() != left.size() + 1 || st.empty() || st.front() != 0 || st.back() != (int64_t)m_.size())
          throw py::value_error("starts must bound every group in members");
        for (int64_t t : m_)
          if (t < 0 || t >= trees) throw py::value_error("a group member is not a tree");
        hand_out_chunks(m_, st, left, w.data(), s.data(), links, counts.mutable_data(), util.mutable_data());
      },
      "hand each group's leftover chunks to the trees raising the worst link utilisation least "
      "(counts and util updated in place)");
  m.def(
      "orbit_labels",
      [](int64_t size, py::handle permutations) {
        OrbitPartition orbits(size);
        std::vector<int64_t> perm;
        for (py::handle p : permutations) {
          perm.clear();
          if (PyList_Check(p.ptr())) {  // igraph's generators: lists of ints (the fast path)
            const Py_ssize_t n = PyList_GET_SIZE(p.ptr());
            perm.reserve((size_t)n);
            for (Py_ssize_t i = 0; i < n; ++i) {
              const long long v = PyLong_AsLongLong(PyList_GET_ITEM(p.ptr(), i));
              if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
              perm.push_back(v);
            }
          } else {
            perm = to_ints(p);
          }
          orbits.join_permutation(perm);
        }
        std::vector<int64_t> labels = orbits.labels();
        py::array_t<int64_t> out((py::ssize_t)labels.size());
        std::copy(labels.begin(), labels.end(), out.mutable_data());
        return out;
      },
      "the smallest member of each point's orbit under the group the permutations generate");
  py::class_<RouteGraph>(m, "RouteGraph",
                         "a graph split so that ranks receive but do not forward (routes.hpp)")
      .def(py::init([](int64_t size, int64_t n, py::handle rank_nodes, py::handle src, py::handle head) {
             return new RouteGraph(size, n, to_ints(rank_nodes), to_ints(src), to_ints(head));
           }),
           py::arg("size"), py::arg("n"), py::arg("rank_nodes"), py::arg("src"), py::arg("head"))
      .def(
          "routes",
          [](RouteGraph& g, py::handle length, double tiny) {
            auto l = to_doubles(length, g.arcs());
            std::vector<double> dist;
            std::vector<int32_t> pred;
            g.routes(l.data(), tiny, dist, pred);
            const py::ssize_t N = g.ranks(), size = g.nodes();
            py::array_t<double> D({N, N});
            std::copy(dist.begin(), dist.end(), D.mutable_data());
            py::array_t<int32_t> P({N, size});
            std::copy(pred.begin(), pred.end(), P.mutable_data());
            return py::make_tuple(std::move(D), std::move(P));
          },
          "(D, pred): route costs between ranks under lengths + tiny, predecessors from each rank")
      .def(
          "cheapest_trees",
          [](RouteGraph& g, py::handle length, double tiny, py::handle roots) {
            auto l = to_doubles(length, g.arcs());
            TreeFailure failure = TreeFailure::none;
            int64_t root = -1;
            auto trees = g.cheapest_trees(l.data(), tiny, to_ints(roots), failure, root);
            return trees_to_python(trees, failure, root);
          },
          "[(root, hops, load)] of each root, or (why, root)")
      .def(
          "seed_trees",
          [](RouteGraph& g, py::handle cap, double tiny, py::handle roots, int64_t per_root) {
            auto c = to_doubles(cap, g.arcs());
            TreeFailure failure = TreeFailure::none;
            int64_t root = -1;
            auto trees = g.seed_trees(c.data(), tiny, to_ints(roots), per_root, failure, root);
            return trees_to_python(trees, failure, root);
          },
          "per_root rounds of cheapest trees under lengths growing on used links, or (why, root)");
}
