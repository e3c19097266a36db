// Force-included into every translation unit of the zig build for glibc
// older than 2.34 (cmake/zig-toolchain.cmake). Functions that newer kernel
// headers make libraries use, but that glibc gained only later, as their
// system calls: the executables then need no newer glibc.
//   close_range (glibc 2.34): Boost.Process v2 calls it when the kernel
//   headers are 5.11 or newer.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#if defined(SYS_close_range)
static inline int close_range(unsigned int first, unsigned int last, int flags) {
  return static_cast<int>(::syscall(SYS_close_range, first, last, flags));
}
#endif
