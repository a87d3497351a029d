// encode_program (program.hpp): one pass over the Python objects, attribute reads through
// the C API with interned names.

#include "program.hpp"

#include <climits>
#include <map>
#include <string>
#include <tuple>

namespace verify {

namespace {

PyObject* name(const char* s) { return PyUnicode_InternFromString(s); }

struct Names {
  PyObject *rank = name("rank"), *threadblocks = name("threadblocks"), *id = name("id"), *send = name("send"),
           *recv = name("recv"), *channel = name("channel"), *steps = name("steps"), *op = name("op"),
           *src_buf = name("src_buf"), *src_off = name("src_off"), *dst_buf = name("dst_buf"),
           *dst_off = name("dst_off"), *count = name("count"), *dep = name("dep"), *has_dep = name("has_dep"),
           *tb = name("tb"), *step = name("step"), *input_chunks = name("input_chunks"),
           *output_chunks = name("output_chunks"), *scratch_chunks = name("scratch_chunks");
};

py::object attr(py::handle obj, PyObject* key) {
  PyObject* v = PyObject_GetAttr(obj.ptr(), key);
  if (!v) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(v);
}

// A number of 32 bits; one outside is clamped and `clamped` set (ValueError without it).
long int_attr(py::handle obj, PyObject* key, bool* clamped = nullptr) {
  PyObject* v = PyObject_GetAttr(obj.ptr(), key);
  if (!v) throw py::error_already_set();
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
  Py_DECREF(v);
  if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (!overflow && x >= INT32_MIN && x <= INT32_MAX) return (long)x;
  if (!clamped) throw py::value_error("a number outside 32 bits");
  *clamped = true;
  return overflow < 0 || x < 0 ? INT32_MIN : INT32_MAX;
}

// A number clamped to [lo, hi] (peers: anything outside the ranks is not a rank).
long long clamped_attr(py::handle obj, PyObject* key, long long lo, long long hi) {
  py::object v = attr(obj, key);
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow) return overflow > 0 ? hi : lo;
  return x < lo ? lo : x > hi ? hi : x;
}

}  // namespace

