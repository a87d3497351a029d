// Creating (rank 0) or opening (the others) a communicator's shared segment and mapping
// it; reserving in /dev/shm the parts of it a rank will touch (segment.hpp).

#include "segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "errors.hpp"

namespace dataplane {

Segment::Segment(const std::string& name, bool create, int nranks, int channels, int slots, uint64_t slot_bytes) {
  int fd;
  if (create) {
    if (nranks < 1 || nranks > MAX_RANKS) throw CommError("a communicator holds 1-64 ranks");
    if (slots < 1 || slots > MAX_SLOTS) throw CommError("FIFO slots must be 1-16");
    size_t conn_off = align_up(sizeof(Header), 4096);
    size_t nconn = (size_t)nranks * nranks * channels;
    size_t data_off = align_up(conn_off + nconn * sizeof(ConnCtl), 4096);
    size_t total = data_off + nconn * slots * slot_bytes;
    fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) throw CommError("cannot create shared memory /dev/shm" + name + ": " + strerror(errno));
    if (ftruncate(fd, (off_t)total) != 0) {
      int e = errno;
      close(fd);
      shm_unlink(name.c_str());
      throw CommError("cannot size shared memory " + name + ": " + strerror(e));
    }
    fd_ = fd;
    std::string full = reserve({{0, conn_off}}, "the communicator's header", "");
    if (!full.empty()) {
      close(fd);
      shm_unlink(name.c_str());
      throw CommError(full);
    }
    size_ = total;
    base_ = (char*)mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (base_ == MAP_FAILED) {
      close(fd);
      shm_unlink(name.c_str());
      throw CommError("cannot map shared memory " + name);
    }
    hdr_ = (Header*)base_;
    hdr_->nranks = nranks;
    hdr_->channels = channels;
    hdr_->slots = slots;
    hdr_->slot_bytes = slot_bytes;
    hdr_->total_size = total;
    hdr_->conn_off = conn_off;
    hdr_->data_off = data_off;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    __atomic_store_n(&hdr_->magic, MAGIC, __ATOMIC_RELEASE);
  } else {
    fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0)
      throw CommError("cannot open shared memory /dev/shm" + name + ": " + strerror(errno) +
                      (errno == ENOENT ? " (rank 0 could not make it: see its error)" : ""));
    fd_ = fd;
    struct stat st;
    fstat(fd, &st);
    size_ = (size_t)st.st_size;
    base_ = (char*)mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (base_ == MAP_FAILED) {
      close(fd);
      throw CommError("cannot map shared memory " + name);
    }
    hdr_ = (Header*)base_;
    if (__atomic_load_n(&hdr_->magic, __ATOMIC_ACQUIRE) != MAGIC) {
      munmap(base_, size_);
      close(fd);
      throw CommError("shared memory " + name + " is not an arborcc communicator of this version");
    }
  }
}

Segment::~Segment() {
  if (base_ && base_ != MAP_FAILED) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
}

std::string space_message(uint64_t needed, const std::string& what, const std::string& remedy) {
  struct statvfs vfs;
  std::string free = "?", total = "?";
  if (statvfs("/dev/shm", &vfs) == 0) {
    free = std::to_string((uint64_t)vfs.f_bavail * vfs.f_frsize);
    total = std::to_string((uint64_t)vfs.f_blocks * vfs.f_frsize);
  }
  return "not enough shared memory: /dev/shm has " + free + " bytes free (of " + total + "), this rank needs " +
         std::to_string(needed) + " bytes of it for " + what + "; give it more (a container: docker run --shm-size=...)" +
         (remedy.empty() ? "" : " or " + remedy);
}

// what makes the slots, and so the messages in them, smaller
static const char* const SMALLER_SLOTS = "make the slots smaller (ARBORCC_SLOT_BYTES)";

std::string Segment::reserve(const std::vector<std::pair<uint64_t, uint64_t>>& ranges, const std::string& what,
                             const std::string& remedy) {
  uint64_t needed = 0;
  for (const auto& r : ranges) needed += r.second;
  for (const auto& r : ranges) {
    if (r.second == 0) continue;
    int rc;
    do {
      rc = fallocate(fd_, 0, (off_t)r.first, (off_t)r.second);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) continue;
    if (errno == EOPNOTSUPP || errno == ENOSYS) return "";  // not tmpfs: nothing to reserve with
    if (errno == ENOSPC) return space_message(needed, what, remedy);
    return "cannot reserve shared memory for " + what + ": " + strerror(errno);
  }
  return "";
}

