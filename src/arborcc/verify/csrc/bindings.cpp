// The Python module arborcc.verify.native (pybind11): the encoded program
// (program.hpp), the pieces run (pieces.hpp) and the symbolic run's proof (symbolic.hpp).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "pieces.hpp"
#include "program.hpp"
#include "structure.hpp"
#include "symbolic.hpp"

namespace py = pybind11;

namespace verify {

// The arrays the pieces run reads, as bytes: equal keys give equal runs.
static py::bytes pieces_key(const Program& p) {
  std::string out;
  auto put = [&out](const auto& v) {
    size_t n = v.size();
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(v[0]));
  };
  std::vector<uint8_t> moves(p.flags.size());  // what the run reads of a step's type
  for (size_t k = 0; k < moves.size(); ++k) moves[k] = p.flags[k] & (SENDS | RECEIVES);
  put(p.tb_base);
  put(moves);
  put(p.count);
  put(p.dep_tb);
  put(p.dep_step);
  put(p.has_dep);
  put(p.send_conn);
  put(p.recv_conn);
  for (const Connection& c : p.conns) {
    int e[5] = {c.src, c.dst, c.channel, c.sender, c.receiver};
    out.append(reinterpret_cast<const char*>(e), sizeof e);
  }
  return py::bytes(out);
}

}  // namespace verify

PYBIND11_MODULE(native, m) {
  using namespace verify;
  m.doc() = "arborcc's verifier passes over every step (C++): the pieces run and the symbolic run's proof";
  py::class_<Program>(m, "Program")
      .def_property_readonly("num_threadblocks", &Program::num_tbs)
      .def_property_readonly("num_steps", &Program::num_steps)
      .def_readonly("clamped", &Program::clamped, "a size, count, offset or dependency step was clamped to 32 bits")
      .def_property_readonly("connections", [](const Program& p) {
        py::list out;
        for (const Connection& c : p.conns)
          out.append(py::make_tuple(c.src, c.dst, p.channels[c.channel], c.sender, c.receiver));
        return out;
      }, "per connection: (sender rank, receiver rank, channel, sending thread block, receiving thread block)")
      .def_property_readonly("recv_connection", [](const Program& p) { return p.recv_conn; })
      .def_property_readonly("send_connection", [](const Program& p) { return p.send_conn; })
      .def("pieces_key", &pieces_key, "everything the pieces run reads, as bytes");
  m.def("encode_program", &encode_program, py::arg("ranks"), py::arg("ops"), py::arg("buffers"),
        "the RankPrograms (sorted by rank id) as flat arrays; ops: (Op, OpInfo) pairs; buffers: Buffer members");
  m.def("check_structure_rules", [](const Program& p, int num_ranks) {
    StructureAnswer a = check_structure_rules(p, num_ranks);
    return py::make_tuple(a.clean, a.unwaited);
  }, py::arg("program"), py::arg("num_ranks"),
        "whether the per-rank, per-step and connection rules of check_structure hold; and the steps whose hasdep "
        "no step waits on");
  m.def("run_pieces", [](const Program& p, int capacity, int per_piece, int allowed_count) {
    PieceRun r = run_pieces(p, capacity, per_piece, allowed_count);
    return py::make_tuple(r.pc, r.signal, r.filled);
  }, py::arg("program"), py::arg("capacity"), py::arg("per_piece"), py::arg("allowed_count"),
        "the greedy pieces run: (program counters, signals, filled slices per connection)");
  m.def("prove_layouts", [](const Program& p, int num_ranks, const py::list& layouts, int slots, bool check_races) {
    std::vector<Layout> lays;
    for (py::handle h : layouts) {
      py::tuple t = py::reinterpret_borrow<py::tuple>(h);
      Layout l;
      l.total = t[0].cast<long long>();
      l.bases = t[1].cast<std::vector<long long>>();
      l.data = t[2].cast<std::vector<long long>>();
      l.data_end = t[3].cast<std::vector<long long>>();
      l.expected = t[4].cast<std::vector<std::array<long long, 4>>>();
      lays.push_back(std::move(l));
    }
    Proof proof;
    {
      py::gil_scoped_release release;
      proof = prove_layouts(p, num_ranks, lays, slots, check_races);
    }
    return py::make_tuple(proof.proved, proof.steps_run);
  }, py::arg("program"), py::arg("num_ranks"), py::arg("layouts"), py::arg("slots"), py::arg("check_races"),
        "per layout (total, bases, data, data_end, expected runs): proved free of violations; and the steps run");
}
