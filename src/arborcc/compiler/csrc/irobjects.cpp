// The IR's Python objects of a schedule (arborcc.compiler.emit.build_algorithm).

#include "irobjects.hpp"

#include <algorithm>
#include <stdexcept>

#include "instructions.hpp"

namespace compiler {

namespace {

// An instance of a dataclass with its fields set, as its generated __init__ sets them
// (object.__setattr__ per field, in field order); steals the references of `values`.
class Maker {
 public:
  Maker(const py::object& cls, const py::tuple& fields, size_t expected) : type_((PyTypeObject*)cls.ptr()), fields_(fields) {
    if (!PyType_Check(cls.ptr()) || fields.size() != expected)
      throw std::invalid_argument("build_threadblocks: unexpected IR class or fields");
  }

  PyObject* make(std::initializer_list<PyObject*> values) const {
    PyObject* obj = type_->tp_new(type_, empty_.ptr(), nullptr);
    size_t k = 0;
    bool ok = obj != nullptr;
    for (PyObject* v : values) {
      if (ok && (v == nullptr || PyObject_GenericSetAttr(obj, PyTuple_GET_ITEM(fields_.ptr(), (Py_ssize_t)k), v) < 0)) ok = false;
      Py_XDECREF(v);
      ++k;
    }
    if (!ok) {
      Py_XDECREF(obj);
      throw py::error_already_set();
    }
    return obj;
  }

 private:
  PyTypeObject* type_;
  py::tuple fields_, empty_;
};

PyObject* new_ref(PyObject* o) {
  Py_INCREF(o);
  return o;
}

}  // namespace

py::list build_threadblocks(const Schedule& s, const ThreadBlocks& a, int64_t instances, const Ints& shifts,
                            const IrClasses& cls) {
  const Maker step(cls.step, cls.step_fields, 8), tbm(cls.threadblock, cls.threadblock_fields, 5),
      dep(cls.dependency, cls.dependency_fields, 2);
  const int64_t n = instances;
  const int64_t width = a.ch.empty() ? 1 : *std::max_element(a.ch.begin(), a.ch.end()) + 1;
  const int64_t zero[3] = {0, 0, 0};
  auto shift = [&](int64_t r, int64_t i) { return shifts.empty() ? zero : &shifts[(size_t)((r * n + i) * 3)]; };
  PyObject* none = Py_None;
  PyObject* ops = cls.ops.ptr();
  PyObject* bufs = cls.buffers.ptr();
  if (cls.ops.size() != step::NOP + 1 || cls.buffers.size() != 3)
    throw std::invalid_argument("build_threadblocks: ops or buffers");
  py::list ranks;
  for (size_t r = 0; r < a.of_rank.size(); ++r) {
    py::list out;
    for (int64_t tb : a.of_rank[r]) {
      const size_t t = (size_t)tb;
      const std::vector<StepRow>& rows = s.of_tb[t];
      for (int64_t i = 0; i < n; ++i) {
        const int64_t* local = shift((int64_t)r, i);
        const int64_t* send_shift = a.send[t] >= 0 ? shift(a.send[t], i) : local;
        const int64_t* recv_shift = a.recv[t] >= 0 ? shift(a.recv[t], i) : local;
        PyObject* steps = PyList_New((Py_ssize_t)rows.size());
        if (!steps) throw py::error_already_set();
        py::object keep = py::reinterpret_steal<py::object>(steps);
        for (size_t k = 0; k < rows.size(); ++k) {
          const StepRow& x = rows[k];
          PyObject* d = x.dep_tb >= 0 ? dep.make({PyLong_FromLongLong(x.dep_tb * n + i), PyLong_FromLongLong(x.dep_step)})
                                      : new_ref(none);
          PyObject* has = new_ref(x.has_dep ? Py_True : Py_False);
          PyObject* obj;
          if (x.op == step::NOP) {
            obj = step.make({new_ref(PyTuple_GET_ITEM(ops, step::NOP)), new_ref(none), PyLong_FromLongLong(-1),
                             new_ref(none), PyLong_FromLongLong(-1), PyLong_FromLongLong(0), d, has});
          } else {
            const int64_t* s_sh = x.op == step::RECV ? recv_shift : local;  // a receive names the remote source
            const int64_t* d_sh = x.op == step::SEND ? send_shift : local;  // a send names the remote destination
            obj = step.make({new_ref(PyTuple_GET_ITEM(ops, (Py_ssize_t)x.op)), new_ref(PyTuple_GET_ITEM(bufs, (Py_ssize_t)x.sbuf)),
                             PyLong_FromLongLong(x.soff + s_sh[x.sbuf]), new_ref(PyTuple_GET_ITEM(bufs, (Py_ssize_t)x.dbuf)),
                             PyLong_FromLongLong(x.doff + d_sh[x.dbuf]), PyLong_FromLongLong(x.cnt), d, has});
          }
          PyList_SET_ITEM(steps, (Py_ssize_t)k, obj);
        }
        out.append(py::reinterpret_steal<py::object>(
            tbm.make({PyLong_FromLongLong(a.id[t] * n + i), PyLong_FromLongLong(a.send[t]), PyLong_FromLongLong(a.recv[t]),
                      PyLong_FromLongLong(a.ch[t] + width * i), keep.release().ptr()})));
      }
    }
    ranks.append(out);
  }
  return ranks;
}

}  // namespace compiler
