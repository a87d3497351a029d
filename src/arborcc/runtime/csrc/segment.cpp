// Creating (rank 0) or opening (the others) a communicator's shared segment and mapping it.

#include "segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
    size_ = total;
    base_ = (char*)mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    close(fd);
    if (base_ == MAP_FAILED) {
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
    if (fd < 0) throw CommError("cannot open shared memory /dev/shm" + name + ": " + strerror(errno));
    struct stat st;
    fstat(fd, &st);
    size_ = (size_t)st.st_size;
    base_ = (char*)mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    close(fd);
    if (base_ == MAP_FAILED) throw CommError("cannot map shared memory " + name);
    hdr_ = (Header*)base_;
    if (__atomic_load_n(&hdr_->magic, __ATOMIC_ACQUIRE) != MAGIC)
      throw CommError("shared memory " + name + " is not an arborcc communicator of this version");
  }
}

Segment::~Segment() {
  if (base_ && base_ != MAP_FAILED) munmap(base_, size_);
}

}  // namespace dataplane
