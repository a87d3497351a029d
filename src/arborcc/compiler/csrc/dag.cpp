// The instruction DAG's scan (arborcc.compiler.dag): one pass over the instructions in
// program order, tracking per atom its last writer and the readers since.

#include "dag.hpp"

#include <algorithm>

namespace compiler {

namespace {

bool contains(const Ints& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Per atom, the instructions that read it since its last write, in order: linked lists
// in one pool (no allocation per atom).
struct Readers {
  Ints head, tail, instr, next;
  explicit Readers(size_t atoms) : head(atoms, -1), tail(atoms, -1) {}
  void add(size_t atom, int64_t i) {
    const int64_t e = (int64_t)instr.size();
    instr.push_back(i);
    next.push_back(-1);
    if (head[atom] < 0) head[atom] = e;
    else next[(size_t)tail[atom]] = e;
    tail[atom] = e;
  }
  void clear(size_t atom) { head[atom] = tail[atom] = -1; }
};

bool reads_source(int64_t k) { return k == step::SEND || k == step::COPY || k == step::REDUCE; }

// Instruction ranges in atoms: the pieces each buffer is cut into at every offset where
// some access starts or ends. An access covers whole atoms and all slots of an atom
// share their history, so the scan tracks atoms: a 64-chunk transfer is one atom.
struct Atoms {
  Ints soff, scnt, doff, dcnt;  // per instruction, where it reads and writes, in atoms
  Ints count;                   // per rank * 3 + IR buffer
};

Atoms atoms_of(const Table& t, const Ints& sizes) {
  const size_t n = t.rank.size();
  Atoms a;
  if (std::all_of(t.cnt.begin(), t.cnt.end(), [](int64_t c) { return c == 1; })) {
    a.soff = t.soff, a.doff = t.doff, a.scnt = t.cnt, a.dcnt = t.cnt, a.count = sizes;  // atoms are chunks
    return a;
  }
  // the cut points of each buffer: marked in a bitmap when the buffers are small and every
  // access lies inside its buffer, else sorted
  const size_t nb = sizes.size();
  std::vector<size_t> base(nb + 1, 0);
  bool inside = true;
  for (size_t b = 0; b < nb; ++b) base[b + 1] = base[b] + (size_t)std::max<int64_t>(sizes[b], 0) + 1;
  auto each_access = [&](auto&& visit) {  // visit(buffer, offset, count) of every read and write
    for (size_t i = 0; i < n; ++i) {
      const int64_t r = t.rank[i], k = t.kind[i], c = t.cnt[i];
      if (reads_source(k)) visit(i, true, (size_t)(r * 3 + t.sbuf[i]), t.soff[i], c);
      if (k != step::SEND) visit(i, false, (size_t)(r * 3 + t.dbuf[i]), t.doff[i], c);
    }
  };
  each_access([&](size_t, bool, size_t b, int64_t off, int64_t c) {
    if (off < 0 || c < 0 || off + c > sizes[b]) inside = false;
  });
  a.count.resize(nb);
  a.soff.assign(n, 0), a.scnt.assign(n, 0), a.doff.assign(n, 0), a.dcnt.assign(n, 0);
  auto record = [&](size_t i, bool source, int64_t first, int64_t past) {
    (source ? a.soff : a.doff)[i] = first;
    (source ? a.scnt : a.dcnt)[i] = past - first;
  };
  if (inside && base.back() <= 16 * n + 65536) {
    std::vector<char> cut(base.back(), 0);
    for (size_t b = 0; b < nb; ++b) cut[base[b]] = cut[base[b + 1] - 1] = 1;
    each_access([&](size_t, bool, size_t b, int64_t off, int64_t c) { cut[base[b] + (size_t)off] = cut[base[b] + (size_t)(off + c)] = 1; });
    Ints atom(base.back(), 0);  // atom[base[b] + x]: cut points of buffer b below x
    for (size_t b = 0; b < nb; ++b) {
      int64_t below = 0;
      for (size_t x = base[b]; x < base[b + 1]; ++x) {
        atom[x] = below;
        below += cut[x];
      }
      a.count[b] = below - 1;
    }
    each_access([&](size_t i, bool source, size_t b, int64_t off, int64_t c) {
      record(i, source, atom[base[b] + (size_t)off], atom[base[b] + (size_t)(off + c)]);
    });
    return a;
  }
  std::vector<Ints> cuts(nb);
  for (size_t b = 0; b < nb; ++b) cuts[b] = {0, sizes[b]};
  each_access([&](size_t, bool, size_t b, int64_t off, int64_t c) {
    cuts[b].push_back(off);
    cuts[b].push_back(off + c);
  });
  for (size_t b = 0; b < nb; ++b) {
    Ints& cut = cuts[b];
    std::sort(cut.begin(), cut.end());
    cut.erase(std::unique(cut.begin(), cut.end()), cut.end());
    a.count[b] = (int64_t)cut.size() - 1;
  }
  auto atom = [](const Ints& cut, int64_t off) { return std::lower_bound(cut.begin(), cut.end(), off) - cut.begin(); };
  each_access([&](size_t i, bool source, size_t b, int64_t off, int64_t c) {
    record(i, source, atom(cuts[b], off), atom(cuts[b], off + c));
  });
  return a;
}

}  // namespace

DagScan scan_dependencies(const Table& t, const Ints& sizes) {
  const size_t n = t.rank.size();
  const Atoms at_ = atoms_of(t, sizes);
  const Ints& atoms = at_.count;
  std::vector<size_t> base(atoms.size() + 1, 0);  // each buffer's first atom in lw / rd
  for (size_t b = 0; b < atoms.size(); ++b) base[b + 1] = base[b] + (size_t)atoms[b];
  Ints lw(base.back(), -1);  // last writer per atom
  Readers rd(base.back());   // readers since the last write
  rd.instr.reserve(2 * n);
  rd.next.reserve(2 * n);
  std::vector<int64_t> fw_slot(n, -1);      // receive -> its entry in forwarded
  DagScan out;
  out.preds.start.assign(1, 0);
  out.preds.start.reserve(n + 1);
  out.preds.flat.reserve(2 * n);
  out.depth.assign(n, 0);
  out.readers.assign(n, 0);
  Ints p, ws;
  const auto& kind = t.kind;
  for (size_t i = 0; i < n; ++i) {
    const int64_t k = kind[i], r = t.rank[i];
    const int64_t self = (int64_t)i;
    p.clear();
    if (reads_source(k)) {  // reads its source on this rank
      const int64_t b = t.sbuf[i], o = at_.soff[i], c = at_.scnt[i];
      const size_t at = base[(size_t)(r * 3 + b)];
      ws.clear();
      for (int64_t x = o; x < o + c; ++x) {
        const int64_t w = lw[at + (size_t)x];
        if (w >= 0 && !contains(ws, w)) ws.push_back(w);
        rd.add(at + (size_t)x, self);
      }
      for (int64_t w : ws) {
        p.push_back(w);
        ++out.readers[(size_t)w];
      }
      if (k == step::SEND && ws.size() == 1) {  // does it forward exactly what a receive wrote?
        const int64_t w = ws[0], kw = kind[(size_t)w];
        bool whole = (kw == step::RECV || kw == step::RRC) && t.dbuf[(size_t)w] == b && at_.doff[(size_t)w] == o &&
                     at_.dcnt[(size_t)w] == c;
        for (int64_t x = o; whole && x < o + c; ++x) whole = lw[at + (size_t)x] == w;
        if (whole) {
          int64_t& slot = fw_slot[(size_t)w];
          if (slot < 0) {
            slot = (int64_t)out.forwarded.size();
            out.forwarded.push_back(w);
            out.forwards.emplace_back();
          } else {
            out.multi_forwards = true;
          }
          out.forwards[(size_t)slot].push_back(self);
        }
      }
    }
    const int64_t c = at_.dcnt[i];
    if (k != step::SEND) {
      const int64_t b = t.dbuf[i], o = at_.doff[i];
      const size_t at = base[(size_t)(r * 3 + b)];
      if (k == step::REDUCE || k == step::RRC) {  // the destination is read too
        for (int64_t x = o; x < o + c; ++x) {
          const int64_t w = lw[at + (size_t)x];
          if (w >= 0 && !contains(p, w)) {
            p.push_back(w);
            ++out.readers[(size_t)w];
          }
          rd.add(at + (size_t)x, self);
        }
      }
      for (int64_t x = o; x < o + c; ++x) {  // the write
        const int64_t w = lw[at + (size_t)x];
        if (w >= 0 && !contains(p, w)) p.push_back(w);
        for (int64_t e = rd.head[at + (size_t)x]; e >= 0; e = rd.next[(size_t)e]) {
          const int64_t q = rd.instr[(size_t)e];
          if (q != self && !contains(p, q)) p.push_back(q);
        }
        rd.clear(at + (size_t)x);
        lw[at + (size_t)x] = self;
      }
    }
    int64_t d = 0;
    for (int64_t q : p) d = std::max(d, out.depth[(size_t)q] + 1);
    const int64_t m = t.msg_in[i];
    if (m >= 0) d = std::max(d, out.depth[(size_t)m] + 1);
    out.depth[i] = d;
    out.preds.flat.insert(out.preds.flat.end(), p.begin(), p.end());
    out.preds.start.push_back((int64_t)out.preds.flat.size());
  }
  std::vector<char> last(n + 1, 0);  // last[w + 1]: w is some atom's last writer
  for (int64_t w : lw) last[(size_t)(w + 1)] = 1;
  for (size_t w = 0; w <= n; ++w)
    if (last[w]) out.final_writers.push_back((int64_t)w - 1);
  return out;
}

Ints reverse_depths(const Rows& preds, const Ints& msg_in, const Ints& alive, const Ints& rep) {
  const size_t n = msg_in.size();
  Ints rdepth(n, 0);
  const bool fused = !rep.empty();
  for (size_t i = n; i-- > 0;) {
    if (fused && !alive[i]) continue;
    const int64_t d = rdepth[i] + 1;
    for (const int64_t* q = preds.begin(i); q != preds.end(i); ++q) {
      const size_t u = (size_t)(fused ? rep[(size_t)*q] : *q);
      if (rdepth[u] < d) rdepth[u] = d;
    }
    const int64_t m = msg_in[i];
    if (m >= 0 && rdepth[(size_t)m] < d) rdepth[(size_t)m] = d;
  }
  return rdepth;
}

}  // namespace compiler
