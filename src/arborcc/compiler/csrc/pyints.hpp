// Moving columns of integers between Python and the compiler's native passes: a list of
// ints (the instruction table's columns) or a 1-d integer array in, a list out. One call
// per column, no per-element pybind11 casts.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

namespace compiler {

namespace py = pybind11;
using Ints = std::vector<int64_t>;

// The integers of a list (fast path), of a contiguous int64 array, or of any sequence.
inline Ints to_ints(py::handle obj) {
  PyObject* p = obj.ptr();
  if (PyList_Check(p)) {
    Py_ssize_t n = PyList_GET_SIZE(p);
    Ints out((size_t)n);
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* item = PyList_GET_ITEM(p, i);
      long long v = PyLong_AsLongLong(item);
      if (v == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {  // a bool or a numpy integer
          PyErr_Clear();
          v = py::cast<int64_t>(py::handle(item));
        } else {
          throw py::error_already_set();
        }
      }
      out[(size_t)i] = (int64_t)v;
    }
    return out;
  }
  auto arr = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(obj);
  if (!arr) return py::cast<Ints>(obj);
  return Ints(arr.data(), arr.data() + arr.size());
}

// A list of Python ints.
inline py::list to_list(const int64_t* data, size_t n) {
  PyObject* out = PyList_New((Py_ssize_t)n);
  if (!out) throw py::error_already_set();
  for (size_t i = 0; i < n; ++i) {
    PyObject* v = PyLong_FromLongLong(data[i]);
    if (!v) {
      Py_DECREF(out);
      throw py::error_already_set();
    }
    PyList_SET_ITEM(out, (Py_ssize_t)i, v);
  }
  return py::reinterpret_steal<py::list>(out);
}

inline py::list to_list(const Ints& v) { return to_list(v.data(), v.size()); }

// A list of Python bools.
inline py::list to_bool_list(const Ints& v) {
  PyObject* out = PyList_New((Py_ssize_t)v.size());
  if (!out) throw py::error_already_set();
  for (size_t i = 0; i < v.size(); ++i) {
    PyObject* b = v[i] ? Py_True : Py_False;
    Py_INCREF(b);
    PyList_SET_ITEM(out, (Py_ssize_t)i, b);
  }
  return py::reinterpret_steal<py::list>(out);
}

// flags[i] for every int i of an iterable (a set of instructions or buffers), size n
inline std::vector<char> to_flags(py::handle iterable, size_t n) {
  std::vector<char> flags(n, 0);
  for (py::handle x : iterable) {
    const int64_t i = py::cast<int64_t>(x);
    if (i >= 0 && (size_t)i < n) flags[(size_t)i] = 1;
  }
  return flags;
}

// Compressed rows: row i is flat[start[i] .. start[i + 1]).
struct Rows {
  Ints start, flat;
  size_t size() const { return start.empty() ? 0 : start.size() - 1; }
  const int64_t* begin(size_t i) const { return flat.data() + start[i]; }
  const int64_t* end(size_t i) const { return flat.data() + start[i + 1]; }
};

}  // namespace compiler
