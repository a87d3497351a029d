// The common case of Program.trace_copies and Program.trace_reduces (lang/program.py),
// operation by operation in the same order and with the same checks: ranks, indices,
// count and channel are plain ints in range; both buffers are the input or the output
// (after in-place aliasing by a simple rule); the operation does not overlap itself;
// every slot it reads holds something (a copy reads its source, a reduce its source and
// its destination) and both ranges lie within their buffers; the topology joins the two
// ranks; and the operations limit is not reached. Such an operation is recorded as
// record_operation does - the same tuple appended, the same slots marked with its
// number. The first one that is not such a case stops the loop: Python does it as
// chunk(...).copy(...) or chunk(dst...).reduce(chunk(src...)) would, which performs it
// or raises the DSL's error for it, then resumes here.

#include "trace.hpp"

#include <climits>

namespace lang {

namespace {

// indices and counts above this lie beyond every buffer (lists hold fewer items)
constexpr long long BEYOND_BUFFERS = 1LL << 48;

// index + rank * shift, false when it leaves [0, BEYOND_BUFFERS] (beyond every buffer)
bool shifted(long long& index, long long rank, long long shift) {
  long long by;
  if (__builtin_mul_overflow(rank, shift, &by) || __builtin_add_overflow(index, by, &index)) return false;
  return 0 <= index && index <= BEYOND_BUFFERS;
}

// An exact int (not a bool, not a subclass) that fits in a long long.
bool plain_int(PyObject* o, long long& v) {
  if (!PyLong_CheckExact(o)) return false;
  int overflow = 0;
  v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow) {
    v = overflow > 0 ? LLONG_MAX : LLONG_MIN;  // compares as Python's big int would
  }
  return true;
}

// Item i of a list as Python indexing it would (IndexError past the end).
PyObject* list_item(PyObject* list, long long i) {
  if (!PyList_Check(list)) throw py::type_error("a program's slot records are lists");
  if (i < 0 || i >= PyList_GET_SIZE(list)) {
    PyErr_SetString(PyExc_IndexError, "list index out of range");
    throw py::error_already_set();
  }
  return PyList_GET_ITEM(list, (Py_ssize_t)i);
}

// The slot records of (rank, code): all_seqs[rank][code].
PyObject* slot_list(PyObject* all_seqs, long long rank, int code) {
  PyObject* l = list_item(list_item(all_seqs, rank), code);
  if (!PyList_Check(l)) throw py::type_error("a buffer's slot records are a list");
  return l;
}

// The smallest record of slots [s, s + n) (they exist), or false if one is not a plain int.
bool min_record(PyObject* seqs, long long s, long long n, long long& low) {
  low = LLONG_MAX;
  for (long long k = s; k < s + n; ++k) {
    long long v;
    if (!plain_int(PyList_GET_ITEM(seqs, (Py_ssize_t)k), v)) return false;
    if (v < low) low = v;
  }
  return true;
}


// One operation given by its eight fields (borrowed; the caller holds them): traced and
// true, or false when it is not the common case (nothing done).
bool trace_one(TraceTarget& t, PyObject* const f[8]) {
  PyObject* all_seqs = t.seqs.ptr();
  PyObject* ops = t.ops.ptr();
  const long long nr = t.num_ranks;
  long long sr, s, dr, d, n, ch;
  if (!(plain_int(f[0], sr) && plain_int(f[3], dr) && plain_int(f[2], s) && plain_int(f[5], d) &&
        plain_int(f[6], n) && plain_int(f[7], ch)))
    return false;
  if (!(0 <= sr && sr < nr && 0 <= dr && dr < nr && s >= 0 && d >= 0 && n >= 1 && ch >= -1)) return false;
  // beyond any buffer (Python finds the range too long and does it as written)
  if (s > BEYOND_BUFFERS || d > BEYOND_BUFFERS || n > BEYOND_BUFFERS) return false;
  PyObject* sbuf = f[1];
  PyObject* dbuf = f[4];
  bool s_moved = false, d_moved = false;
  if (sbuf == t.named.ptr()) {  // in-place aliasing, as chunk() and copy() apply it
    sbuf = t.meant.ptr();
    if (!shifted(s, sr, t.shift)) return false;
    s_moved = true;
  }
  if (dbuf == t.named.ptr()) {  // a reduce's destination is a chunk of its own rank
    dbuf = t.meant.ptr();
    if (!shifted(d, t.by_source && !t.reduce ? sr : dr, t.shift)) return false;
    d_moved = true;
  }
  int scode = sbuf == t.input.ptr() ? 0 : sbuf == t.output.ptr() ? 1 : -1;
  int dcode = dbuf == t.input.ptr() ? 0 : dbuf == t.output.ptr() ? 1 : -1;
  if (scode < 0 || dcode < 0 || (dr == sr && scode == dcode && d < s + n && s < d + n)) return false;
  PyObject* src_seqs = slot_list(all_seqs, sr, scode);
  PyObject* dst_seqs = slot_list(all_seqs, dr, dcode);
  if (s + n > PyList_GET_SIZE(src_seqs) || d + n > PyList_GET_SIZE(dst_seqs)) return false;
  long long low;
  if (!min_record(src_seqs, s, n, low) || low < 0) return false;
  if (t.reduce && (!min_record(dst_seqs, d, n, low) || low < 0)) return false;
  if (!t.why_not.is_none()) {
    auto [known, fresh] = t.refused.try_emplace(sr * nr + dr, false);
    if (fresh) {  // the first copy between these ranks asks the topology
      py::object reason = t.why_not(py::reinterpret_borrow<py::object>(f[0]), py::reinterpret_borrow<py::object>(f[3]));
      known->second = !reason.is_none();
      if (known->second) return false;
      dst_seqs = slot_list(all_seqs, dr, dcode);  // Python ran: look the lists up again
      if (d + n > PyList_GET_SIZE(dst_seqs)) return false;
      if (t.reduce && (!min_record(dst_seqs, d, n, low) || low < 0)) return false;
    } else if (known->second) {
      return false;
    }
  }
  if (PyList_GET_SIZE(ops) >= t.max_ops) return false;  // Python raises the operations limit's error
  py::tuple op(13);
  PyObject* o = op.ptr();
  auto put = [o](int k, PyObject* v) { Py_INCREF(v); PyTuple_SET_ITEM(o, k, v); };
  auto put_new = [o](int k, long long v) {
    PyObject* x = PyLong_FromLongLong(v);
    if (!x) throw py::error_already_set();
    PyTuple_SET_ITEM(o, k, x);
  };
  PyObject* minus_one = PyLong_FromLong(-1);
  put(0, t.kind.ptr());
  put(1, f[0]);
  put_new(2, scode);
  if (s_moved) put_new(3, s); else put(3, f[2]);
  put(4, f[3]);
  put_new(5, dcode);
  if (d_moved) put_new(6, d); else put(6, f[5]);
  put(7, f[6]);
  put(8, minus_one);
  put(9, minus_one);
  Py_DECREF(minus_one);
  put(10, f[7]);
  put(11, t.lanes.ptr());
  put(12, t.where.ptr());
  if (PyList_Append(ops, o) < 0) throw py::error_already_set();
  PyObject* seq = PyLong_FromSsize_t(PyList_GET_SIZE(ops));
  if (!seq) throw py::error_already_set();
  for (long long k = d; k < d + n; ++k) {
    Py_INCREF(seq);
    PyList_SetItem(dst_seqs, (Py_ssize_t)k, seq);  // steals the reference, drops the old record
  }
  Py_DECREF(seq);
  return true;
}

}  // namespace

