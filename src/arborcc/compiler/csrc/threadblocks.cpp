// The automatic thread-block policy (arborcc.compiler.threadblocks.assign_auto).

#include "threadblocks.hpp"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "fusion.hpp"
#include "instructions.hpp"

namespace compiler {

int64_t ThreadBlocks::add(int64_t r, int64_t s, int64_t v, int64_t c, int64_t q) {
  Ints& mine = of_rank[(size_t)r];
  const int64_t tb = (int64_t)rank.size();
  rank.push_back(r);
  id.push_back((int64_t)mine.size());
  send.push_back(s);
  recv.push_back(v);
  ch.push_back(c);
  lane.push_back(q);
  mine.push_back(tb);
  return tb;
}

void ThreadBlocks::pop(int64_t r) {
  of_rank[(size_t)r].pop_back();
  for (Ints* col : {&rank, &id, &send, &recv, &ch, &lane}) col->pop_back();
}

namespace {

class AutoAssigner {
 public:
  AutoAssigner(Table& t, const Rows& preds, int64_t num_ranks, int64_t max_channels)
      : t_(t), preds_(preds), num_ranks_(num_ranks), max_channels_(max_channels) {
    const size_t n = t.kind.size();
    a_.tb_of.assign(n, -1);
    a_.of_rank.resize((size_t)num_ranks);
    for (int64_t q : t.lane) lanes_ = std::max(lanes_, q + 1);
    channels_ = max_channels;
    for (int64_t c : t.ch) channels_ = std::max(channels_, c + 1);
  }

  ThreadBlocks& result() { return a_; }

  // The chain starting at send `head`: it, the fused instructions forwarding its data, the
  // last receive.
  Ints chain(int64_t head) const {
    Ints members{head};
    for (int64_t j = t_.msg_out[(size_t)head]; j >= 0; j = t_.msg_out[(size_t)j]) members.push_back(j);
    return members;
  }

  // Chooses the chain's channel and places its fused middle instructions (and, with
  // `ends`, its first send and last receive); -1 (nothing placed) when no channel can
  // carry the fused instructions.
  int64_t place_chain(const Ints& members, bool ends) {
    int64_t hint = -1;
    for (int64_t m : members)
      if (t_.ch[(size_t)m] != -1) {
        hint = t_.ch[(size_t)m];
        break;
      }
    int64_t chosen = -1;
    if (members.size() <= 2) {  // a plain transfer always fits
      chosen = hint != -1 ? hint : 0;
    } else {
      const int64_t first = hint != -1 ? hint : 0, last = hint != -1 ? hint + 1 : max_channels_;
      for (int64_t c = first; c < last && chosen < 0; ++c) {
        undo_.clear();
        bool ok = true;
        for (size_t k = 1; k + 1 < members.size() && ok; ++k) ok = place(members[k], c, true);
        if (ok) {
          chosen = c;
        } else {
          rollback();
          for (size_t k = 1; k + 1 < members.size(); ++k) a_.tb_of[(size_t)members[k]] = -1;
        }
      }
      undo_.clear();
    }
    if (chosen >= 0 && ends) place_ends(members, chosen);
    return chosen;
  }

  // Places a chain's fused instructions; appends the fused (sub)chains placed and their
  // channels. A chain no channel carries is cut by undoing fusions (the revived send of a
  // receive r is recorded in inserted_): where it meets a rank again with one of the same
  // peers but another partner, then, for a piece that still does not fit, everywhere.
  void place_fused(const Ints& members, std::vector<std::pair<Ints, int64_t>>& placed) {
    const int64_t c = place_chain(members, false);
    if (c >= 0) {
      placed.emplace_back(members, c);
      return;
    }
    std::vector<Ints> pieces;
    Ints cur{members[0]};
    std::unordered_map<int64_t, int64_t> seen;  // (rank, side, peer) -> the other peer
    const int64_t nr = num_ranks_;
    auto key = [&](int64_t r, int64_t side, int64_t peer) { return (r * 2 + side) * nr + peer; };
    auto differs = [&](int64_t k, int64_t v) {
      auto it = seen.find(k);
      return it != seen.end() && it->second != v;
    };
    for (size_t k = 1; k + 1 < members.size(); ++k) {
      const int64_t m = members[k];
      const size_t mi = (size_t)m;
      const int64_t r = t_.rank[mi], sp = t_.speer[mi], rp = t_.rpeer[mi];
      if (differs(key(r, 0, sp), rp) || differs(key(r, 1, rp), sp)) {
        const int64_t send = unfuse_at(m);  // m ends this piece as a receive
        cur.push_back(m);
        pieces.push_back(std::move(cur));
        cur = Ints{send};
        seen.clear();
        continue;
      }
      seen[key(r, 0, sp)] = rp;
      seen[key(r, 1, rp)] = sp;
      cur.push_back(m);
    }
    cur.push_back(members.back());
    pieces.push_back(std::move(cur));
    for (Ints& piece : pieces) {
      if (piece.size() < 3) continue;  // a plain transfer: placed with the others
      const int64_t pc = place_chain(piece, false);
      if (pc < 0) {
        for (size_t k = 1; k + 1 < piece.size(); ++k) unfuse_at(piece[k]);
      } else {
        placed.emplace_back(std::move(piece), pc);
      }
    }
  }

