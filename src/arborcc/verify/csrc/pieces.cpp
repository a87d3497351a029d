// run_pieces (pieces.hpp) implements PieceSchedule.run of arborcc/verify/pieces.py, whose
// module docstring is the model: a step that sends or receives is
// ceil(count / allowed_count) * per_piece slices; a slice of a receiving step needs one
// filled slice of its receive FIFO, a slice of a sending step one free slice of its send
// FIFO (a fused step both); a FIFO holds `capacity` slices; a step with a dependency
// waits until the named thread block has signalled that step or a later one.
//
// Why it is the same run: the model is monotone (FIFO counters and semaphores only
// move forward, a thread block blocks only on its own FIFOs and on semaphores), so
// every maximal run ends in the same state - the program counters, the signals and the
// filled slices of every FIFO - whatever the order in which thread blocks move. This
// run moves a thread block as far as its FIFOs allow right now (k slices of a step in
// one go are k slice moves in a row: each takes one slice and frees one), parks it on
// the FIFO that stopped it, and puts it back on the queue when the other end of that
// FIFO moves or the semaphore it waits on reaches its step; it stops when the queue
// is empty, i.e. when no thread block can move: a maximal run.
// (tests/verify/test_verify_pieces.py compares it with a slice-by-slice sweep.)

#include "pieces.hpp"

#include <deque>
#include <stdexcept>
#include <utility>

namespace verify {

PieceRun run_pieces(const Program& p, int capacity, int per_piece, int allowed_count) {
  const int n = p.num_tbs();
  const int nconn = (int)p.conns.size();
  PieceRun out;
  out.pc.assign(n, 0);
  out.signal.assign(n, -1);
  out.filled.assign(nconn, 0);
  std::vector<int>& pc = out.pc;
  std::vector<int>& signal = out.signal;
  std::vector<int>& filled = out.filled;
  std::vector<long long> moved(n, 0);  // slices of the current step already moved
  std::vector<char> reader_waiting(nconn, 0), writer_waiting(nconn, 0);
  std::vector<std::vector<std::pair<int, int>>> dep_waiters(n);  // (step waited for, thread block)
  std::deque<int> ready;
  for (int g = 0; g < n; ++g) {
    ready.push_back(g);
    for (int gid = p.tb_base[g]; gid < p.tb_base[g + 1]; ++gid)
      if (((p.flags[gid] & RECEIVES) && p.recv_conn[g] < 0) || ((p.flags[gid] & SENDS) && p.send_conn[g] < 0))
        throw std::invalid_argument("a step sends or receives without a peer: check the structure first");
  }
  while (!ready.empty()) {
    int g = ready.front();
    ready.pop_front();
    const int rc = p.recv_conn[g], sc = p.send_conn[g], base = p.tb_base[g], last = p.tb_base[g + 1] - base;
    int i = pc[g];
    while (i < last) {
      const int gid = base + i;
      const int dep_tb = p.dep_tb[gid];
      if (dep_tb >= 0 && signal[dep_tb] < p.dep_step[gid]) {
        dep_waiters[dep_tb].push_back({p.dep_step[gid], g});
        break;
      }
      const bool receives = p.flags[gid] & RECEIVES, sends = p.flags[gid] & SENDS;
      if (receives || sends) {
        const long long cnt = p.count[gid];
        const long long need = (cnt + allowed_count - 1) / allowed_count * per_piece - moved[g];
        long long k = need;
        if (receives && filled[rc] < k) k = filled[rc];
        if (sends && capacity - filled[sc] < k) k = capacity - filled[sc];
        if (k > 0) {
          moved[g] += k;
          if (receives) {
            filled[rc] -= (int)k;
            if (writer_waiting[rc]) {
              writer_waiting[rc] = 0;
              ready.push_back(p.conns[rc].sender);
            }
          }
          if (sends) {
            filled[sc] += (int)k;
            if (reader_waiting[sc]) {
              reader_waiting[sc] = 0;
              ready.push_back(p.conns[sc].receiver);
            }
          }
        }
        if (k < need) {
          if (receives && filled[rc] == 0) reader_waiting[rc] = 1;
          if (sends && filled[sc] == capacity) writer_waiting[sc] = 1;
          break;
        }
        moved[g] = 0;
      }
      if (p.has_dep[gid]) {
        signal[g] = i;
        release_waiters(dep_waiters[g], i, ready);
      }
      ++i;
    }
    pc[g] = i;
  }
  return out;
}

}  // namespace verify
