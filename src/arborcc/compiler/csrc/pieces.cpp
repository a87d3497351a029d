// finishes_in_pieces (pieces.hpp), the run of arborcc.compiler.pieces, whose module
// docstring is the model - the one the verifier checks (arborcc.verify.pieces) at
// maxAllowedCount 1, on the compiler's own structures (the verifier's layer is below
// reach of the compiler's).
//
// The run is greedy: a thread block moves as many slices of its step as its FIFOs allow
// (a fused step takes one received slice and one free slice per slice it moves), parks
// on the FIFO or dependency that stopped it, and is queued again when the other end of
// that FIFO moves or the thread block it waits on finishes the step. FIFO counters and
// finished steps only grow, and a thread block blocks only on its own FIFOs and on
// finished steps, so every maximal run ends in the same state whatever the order in
// which thread blocks move: one run decides every schedule.

#include "pieces.hpp"

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace compiler {

bool finishes_in_pieces(const Schedule& s, const ThreadBlocks& a, int64_t capacity, int64_t per_piece) {
  const size_t n = a.size();
  if (capacity < 1 || per_piece < 1) throw std::invalid_argument("finishes_in_pieces: capacity and per_piece must be >= 1");
  // connections by (sender rank, receiver rank, channel); each has one thread block at each end
  std::unordered_map<int64_t, int64_t> conn_of;
  int64_t nr = (int64_t)a.of_rank.size(), nch = 1;
  for (size_t g = 0; g < n; ++g) nch = std::max(nch, a.ch[g] + 1);
  auto key = [&](int64_t src, int64_t dst, int64_t ch) { return (src * nr + dst) * nch + ch; };
  Ints send_conn(n, -1), recv_conn(n, -1), conn_sender, conn_receiver;
  auto connection = [&](int64_t k) {
    auto [it, fresh] = conn_of.emplace(k, (int64_t)conn_sender.size());
    if (fresh) {
      conn_sender.push_back(-1);
      conn_receiver.push_back(-1);
    }
    return it->second;
  };
  for (size_t g = 0; g < n; ++g) {
    if (a.send[g] >= 0) conn_sender[(size_t)(send_conn[g] = connection(key(a.rank[g], a.send[g], a.ch[g])))] = (int64_t)g;
    if (a.recv[g] >= 0) conn_receiver[(size_t)(recv_conn[g] = connection(key(a.recv[g], a.rank[g], a.ch[g])))] = (int64_t)g;
  }
  const size_t nconn = conn_sender.size();
  Ints pc(n, 0), done(n, -1), moved(n, 0), filled(nconn, 0);  // done: the last step finished
  std::vector<char> reader_waiting(nconn, 0), writer_waiting(nconn, 0);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> dep_waiters(n);  // (step waited for, thread block)
  std::deque<int64_t> ready;
  for (size_t g = 0; g < n; ++g) ready.push_back((int64_t)g);
  auto wake = [&](int64_t g) {
    if (g >= 0) ready.push_back(g);
  };
  while (!ready.empty()) {
    const size_t g = (size_t)ready.front();
    ready.pop_front();
    const std::vector<StepRow>& steps = s.of_tb[g];
    const int64_t rc = recv_conn[g], sc = send_conn[g];
    int64_t i = pc[g];
    while (i < (int64_t)steps.size()) {
      const StepRow& st = steps[(size_t)i];
      if (st.dep_tb >= 0) {
        const int64_t on = a.of_rank[(size_t)a.rank[g]][(size_t)st.dep_tb];
        if (done[(size_t)on] < st.dep_step) {
          dep_waiters[(size_t)on].emplace_back(st.dep_step, (int64_t)g);
          break;
        }
      }
      const bool receives = step::has((int)st.op, step::RECEIVES), sends = step::has((int)st.op, step::SENDS);
      if ((receives && rc < 0) || (sends && sc < 0)) throw std::logic_error("finishes_in_pieces: a step without its connection");
      if (receives || sends) {
        const int64_t need = st.cnt * per_piece - moved[g];
        int64_t k = need;
        if (receives) k = std::min(k, filled[(size_t)rc]);
        if (sends) k = std::min(k, capacity - filled[(size_t)sc]);
        if (k > 0) {
          moved[g] += k;
          if (receives) {
            filled[(size_t)rc] -= k;
            if (writer_waiting[(size_t)rc]) {
              writer_waiting[(size_t)rc] = 0;
              wake(conn_sender[(size_t)rc]);
            }
          }
          if (sends) {
            filled[(size_t)sc] += k;
            if (reader_waiting[(size_t)sc]) {
              reader_waiting[(size_t)sc] = 0;
              wake(conn_receiver[(size_t)sc]);
            }
          }
        }
        if (k < need) {
          if (receives && filled[(size_t)rc] == 0) reader_waiting[(size_t)rc] = 1;
          if (sends && filled[(size_t)sc] == capacity) writer_waiting[(size_t)sc] = 1;
          break;
        }
        moved[g] = 0;
      }
      done[g] = i;
      auto& waiters = dep_waiters[g];
      if (st.has_dep && !waiters.empty()) {  // a dependency names a step others wait on
        size_t kept = 0;
        for (auto& w : waiters) {
          if (w.first <= i)
            ready.push_back(w.second);
          else
            waiters[kept++] = w;
        }
        waiters.resize(kept);
      }
      ++i;
    }
    pc[g] = i;
  }
  for (size_t g = 0; g < n; ++g)
    if (pc[g] < (int64_t)s.of_tb[g].size()) return false;
  return true;
}

}  // namespace compiler