  // A plain transfer: on the channel its send or else its receive names, else channel 0.
  void place_transfer(int64_t send, int64_t recv) {
    const int64_t cs = t_.ch[(size_t)send], cr = t_.ch[(size_t)recv];
    const int64_t c = cs != -1 ? cs : cr != -1 ? cr : 0;
    place(send, c, false);
    place(recv, c, false);
  }

  void place_ends(const Ints& members, int64_t c) {
    place(members.front(), c, false);
    place(members.back(), c, false);
  }

  // A local copy or reduce: the thread block of its latest predecessor in the order, else
  // the rank's local thread block (of its lane).
  void place_local(int64_t i, const Ints& pos) {
    int64_t best = -1, best_pos = -1;
    for (const int64_t* p = preds_.begin((size_t)i); p != preds_.end((size_t)i); ++p) {
      const size_t x = (size_t)t_.rep[(size_t)*p];
      if (pos[x] > best_pos) {
        best = a_.tb_of[x];
        best_pos = pos[x];
      }
    }
    const size_t ii = (size_t)i;
    if (best < 0) {
      const int64_t k = t_.rank[ii] * lanes_ + t_.lane[ii];
      auto it = local_.find(k);
      best = it != local_.end() ? it->second : (local_[k] = a_.add(t_.rank[ii], -1, -1, 0, t_.lane[ii]));
    }
    a_.tb_of[ii] = best;
  }

  // Gives parallelized instances (lanes) their own channel ranges.
  void finish_channels() {
    if (std::all_of(a_.lane.begin(), a_.lane.end(), [](int64_t q) { return q == 0; })) return;
    const int64_t width = *std::max_element(a_.ch.begin(), a_.ch.end()) + 1;
    for (size_t k = 0; k < a_.size(); ++k) a_.ch[k] += width * a_.lane[k];
  }

  std::unordered_map<int64_t, int64_t> inserted_;  // unfused receive -> its revived send

 private:
  enum Undo { NEW_TB, SEND_OWNER, RECV_OWNER, SET_SEND, SET_RECV };

  int64_t key(int64_t r, int64_t q, int64_t c, int64_t peer) const {
    return ((r * lanes_ + q) * channels_ + c) * num_ranks_ + peer;
  }

  int64_t new_tb(int64_t r, int64_t s, int64_t v, int64_t c, int64_t q, bool undo) {
    if (undo) undo_.emplace_back(NEW_TB, r);
    return a_.add(r, s, v, c, q);
  }

  void own(std::unordered_map<int64_t, int64_t>& owners, Undo what, int64_t k, int64_t tb, bool undo) {
    owners[k] = tb;
    if (undo) undo_.emplace_back(what, k);
  }