std::string Segment::reserve_call(int rank, const Program& prog, size_t esize, int64_t tile, bool cma,
                                  uint64_t cma_threshold) {
  const uint64_t per_slot = slot_bytes_written(prog, esize, tile, cma, cma_threshold, slot_bytes());
  const int n = nranks(), ch = channels(), nslots = slots();
  if (sent_.empty()) {
    sent_.assign((size_t)n * ch, 0);
    received_.assign((size_t)n * ch, 0);
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::vector<size_t> sends, receives;
  for (const TB& tb : prog.tbs) {
    if (tb.send >= 0 && tb.send < n && tb.channel >= 0 && tb.channel < ch) {
      size_t i = (size_t)tb.send * ch + tb.channel;
      if (sent_[i] == 0) ranges.push_back({offset(conn(rank, tb.send, tb.channel)), sizeof(ConnCtl)});
      if (sent_[i] < per_slot + 1) {
        for (int s = 0; s < nslots; ++s) ranges.push_back({offset(slot_data(rank, tb.send, tb.channel, s)), per_slot});
        sends.push_back(i);
      }
    }
    if (tb.recv >= 0 && tb.recv < n && tb.channel >= 0 && tb.channel < ch) {
      size_t i = (size_t)tb.recv * ch + tb.channel;
      if (!received_[i]) {
        ranges.push_back({offset(conn(tb.recv, rank, tb.channel)), sizeof(ConnCtl)});
        receives.push_back(i);
      }
    }
  }
  if (ranges.empty()) return "";
  std::string err = reserve(ranges, "its messages (" + std::to_string(nslots) + " slots of " + std::to_string(per_slot) +
                                        " bytes per connection it sends on)",
                                SMALLER_SLOTS);
  if (!err.empty()) return err;
  for (size_t i : sends) sent_[i] = std::max<uint64_t>(sent_[i], per_slot + 1);
  for (size_t i : receives) received_[i] = 1;
  return "";
}

std::string Segment::reserve_staging(int rank, uint64_t head_bytes, int slots, uint64_t slot_bytes,
                                     uint64_t call_bytes) {
  const uint64_t per_slot = std::min(slot_bytes, call_bytes);
  if (staged_ >= per_slot + 1) return "";
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  if (staged_ == 0)
    for (int q = 0; q < nranks(); ++q) ranges.push_back({offset(slot_data(q, q, 0, 0)), head_bytes});
  const uint64_t ring = offset(slot_data(rank, rank, 0, 0)) + head_bytes;
  for (int s = 0; s < slots; ++s) ranges.push_back({ring + (uint64_t)s * slot_bytes, per_slot});
  std::string err = reserve(ranges, "its staging ring (" + std::to_string(slots) + " slots of " +
                                        std::to_string(per_slot) + " bytes)",
                                "make the staging ring's slots smaller (ARBORCC_STAGED_SLICE_BYTES)");
  if (err.empty()) staged_ = per_slot + 1;
  return err;
}

std::string Segment::reserve_demotion(int rank, int dst, int ch, uint64_t slot, uint64_t bytes) {
  if (!sent_.empty() && sent_[(size_t)dst * channels() + ch] >= bytes + 1) return "";
  return reserve({{offset(slot_data(rank, dst, ch, slot)), bytes}},
                 "a message it copies into a slot (" + std::to_string(bytes) + " bytes)", SMALLER_SLOTS);
}

uint64_t slot_bytes_written(const Program& prog, size_t esize, int64_t tile, bool cma, uint64_t cma_threshold,
                            uint64_t slot_bytes) {
  uint64_t message = (uint64_t)prog.max_cnt * (uint64_t)std::max<int64_t>(tile, 0) * esize;
  const bool always_inline =
      std::any_of(prog.steps.begin(), prog.steps.end(), [](const Step& s) { return s.op == step::RRS; });
  if (cma && !always_inline) message = std::min(message, cma_threshold);
  return std::min(message, slot_bytes);
}

}  // namespace dataplane
