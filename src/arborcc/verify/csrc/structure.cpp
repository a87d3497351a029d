// check_structure_rules (structure.hpp) implements the loop over ranks, thread blocks
// and steps of check_structure in arborcc/verify/structure.py and its connection
// checks, answering only whether that loop would report any violation (and counting
// the steps whose hasdep no step waits on, for its note). Each rule below names the
// one of structure.py it is; the violations and their messages are structure.py's,
// which runs whenever this answer is "not clean". The encoding has already turned
// unknown step types and dependencies on a missing thread block into KeyError
// (program.hpp), so structure.py handles those as well.

#include "structure.hpp"

#include <vector>

namespace verify {

StructureAnswer check_structure_rules(const Program& p, int num_ranks) {
  StructureAnswer out;
  // per connection of the encoding (sender rank, receiver rank, channel): sending and
  // receiving thread blocks (those whose peer is another rank) and their steps
  const size_t nconn = p.conns.size();
  std::vector<int> senders(nconn, 0), receivers(nconn, 0);
  std::vector<long long> send_steps(nconn, 0), recv_steps(nconn, 0);
  // per step: some step of its rank waits on it (dependencies stay within a rank)
  std::vector<char> waited(p.num_steps(), 0);
  std::vector<int> signalling;  // steps with hasdep
  bool dirty = false;
  for (size_t pos = 0; pos < p.rank_id.size(); ++pos) {
    const int r = p.rank_id[pos];
    const long long* sizes = &p.rank_sizes[3 * pos];
    for (int b = 0; b < 3; ++b) dirty |= sizes[b] < 0;  // negative chunk count
    for (int g = p.rank_first_tb[pos]; g < p.rank_first_tb[pos + 1]; ++g)
      dirty |= p.tb_id_bad[g];  // id used twice, negative id
    for (int g = p.rank_first_tb[pos]; g < p.rank_first_tb[pos + 1]; ++g) {
      const int send = p.tb_send[g], recv = p.tb_recv[g];
      for (int peer : {send, recv}) dirty |= peer == r || peer < -1 || peer >= num_ranks;  // peer not a rank
      dirty |= p.tb_channel_negative[g] && (send >= 0 || recv >= 0);  // negative channel
      if (send >= 0 && send != r) ++senders[p.send_conn[g]];
      if (recv >= 0 && recv != r) ++receivers[p.recv_conn[g]];
      long long nsend = 0, nrecv = 0;
      for (int gid = p.tb_base[g]; gid < p.tb_base[g + 1]; ++gid) {
        const uint8_t f = p.flags[gid];
        if (p.has_dep[gid]) signalling.push_back(gid);
        const int tg = p.dep_tb[gid];
        if (tg >= 0) {  // a dependency: on another thread block's signalling step that is not a nop
          const int k = p.dep_step[gid];
          const bool in_range = 0 <= k && k < p.tb_base[tg + 1] - p.tb_base[tg];
          if (in_range) waited[p.tb_base[tg] + k] = 1;
          dirty |= tg == g || !in_range || !p.has_dep[p.tb_base[tg] + k] || p.flags[p.tb_base[tg] + k] == 0;
        }
        if (f & SENDS) ++nsend, dirty |= send < 0;     // sends without a send peer
        if (f & RECEIVES) ++nrecv, dirty |= recv < 0;  // receives without a receive peer
        if (f == 0) continue;                          // a nop
        const long long cnt = p.count[gid];
        if (cnt < 1) {  // count at least 1
          dirty = true;
          continue;
        }
        auto inside = [&](uint8_t buf, long long off) { return buf <= 2 && off >= 0 && off + cnt <= sizes[buf]; };
        const bool src_ok = (f & READS_SRC) && inside(p.src_buf[gid], p.src_off[gid]);
        if ((f & READS_SRC) && !src_ok) dirty = true;  // source range outside its buffer
        if (f & (WRITES_DST | READS_DST)) {
          if (!inside(p.dst_buf[gid], p.dst_off[gid])) {  // destination range outside its buffer
            dirty = true;
            continue;
          }
          const long long a = p.src_off[gid], b = p.dst_off[gid];
          if (src_ok && p.src_buf[gid] == p.dst_buf[gid] && a != b && a < b + cnt && b < a + cnt)
            dirty = true;  // source and destination overlap without being equal
        }
      }
      if (send >= 0) send_steps[p.send_conn[g]] += nsend;
      if (recv >= 0) recv_steps[p.recv_conn[g]] += nrecv;
    }
  }
  for (int gid : signalling) out.unwaited += !waited[gid];
  for (size_t c = 0; c < nconn; ++c) {  // exactly one sender and one receiver, as many sends as receives
    if (!senders[c] && !receivers[c]) continue;  // only thread blocks to themselves use it
    dirty |= senders[c] != 1 || receivers[c] != 1 || send_steps[c] != recv_steps[c];
  }
  out.clean = !dirty;
  return out;
}

}  // namespace verify
