// Orbits from generators by union-find (orbits.hpp).

#include "orbits.hpp"

#include <stdexcept>
#include <utility>

namespace synth {

OrbitPartition::OrbitPartition(int64_t size) : parent_((size_t)size) {
  for (int64_t v = 0; v < size; ++v) parent_[(size_t)v] = v;
}

int64_t OrbitPartition::find(int64_t v) {
  while (parent_[(size_t)v] != v) {
    parent_[(size_t)v] = parent_[(size_t)parent_[(size_t)v]];  // path halving
    v = parent_[(size_t)v];
  }
  return v;
}

void OrbitPartition::join_permutation(const std::vector<int64_t>& perm) {
  if ((int64_t)perm.size() != size()) throw std::invalid_argument("a permutation of another size");
  for (int64_t v = 0; v < size(); ++v) {
    const int64_t w = perm[(size_t)v];
    if (w == v) continue;
    if (w < 0 || w >= size()) throw std::invalid_argument("a permutation maps outside its points");
    int64_t a = find(v), b = find(w);
    if (a == b) continue;
    if (b < a) std::swap(a, b);
    parent_[(size_t)b] = a;  // the smaller root stays: roots are their class's smallest member
  }
}

std::vector<int64_t> OrbitPartition::labels() {
  std::vector<int64_t> out((size_t)size());
  for (int64_t v = 0; v < size(); ++v) out[(size_t)v] = find(v);
  return out;
}

}  // namespace synth
