// The Python module arborcc.verify.native (pybind11): the encoded program
// (program.hpp), the pieces run (pieces.hpp), the symbolic run (symbolic.hpp) and its race
// ordering across ranks (races.hpp).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "pieces.hpp"
#include "program.hpp"
#include "races.hpp"
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
  m.doc() = "arborcc's verifier passes over every step (C++): the pieces run and the symbolic run";
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
  py::class_<Proof>(m, "SymbolicRun")
      .def_property_readonly("proved", [](const Proof& r) { return r.proved; }, "per layout: free of violations")
      .def_readonly("steps_run", &Proof::steps_run)
      .def_property_readonly("order", [](const Proof& r) { return r.order; },
                             "the gids of the steps run, in the order they completed")
      .def_property_readonly("recv_src", [](const Proof& r) { return r.recv_src; },
                             "per gid: the gid of the send whose message it popped, -1 for none")
      .def_property_readonly("mismatches", [](const Proof& r) { return r.mismatches; },
                             "gids of receives whose message had another count, in the order they ran")
      .def_property_readonly("blocked", [](const Proof& r) {
        py::list out;
        for (const Blocked& b : r.blocked) out.append(py::make_tuple(b.tb, b.step, b.wait, b.on));
        return out;
      }, "(thread block, step, wait: 0 signal, 1 receive, 2 send, thread block or connection) per blocked one")
      .def_property_readonly("unreceived", [](const Proof& r) {
        py::list out;
        for (const Unreceived& u : r.unreceived) out.append(py::make_tuple(u.connection, u.first_gid, u.messages));
        return out;
      }, "(connection, gid of the oldest message, messages) per connection left with messages")
      .def_property_readonly("layouts", [](const Proof& r) {
        py::list out;
        for (const LayoutFindings& f : r.layouts) {
          py::list events, races, wrong;
          for (const auto& e : f.events) events.append(py::make_tuple(e[0], e[1], e[2]));
          for (const auto& x : f.races) races.append(py::make_tuple(x[0], x[1], x[2], bool(x[3]), bool(x[4])));
          for (const WrongValue& w : f.wrong) {
            py::list parts;
            for (const auto& [chunk, ranks] : w.parts) parts.append(py::make_tuple(chunk, ranks));
            wrong.append(py::make_tuple(w.run, w.index, w.length, w.writer, w.initialized, w.dup, parts));
          }
          out.append(py::dict(py::arg("events") = events, py::arg("races") = races,
                              py::arg("race_candidates") = f.race_candidates,
                              py::arg("races_incomplete") = f.races_incomplete, py::arg("wrong") = wrong));
        }
        return out;
      }, "per layout: events (kind: 0 mismatch, 1 uninitialized source, 2 uninitialized destination, 3 source "
         "outside its buffer, 4 destination outside its buffer; gid; slot, sending gid or 0), races (later gid, "
         "earlier gid, slot, later writes, earlier writes), race_candidates, races_incomplete, wrong output chunks "
         "(expected run, index in it of the first, how many, last writer, initialized, repeated contribution, "
         "[(chunk, ranks)] of the first; each next one's chunks are one higher)");
  m.def("run_layouts", [](const Program& p, int num_ranks, const py::list& layouts, int slots, bool check_races) {
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
    Proof run;
    {
      py::gil_scoped_release release;
      run = run_layouts(p, num_ranks, lays, slots, check_races);
    }
    return run;
  }, py::arg("program"), py::arg("num_ranks"), py::arg("layouts"), py::arg("slots"), py::arg("check_races"),
        "the symbolic run: its schedule and findings, and per layout (total, bases, data, data_end, expected "
        "runs) whether it is proved free of violations");
  m.def("ordered_through_ranks", [](const Program& p, const Proof& run, const std::vector<int>& xs,
                                    const std::vector<int>& ys, const std::vector<bool>& received) {
    std::vector<RaceCandidate> candidates;
    for (size_t n = 0; n < xs.size(); ++n) candidates.push_back({xs[n], ys[n], received.at(n)});
    py::gil_scoped_release release;
    return ordered_through_ranks(p, run.order, run.recv_src, candidates);
  }, py::arg("program"), py::arg("run"), py::arg("xs"), py::arg("ys"), py::arg("received"),
        "per race candidate (x, y, y's write carries received data) of the run: is x ordered before y's "
        "access through any path, across ranks?");
}