Program encode_program(py::handle ranks, py::handle ops, py::handle buffers) {
  static const Names N;
  std::vector<PyObject*> op_members, buffer_members;
  std::vector<uint8_t> op_flags;
  for (py::handle pair : ops) {
    py::tuple t = py::reinterpret_borrow<py::tuple>(pair);
    op_members.push_back(t[0].ptr());
    py::tuple info = py::reinterpret_borrow<py::tuple>(t[1]);
    uint8_t f = 0;
    const uint8_t bits[5] = {SENDS, RECEIVES, READS_SRC, READS_DST, WRITES_DST};
    for (int k = 0; k < 5; ++k)
      if (PyObject_IsTrue(info[k].ptr())) f |= bits[k];
    op_flags.push_back(f);
  }
  for (py::handle b : buffers) buffer_members.push_back(b.ptr());
  auto buffer_code = [&](PyObject* b) -> uint8_t {
    for (size_t k = 0; k < buffer_members.size(); ++k)
      if (buffer_members[k] == b) return (uint8_t)k;
    return NO_BUFFER;
  };

  Program p;
  p.tb_base.push_back(0);
  std::map<std::tuple<int, int, int>, int> conn_index;
  auto connection = [&](int src, int dst, int ch) {
    auto [it, fresh] = conn_index.emplace(std::make_tuple(src, dst, ch), (int)p.conns.size());
    if (fresh) p.conns.push_back({src, dst, ch, -1, -1});
    return it->second;
  };
  std::vector<py::object> tb_objects;
  std::vector<py::dict> ids_by_rank;  // per rank position: thread block id -> g (the last of a repeated id)
  py::dict channel_codes;
  py::int_ zero(0);
  for (py::handle prog : ranks) {
    int r = (int)int_attr(prog, N.rank);
    p.rank_first_tb.push_back(p.num_tbs());
    p.rank_id.push_back(r);
    for (PyObject* size : {N.input_chunks, N.output_chunks, N.scratch_chunks}) {
      const long long chunks = clamped_attr(prog, size, INT32_MIN, INT32_MAX);
      p.clamped |= chunks == INT32_MIN || chunks == INT32_MAX;
      p.rank_sizes.push_back(chunks);
    }
    py::dict ids;
    for (py::handle tb : attr(prog, N.threadblocks)) {
      int g = p.num_tbs();
      p.tb_rank_pos.push_back((int)p.rank_id.size() - 1);
      py::object id = attr(tb, N.id);
      const int negative = PyObject_RichCompareBool(id.ptr(), zero.ptr(), Py_LT), repeated = ids.contains(id);
      if (negative < 0) throw py::error_already_set();
      p.tb_id_bad.push_back(negative || repeated);
      ids[id] = g;
      const int send = (int)clamped_attr(tb, N.send, INT32_MIN, INT32_MAX);
      const int recv = (int)clamped_attr(tb, N.recv, INT32_MIN, INT32_MAX);
      py::object channel = attr(tb, N.channel);
      if (!channel_codes.contains(channel)) {
        channel_codes[channel] = py::int_(p.channels.size());
        p.channels.push_back(channel);
      }
      const int ch = channel_codes[channel].cast<int>();
      const int channel_negative = PyObject_RichCompareBool(channel.ptr(), zero.ptr(), Py_LT);
      if (channel_negative < 0) throw py::error_already_set();
      int sc = -1, rc = -1;
      if (send >= 0) p.conns[sc = connection(r, send, ch)].sender = g;
      if (recv >= 0) p.conns[rc = connection(recv, r, ch)].receiver = g;
      p.send_conn.push_back(sc);
      p.recv_conn.push_back(rc);
      p.tb_send.push_back(send);
      p.tb_recv.push_back(recv);
      p.tb_channel.push_back(ch);
      p.tb_channel_negative.push_back(channel_negative);
      tb_objects.push_back(py::reinterpret_borrow<py::object>(tb));
    }
    ids_by_rank.push_back(ids);
  }
  p.rank_first_tb.push_back(p.num_tbs());
  for (int g = 0; g < p.num_tbs(); ++g) {
    const py::dict& ids = ids_by_rank[p.tb_rank_pos[g]];
    for (py::handle st : attr(tb_objects[g], N.steps)) {
      py::object op = attr(st, N.op);
      size_t code = 0;
      while (code < op_members.size() && op_members[code] != op.ptr()) ++code;
      if (code == op_members.size()) throw py::key_error(py::str(op).cast<std::string>());
      const uint8_t f = op_flags[code];
      p.flags.push_back(f);
      const bool src = f & READS_SRC, dst = f & (READS_DST | WRITES_DST);  // the fields the step type uses
      p.src_buf.push_back(src ? buffer_code(attr(st, N.src_buf).ptr()) : NO_BUFFER);
      p.src_off.push_back(src ? (int32_t)int_attr(st, N.src_off, &p.clamped) : 0);
      p.dst_buf.push_back(dst ? buffer_code(attr(st, N.dst_buf).ptr()) : NO_BUFFER);
      p.dst_off.push_back(dst ? (int32_t)int_attr(st, N.dst_off, &p.clamped) : 0);
      p.count.push_back((int32_t)int_attr(st, N.count, &p.clamped));
      py::object dep = attr(st, N.dep);
      int dep_g = -1, dep_step = -1;
      if (!dep.is_none()) {
        py::object dep_id = attr(dep, N.tb);
        PyObject* target = PyDict_GetItemWithError(ids.ptr(), dep_id.ptr());  // borrowed
        if (!target) {
          if (PyErr_Occurred()) throw py::error_already_set();
          throw py::key_error(py::str(dep_id).cast<std::string>());
        }
        dep_g = (int)PyLong_AsLong(target);
        dep_step = (int)int_attr(dep, N.step, &p.clamped);
      }
      p.dep_tb.push_back(dep_g);
      p.dep_step.push_back(dep_step);
      py::object hd = attr(st, N.has_dep);
      p.has_dep.push_back(PyObject_IsTrue(hd.ptr()) ? 1 : 0);
    }
    p.tb_base.push_back((int)p.flags.size());
  }
  return p;
}

}  // namespace verify
