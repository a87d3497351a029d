// Sets of ranks (the "mask" of a symbolic value, arborcc.verify.values: bit r for rank r)
// interned in a table, so that a value is two integers whatever the rank count and
// equal sets have equal ids. Unions are remembered.

#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace verify {

class MaskTable {
 public:
  explicit MaskTable(int num_ranks) : words_((num_ranks + 63) / 64 > 0 ? (num_ranks + 63) / 64 : 1) {}

  int singleton(int rank) {
    std::vector<uint64_t> w(words_, 0);
    w[rank / 64] |= uint64_t(1) << (rank % 64);
    return intern(w.data());
  }

  int everyone(int num_ranks) {
    std::vector<uint64_t> w(words_, 0);
    for (int r = 0; r < num_ranks; ++r) w[r / 64] |= uint64_t(1) << (r % 64);
    return intern(w.data());
  }

  bool overlap(int a, int b) const {
    const uint64_t *x = at(a), *y = at(b);
    for (int k = 0; k < words_; ++k)
      if (x[k] & y[k]) return true;
    return false;
  }

  std::vector<int> ranks(int id) const {  // the ranks of a set, increasing
    std::vector<int> out;
    const uint64_t* w = at(id);
    for (int k = 0; k < words_; ++k)
      for (int b = 0; b < 64; ++b)
        if (w[k] >> b & 1) out.push_back(k * 64 + b);
    return out;
  }

  int unite(int a, int b) {
    if (a > b) std::swap(a, b);
    const uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
    auto it = unions_.find(key);
    if (it != unions_.end()) return it->second;
    std::vector<uint64_t> w(at(a), at(a) + words_);
    const uint64_t* y = at(b);
    for (int k = 0; k < words_; ++k) w[k] |= y[k];
    int id = intern(w.data());
    unions_.emplace(key, id);
    return id;
  }

 private:
  const uint64_t* at(int id) const { return store_.data() + size_t(id) * words_; }

  int intern(const uint64_t* w) {
    std::string key(reinterpret_cast<const char*>(w), sizeof(uint64_t) * words_);
    auto it = ids_.find(key);
    if (it != ids_.end()) return it->second;
    int id = (int)(store_.size() / words_);
    store_.insert(store_.end(), w, w + words_);
    ids_.emplace(std::move(key), id);
    return id;
  }

  int words_;
  std::vector<uint64_t> store_;
  std::unordered_map<std::string, int> ids_;
  std::unordered_map<uint64_t, int> unions_;
};

}  // namespace verify
