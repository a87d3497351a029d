// An Algorithm (arborcc.ir.model) as flat arrays, built once per call from the Python
// objects (encode_program) and read by the compiled passes: the pieces run (pieces.cpp,
// arborcc.verify.pieces) and the symbolic run's proof of a correct program (symbolic.cpp,
// arborcc.verify.proof). Thread blocks are numbered rank by rank as the Python passes
// number them (ranks sorted by id, thread blocks in file order); steps likewise (gid).

#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "step_codes.hpp"  // src/arborcc/ir/csrc

namespace verify {

namespace py = pybind11;

// What a step type does: the flag bits of the IR's step table (step_codes.hpp); a step's
// flags come from arborcc.verify.semantics.OPS, handed over by the Python side, so a step
// type without a code (the legacy residual add) is verified too.
using step::READS_DST;
using step::READS_SRC;
using step::RECEIVES;
using step::SENDS;
using step::WRITES_DST;

constexpr uint8_t NO_BUFFER = 255;

// One connection (sender rank, receiver rank, channel) and its thread blocks (-1: none).
struct Connection {
  int src, dst, channel, sender, receiver;
};

struct Program {
  // per rank position (ranks sorted by id): the rank id and its first thread block
  std::vector<int> rank_id, rank_first_tb;  // rank_first_tb has one more entry
  std::vector<long long> rank_sizes;        // per rank position: input, output, scratch chunks (saturated)
  // per thread block g: send and receive peers as declared (saturated to 32 bits), the
  // channel as a code (channels[code] is the declared value), whether its id is
  // negative or repeated on its rank, its connections (-1: none)
  std::vector<int> tb_rank_pos, tb_base, send_conn, recv_conn;  // tb_base: ntb + 1 entries
  std::vector<int> tb_send, tb_recv, tb_channel;
  std::vector<uint8_t> tb_channel_negative, tb_id_bad;
  std::vector<py::object> channels;
  // per step gid
  std::vector<uint8_t> flags, src_buf, dst_buf, has_dep;
  // dep_tb: global g, -1 for none; the source (destination) fields only of step types
  // that read their source (read or write their destination), else NO_BUFFER and 0
  std::vector<int32_t> src_off, dst_off, count, dep_tb, dep_step;
  std::vector<Connection> conns;  // in the order the thread blocks first name them (channel: its code)
  // a buffer size, count, offset or dependency step did not fit 32 bits and was clamped:
  // only the pieces run, which reads counts as "more than the FIFO holds", may use it
  bool clamped = false;

  int num_tbs() const { return (int)tb_rank_pos.size(); }
  int num_steps() const { return tb_base.back(); }
};

// ranks: the RankPrograms sorted by rank id; ops: (Op member, OpInfo) pairs; buffers:
// the Buffer members in the order the memory layouts list their bases. Raises KeyError
// for a step type not in ops or a dependency on a thread block the rank lacks. Numbers
// outside 32 bits are clamped (Program::clamped); thread block ids and channels may be
// any integers.
Program encode_program(py::handle ranks, py::handle ops, py::handle buffers);

// A thread block signalled step `i`: the thread blocks in `waiters` ((step waited for,
// waiting thread block) pairs) waiting for step i or an earlier one go back on `ready`.
inline void release_waiters(std::vector<std::pair<int, int>>& waiters, int i, std::deque<int>& ready) {
  size_t kept = 0;
  for (auto& w : waiters) {
    if (w.first <= i)
      ready.push_back(w.second);
    else
      waiters[kept++] = w;
  }
  waiters.resize(kept);
}

}  // namespace verify
