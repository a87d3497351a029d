// A program: one rank's thread blocks, already lowered to call buffers (0 send, 1 receive,
// 2 scratch) and chunk indices in them; what program.cpp derives from its steps; where a
// call's buffers are (Geometry) and the byte ranges a step moves (Pieces).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "segment_layout.hpp"
#include "step_codes.hpp"  // src/arborcc/ir/csrc: Step::op is a step::Code

namespace dataplane {

struct TB {
  int send, recv, channel, first, nsteps;
};
struct Step {
  int op, sbuf, soff, dbuf, doff, cnt, dep_tb, dep_step;
};

struct Program {
  std::vector<TB> tbs;
  std::vector<Step> steps;
  int max_cnt = 1;
  // Sends read only chunks that no step writes (and no step sends from a slot or from
  // what it just wrote): a REMOTE message of it never needs demoting, so its messages
  // need not fit a slot when cross-memory attach carries them.
  bool sends_unwritten = false;
  // No step reduces: nothing gains from cache-sized slices.
  bool copy_only = true;
  // No step of any rank's program reduces (the caller says): a rank cuts a call into
  // slices as its peers do, so only then may it send one message per chunk.
  bool algorithm_copies_only = false;
  // Lowest and highest chunk index each call buffer's steps touch (-1: none).
  int lo_chunk[3] = {-1, -1, -1}, hi_chunk[3] = {-1, -1, -1};
  // The order in which the scheduler visits thread blocks: those that send first (a
  // peer can start on a message while this rank copies), then those that receive,
  // then local ones.
  std::vector<int> order;
};

// Where a call's buffers are and how chunk indices map to elements.
struct Geometry {
  uint64_t addr[3];
  int64_t chunks_per_block[3];
  int64_t base[3];
  int64_t block_stride;  // elements between blocks
  int64_t chunk_elems;
  size_t esize;
};

struct Pieces {
  int n = 0;
  uint64_t len = 0;  // bytes of each piece
  uint64_t addr[MAX_PIECES];
};

// Address of element `elem` of chunk c of call buffer b.
inline uint64_t chunk_addr(const Geometry& g, int b, int64_t c, int64_t elem) {
  int64_t cpb = g.chunks_per_block[b];
  int64_t off = g.base[b] + (c / cpb) * g.block_stride + (c % cpb) * g.chunk_elems + elem;
  return g.addr[b] + (uint64_t)off * g.esize;
}

// Fill in what the interpreter needs to know of a program's steps: sends_unwritten,
// copy_only, lo_chunk/hi_chunk and the visiting order.
void classify(Program& p);

// The bytes [lo, hi) of call buffer b that a program's steps touch (lo == hi: none).
void extent(const Program& p, const Geometry& g, int b, uint64_t& lo, uint64_t& hi);

}  // namespace dataplane
