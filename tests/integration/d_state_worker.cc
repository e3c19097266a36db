// A worker that stays in uninterruptible sleep (state D), as one stuck on a
// wedged driver or a dead NFS server would: rank 0 vforks a child that
// never execs or exits, so rank 0 waits in the kernel (vfork's wait is
// TASK_KILLABLE, shown as D in /proc/<pid>/stat) until it is killed. The
// other ranks sleep. Prints "rank N up" first.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

int main() {
  const char* rank = std::getenv("RANK");
  std::cout << "rank " << (rank ? rank : "?") << " up" << std::endl;
  if (rank != nullptr && std::string(rank) == "0") {
    if (::vfork() == 0) {
      for (;;) ::pause();  // the child: only system calls until killed
    }
  }
  ::sleep(120);
  return 0;
}