Py_ssize_t trace_operations(TraceTarget& t, py::handle copies_h, Py_ssize_t start) {
  PyObject* copies = copies_h.ptr();
  if (!PyList_Check(copies) && !PyTuple_Check(copies)) throw py::type_error("tracing needs a list or tuple");
  for (Py_ssize_t i = start; i < PySequence_Fast_GET_SIZE(copies); ++i) {
    py::object copy = py::reinterpret_borrow<py::object>(PySequence_Fast_GET_ITEM(copies, i));
    if (PyList_Check(copy.ptr())) {  // a tuple of its items: Python code run below cannot change them
      copy = py::reinterpret_steal<py::object>(PySequence_Tuple(copy.ptr()));
      if (!copy) throw py::error_already_set();
    }
    PyObject* c = copy.ptr();
    if (!PyTuple_Check(c) || PyTuple_GET_SIZE(c) != 8) return i;
    PyObject* f[8];
    for (int k = 0; k < 8; ++k) f[k] = PyTuple_GET_ITEM(c, k);
    if (!trace_one(t, f)) return i;
  }
  return PySequence_Fast_GET_SIZE(copies);
}

std::pair<Py_ssize_t, Py_ssize_t> trace_broadcasts(TraceTarget& t, py::handle blocks_h, Py_ssize_t start,
                                                   Py_ssize_t first_hop) {
  PyObject* blocks = blocks_h.ptr();
  if (!PyList_Check(blocks) && !PyTuple_Check(blocks)) throw py::type_error("trace_broadcasts needs a list or tuple");
  for (Py_ssize_t i = start; i < PySequence_Fast_GET_SIZE(blocks); ++i, first_hop = 0) {
    py::object block = py::reinterpret_borrow<py::object>(PySequence_Fast_GET_ITEM(blocks, i));
    if (!PyTuple_Check(block.ptr()) || PyTuple_GET_SIZE(block.ptr()) != 4) return {i, first_hop};
    PyObject* hops = PyTuple_GET_ITEM(block.ptr(), 0);
    if (!PyTuple_Check(hops) && !PyList_Check(hops)) return {i, first_hop};
    py::object held_hops = py::reinterpret_borrow<py::object>(hops);
    PyObject* buffer = PyTuple_GET_ITEM(block.ptr(), 1);
    PyObject* index = PyTuple_GET_ITEM(block.ptr(), 2);
    PyObject* size = PyTuple_GET_ITEM(block.ptr(), 3);
    for (Py_ssize_t j = first_hop; j < PySequence_Fast_GET_SIZE(hops); ++j) {
      py::object hop = py::reinterpret_borrow<py::object>(PySequence_Fast_GET_ITEM(hops, j));
      if (!PyTuple_Check(hop.ptr()) || PyTuple_GET_SIZE(hop.ptr()) != 3) return {i, j};
      PyObject* h = hop.ptr();
      PyObject* const f[8] = {PyTuple_GET_ITEM(h, 0), buffer, index, PyTuple_GET_ITEM(h, 1),
                              buffer, index, size, PyTuple_GET_ITEM(h, 2)};
      if (!trace_one(t, f)) return {i, j};
    }
  }
  return {PySequence_Fast_GET_SIZE(blocks), 0};
}

}  // namespace lang
