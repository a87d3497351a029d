// Orbits of a permutation group from its generators (arborcc.synth.symmetry): the
// classes of the union of i ~ perm(i) over the generators, each labelled by its
// smallest element. A disjoint-set forest (Tarjan, "Efficiency of a good but not linear
// set union algorithm", J. ACM 22(2), 1975, https://doi.org/10.1145/321879.321884).

#pragma once

#include <cstdint>
#include <vector>

namespace synth {

class OrbitPartition {
 public:
  explicit OrbitPartition(int64_t size);
  int64_t size() const { return (int64_t)parent_.size(); }
  // join every point with its image under `perm` (a permutation of 0..size-1)
  void join_permutation(const std::vector<int64_t>& perm);
  // the smallest member of each point's orbit
  std::vector<int64_t> labels();

 private:
  int64_t find(int64_t v);
  std::vector<int64_t> parent_;
};

}  // namespace synth
