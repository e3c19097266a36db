# The toolchain of the portable build (scripts/build-portable): zig's clang
# (ziglang from PyPI, requirements/portable.txt) compiling for one CPU and
# one glibc version, e.g. -DDDPRUN_ZIG_TARGET=aarch64-linux-gnu.2.28, with
# libc++ linked statically. The executables then need nothing but glibc
# 2.28 or newer (PyTorch's wheels are manylinux_2_28 too), on any distribution
# and, cross-compiled, on aarch64 (Grace).
#
#   -DDDPRUN_ZIG=<the zig executable>  -DDDPRUN_ZIG_TARGET=<cpu>-linux-gnu.<glibc>
#
# The compiler is a wrapper script written into the build directory (CMake
# takes one executable as the compiler, zig needs `zig c++ -target ...`).
# zig reads no header or library of this machine: the dependencies come
# from the staging folder of DDPRUN_PORTABLE_DEPS (cmake/portable.cmake).
if(NOT DDPRUN_ZIG OR NOT DDPRUN_ZIG_TARGET)
  message(FATAL_ERROR "zig-toolchain.cmake needs -DDDPRUN_ZIG=... and -DDDPRUN_ZIG_TARGET=...")
endif()
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES DDPRUN_ZIG DDPRUN_ZIG_TARGET)

set(CMAKE_SYSTEM_NAME Linux)
string(REGEX MATCH "^[^-]+" CMAKE_SYSTEM_PROCESSOR "${DDPRUN_ZIG_TARGET}")
set(CMAKE_LIBRARY_ARCHITECTURE ${CMAKE_SYSTEM_PROCESSOR}-linux-gnu)

foreach(tool cc c++ ar ranlib)
  set(target_flag "")
  if(tool STREQUAL "cc" OR tool STREQUAL "c++")
    set(target_flag "-target ${DDPRUN_ZIG_TARGET}")
  endif()
  file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/zig/${tool}
       CONTENT "#!/bin/sh\nexec '${DDPRUN_ZIG}' ${tool} ${target_flag} \"$@\"\n")
  file(CHMOD ${CMAKE_BINARY_DIR}/zig/${tool} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE
       GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endforeach()
set(CMAKE_C_COMPILER ${CMAKE_BINARY_DIR}/zig/cc)
set(CMAKE_CXX_COMPILER ${CMAKE_BINARY_DIR}/zig/c++)
# Stripped: the executables go into wheels (46 MB with symbols, 9 without).
set(CMAKE_EXE_LINKER_FLAGS_INIT "-s")
# What glibc before 2.34 lacks and newer kernel headers make libraries call.
string(REGEX MATCH "[0-9]+\\.[0-9]+$" glibc_version "${DDPRUN_ZIG_TARGET}")
if(glibc_version VERSION_LESS 2.34)
  set(CMAKE_CXX_FLAGS_INIT "-include ${CMAKE_CURRENT_LIST_DIR}/zig/glibc_compat.h")
endif()
set(CMAKE_AR ${CMAKE_BINARY_DIR}/zig/ar CACHE FILEPATH "zig ar")
set(CMAKE_RANLIB ${CMAKE_BINARY_DIR}/zig/ranlib CACHE FILEPATH "zig ranlib")

# Nothing of this machine's headers or libraries.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
