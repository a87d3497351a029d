// encode_program (program.hpp): one pass over the Python objects, attribute reads through
// the C API with interned names.

#include "program.hpp"

#include <map>
#include <tuple>
#include <unordered_map>

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

long int_attr(py::handle obj, PyObject* key) {
  PyObject* v = PyObject_GetAttr(obj.ptr(), key);
  if (!v) throw py::error_already_set();
  long x = PyLong_AsLong(v);
  Py_DECREF(v);
  if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (x < INT32_MIN || x > INT32_MAX) throw py::value_error("a number outside 32 bits");
  return x;
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
  for (py::handle prog : ranks) {
    int r = (int)int_attr(prog, N.rank);
    p.rank_first_tb.push_back(p.num_tbs());
    p.rank_id.push_back(r);
    for (PyObject* size : {N.input_chunks, N.output_chunks, N.scratch_chunks}) p.rank_sizes.push_back(int_attr(prog, size));
    for (py::handle tb : attr(prog, N.threadblocks)) {
      int g = p.num_tbs();
      p.tb_rank_pos.push_back((int)p.rank_id.size() - 1);
      p.tb_id.push_back((int)int_attr(tb, N.id));
      int send = (int)int_attr(tb, N.send), recv = (int)int_attr(tb, N.recv), ch = (int)int_attr(tb, N.channel);
      int sc = -1, rc = -1;
      if (send >= 0) p.conns[sc = connection(r, send, ch)].sender = g;
      if (recv >= 0) p.conns[rc = connection(recv, r, ch)].receiver = g;
      p.send_conn.push_back(sc);
      p.recv_conn.push_back(rc);
      p.tb_send.push_back(send);
      p.tb_recv.push_back(recv);
      p.tb_channel.push_back(ch);
      tb_objects.push_back(py::reinterpret_borrow<py::object>(tb));
    }
  }
  p.rank_first_tb.push_back(p.num_tbs());
  // per rank position: thread block id -> g (the last of a repeated id, as a dict would),
  // built when a step of the rank first waits
  std::vector<std::unordered_map<int, int>> ids_by_rank(p.rank_id.size());
  std::vector<char> have_ids(p.rank_id.size(), 0);
  for (int g = 0; g < p.num_tbs(); ++g) {
    int pos = p.tb_rank_pos[g];
    std::unordered_map<int, int>& ids = ids_by_rank[pos];
    for (py::handle st : attr(tb_objects[g], N.steps)) {
      py::object op = attr(st, N.op);
      size_t code = 0;
      while (code < op_members.size() && op_members[code] != op.ptr()) ++code;
      if (code == op_members.size()) throw py::key_error(py::str(op).cast<std::string>());
      const uint8_t f = op_flags[code];
      p.flags.push_back(f);
      const bool src = f & READS_SRC, dst = f & (READS_DST | WRITES_DST);  // the fields the step type uses
      p.src_buf.push_back(src ? buffer_code(attr(st, N.src_buf).ptr()) : NO_BUFFER);
      p.src_off.push_back(src ? (int32_t)int_attr(st, N.src_off) : 0);
      p.dst_buf.push_back(dst ? buffer_code(attr(st, N.dst_buf).ptr()) : NO_BUFFER);
      p.dst_off.push_back(dst ? (int32_t)int_attr(st, N.dst_off) : 0);
      p.count.push_back((int32_t)int_attr(st, N.count));
      py::object dep = attr(st, N.dep);
      int dep_g = -1, dep_step = -1;
      if (!dep.is_none()) {
        if (!have_ids[pos]) {
          for (int h = p.rank_first_tb[pos]; h < p.rank_first_tb[pos + 1]; ++h) ids[p.tb_id[h]] = h;
          have_ids[pos] = 1;
        }
        int dep_id = (int)int_attr(dep, N.tb);
        auto it = ids.find(dep_id);
        if (it == ids.end()) throw py::key_error(std::to_string(dep_id));
        dep_g = it->second;
        dep_step = (int)int_attr(dep, N.step);
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