  // Puts chain member m on channel c; false if its connections cannot take it.
  bool place(int64_t m, int64_t c, bool undo) {
    const size_t mi = (size_t)m;
    const int64_t r = t_.rank[mi], sp = t_.speer[mi], rp = t_.rpeer[mi], q = t_.lane[mi];
    int64_t tb;
    if (sp >= 0 && rp >= 0) {  // fused: one thread block for both connections
      const int64_t ks = key(r, q, c, sp), kr = key(r, q, c, rp);
      auto is = send_owner_.find(ks);
      auto ir = recv_owner_.find(kr);
      const int64_t ts = is == send_owner_.end() ? -1 : is->second, tr = ir == recv_owner_.end() ? -1 : ir->second;
      if (ts < 0 && tr < 0) {
        tb = new_tb(r, sp, rp, c, q, undo);
        own(send_owner_, SEND_OWNER, ks, tb, undo);
        own(recv_owner_, RECV_OWNER, kr, tb, undo);
      } else if (ts < 0) {
        if (a_.send[(size_t)tr] != -1) return false;
        tb = tr;
        a_.send[(size_t)tb] = sp;
        if (undo) undo_.emplace_back(SET_SEND, tb);
        own(send_owner_, SEND_OWNER, ks, tb, undo);
      } else if (tr < 0) {
        if (a_.recv[(size_t)ts] != -1) return false;
        tb = ts;
        a_.recv[(size_t)tb] = rp;
        if (undo) undo_.emplace_back(SET_RECV, tb);
        own(recv_owner_, RECV_OWNER, kr, tb, undo);
      } else if (ts == tr) {
        tb = ts;
      } else {
        return false;
      }
    } else {  // a plain send or receive: its connection's thread block, or a new one
      const bool sends = sp >= 0;
      auto& owners = sends ? send_owner_ : recv_owner_;
      const int64_t k = key(r, q, c, sends ? sp : rp);
      auto it = owners.find(k);
      if (it != owners.end()) {
        tb = it->second;
      } else {
        tb = new_tb(r, sp, rp, c, q, undo);
        own(owners, sends ? SEND_OWNER : RECV_OWNER, k, tb, undo);
      }
    }
    a_.tb_of[mi] = tb;
    return true;
  }

  void rollback() {
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) {
      const int64_t x = it->second;
      switch (it->first) {
        case NEW_TB: a_.pop(x); break;
        case SEND_OWNER: send_owner_.erase(x); break;
        case RECV_OWNER: recv_owner_.erase(x); break;
        case SET_SEND: a_.send[(size_t)x] = -1; break;
        case SET_RECV: a_.recv[(size_t)x] = -1; break;
      }
    }
    undo_.clear();
  }

  // Undoes the fusion of receive m; returns the revived send.
  int64_t unfuse_at(int64_t m) {
    const int64_t send = unfuse(t_, m);
    inserted_[m] = send;
    return send;
  }

  Table& t_;
  const Rows& preds_;
  const int64_t num_ranks_, max_channels_;
  ThreadBlocks a_;
  int64_t lanes_ = 1, channels_ = 1;
  std::unordered_map<int64_t, int64_t> send_owner_, recv_owner_, local_;
  std::vector<std::pair<Undo, int64_t>> undo_;
};

}  // namespace

ThreadBlocks assign_auto(Table& t, const Rows& preds, int64_t num_ranks, int64_t max_channels, Ints& order) {
  AutoAssigner asg(t, preds, num_ranks, max_channels);
  const Ints& kind = t.kind;
  const Ints& msg_out = t.msg_out;
  // fused instructions first: they decide which peers share a thread block; the chains'
  // first sends and last receives then join those thread blocks where they can
  std::vector<std::pair<Ints, int64_t>> fused_chains;
  for (int64_t i : order)
    if (kind[(size_t)i] == step::SEND && msg_out[(size_t)msg_out[(size_t)i]] >= 0)
      asg.place_fused(asg.chain(i), fused_chains);
  if (!asg.inserted_.empty()) {
    Ints expanded;
    expanded.reserve(order.size() + asg.inserted_.size());
    for (int64_t i : order) {
      expanded.push_back(i);
      auto it = asg.inserted_.find(i);
      if (it != asg.inserted_.end()) expanded.push_back(it->second);
    }
    order.swap(expanded);
  }
  for (const auto& fc : fused_chains) asg.place_ends(fc.first, fc.second);
  ThreadBlocks& a = asg.result();
  Ints pos;  // where each instruction is in the order (local ones need it)
  for (int64_t i : order) {
    const size_t ii = (size_t)i;
    const int64_t k = kind[ii];
    if (k == step::SEND) {
      if (a.tb_of[ii] >= 0) continue;
      const int64_t j = msg_out[ii];
      if (msg_out[(size_t)j] < 0) {
        asg.place_transfer(i, j);
      } else if (asg.place_chain(asg.chain(i), true) < 0) {
        throw std::logic_error("thread-block assignment: a fused chain fits no channel after the cuts");
      }
    } else if (k == step::COPY || k == step::REDUCE) {
      if (pos.empty()) {
        pos.assign(kind.size(), 0);
        for (size_t p = 0; p < order.size(); ++p) pos[(size_t)order[p]] = (int64_t)p;
      }
      asg.place_local(i, pos);
    }
  }
  asg.finish_channels();
  return std::move(a);
}

}  // namespace compiler
