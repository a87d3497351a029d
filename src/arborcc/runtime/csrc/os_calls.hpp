// Thin wrappers of Linux calls the data plane waits and checks with: the futex a rank
// sleeps on, and whether a peer's process is still alive.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <ctime>

namespace dataplane {

inline long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const struct timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

// The process exists and is not a zombie (reads /proc: tens of microseconds).
bool process_alive(int pid);

// The state letter of /proc/<pid>/stat (R running, S sleeping, T stopped, Z zombie, ...);
// 0 when the process is gone.
char process_state(int pid);

}  // namespace dataplane
