// A rank's view of a communicator's shared segment (segment_layout.hpp): creating or
// opening and mapping it (segment.cpp), and where each connection's control block and
// slots are (inline here: the interpreter asks at every step).
#pragma once

#include <cstdint>
#include <string>

#include "segment_layout.hpp"

namespace dataplane {

class Segment {
 public:
  Segment(const std::string& name, bool create, int nranks, int channels, int slots, uint64_t slot_bytes);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  Header* hdr() const { return hdr_; }
  int nranks() const { return (int)hdr_->nranks; }
  int channels() const { return (int)hdr_->channels; }
  int slots() const { return (int)hdr_->slots; }
  uint64_t slot_bytes() const { return hdr_->slot_bytes; }
  ConnCtl* conn(int src, int dst, int ch) const {
    return (ConnCtl*)(base_ + hdr_->conn_off) + ((size_t)src * hdr_->nranks + dst) * hdr_->channels + ch;
  }
  char* base() const { return base_; }
  uint64_t offset(const void* p) const { return (uint64_t)((const char*)p - base_); }
  char* slot_data(int src, int dst, int ch, uint64_t slot) const {
    size_t idx = ((size_t)src * hdr_->nranks + dst) * hdr_->channels + ch;
    return base_ + hdr_->data_off + (idx * hdr_->slots + slot) * hdr_->slot_bytes;
  }

 private:
  char* base_ = nullptr;
  size_t size_ = 0;
  Header* hdr_ = nullptr;
};

}  // namespace dataplane
