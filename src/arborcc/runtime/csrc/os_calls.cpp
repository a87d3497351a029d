// process_alive and process_state (os_calls.hpp): kill(pid, 0), then the state letter of /proc/<pid>/stat.

#include "os_calls.hpp"

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace dataplane {

bool process_alive(int pid) {
  char state = process_state(pid);
  return state != 0 && state != 'Z' && state != 'X';
}

char process_state(int pid) {
  if (pid <= 0) return 0;
  if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  char buf[512];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char* p = strrchr(buf, ')');
  if (!p || p[1] != ' ') return '?';
  return p[2];
}

}  // namespace dataplane
