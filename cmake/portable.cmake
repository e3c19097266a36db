# The portable build (option DDPRUN_PORTABLE, preset "portable",
# scripts/build-portable, and the source build of pyproject.toml): ddprun,
# ddprun-rendezvous and ddprun-launch as self-contained executables whose
# only NEEDED libraries are glibc's (libc, libm, libpthread, libdl,
# ld-linux). Built with zig (cmake/zig-toolchain.cmake, DDPRUN_PORTABLE_DEPS:
# scripts/build-portable) they need glibc 2.28 or newer, on x86_64 and
# aarch64; built with the host compiler (pip install of the sdist), the
# build machine's glibc.
#
# Only with DDPRUN_PORTABLE=ON, and only in a build directory of its own
# (find results are cached): the default build, and so the tests, keep
# Debian's shared libraries.
#  - LibTorch is not looked for: only worker_lib, the examples and the bench
#    use it, never the launcher, agent or daemon.
#  - OpenSSL comes from Debian's static archives (libssl.a, libcrypto.a).
#  - fmt and spdlog are used header-only, because Debian 12 ships no static
#    archives of them: ddprun_portable_finish() rewrites every link to
#    fmt::fmt / spdlog::spdlog, the project's and spdlog's own, to
#    fmt::fmt-header-only / spdlog::spdlog_header_only, so that no
#    translation unit mixes the two modes.
#  - The executables link the C++ runtime statically (libstdc++ and libgcc
#    with the host compiler; zig's libc++ always).
#
# The top-level CMakeLists.txt includes this file before its find_package()
# calls and calls ddprun_portable_finish() once every part has been added.

option(DDPRUN_PORTABLE
       "Build ddprun and ddprun-rendezvous to need only glibc at run time (no LibTorch)" OFF)
# With zig (cmake/zig-toolchain.cmake), the dependencies' headers and
# OpenSSL's static libraries for the target CPU come from this staging
# folder (include/, lib/; made by scripts/build-portable), never from this
# machine's /usr/include: zig brings the C library of the glibc version it
# builds for.
set(DDPRUN_PORTABLE_DEPS "" CACHE PATH "Staging folder of the zig build's dependencies")

# The zig build's dependency targets, with the names find_package() gives.
function(ddprun_portable_dependencies)
  set(deps ${DDPRUN_PORTABLE_DEPS})
  foreach(file include/boost/version.hpp include/fmt/format.h include/spdlog/spdlog.h
               include/nlohmann/json.hpp include/CLI/CLI.hpp include/openssl/ssl.h
               lib/libssl.a lib/libcrypto.a)
    if(NOT EXISTS ${deps}/${file})
      message(FATAL_ERROR "DDPRUN_PORTABLE_DEPS=${deps} has no ${file}: run scripts/build-portable")
    endif()
  endforeach()
  find_package(Threads REQUIRED)
  foreach(target Boost::headers nlohmann_json::nlohmann_json CLI11::CLI11
                 fmt::fmt-header-only spdlog::spdlog_header_only)
    add_library(${target} INTERFACE IMPORTED GLOBAL)
    set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${deps}/include)
  endforeach()
  set_target_properties(fmt::fmt-header-only PROPERTIES INTERFACE_COMPILE_DEFINITIONS
                                                        FMT_HEADER_ONLY=1)
  set_target_properties(spdlog::spdlog_header_only PROPERTIES
    INTERFACE_COMPILE_DEFINITIONS SPDLOG_FMT_EXTERNAL
    INTERFACE_LINK_LIBRARIES fmt::fmt-header-only)
  # The shared names: the same header-only libraries.
  add_library(fmt::fmt INTERFACE IMPORTED GLOBAL)
  set_target_properties(fmt::fmt PROPERTIES INTERFACE_LINK_LIBRARIES fmt::fmt-header-only)
  add_library(spdlog::spdlog INTERFACE IMPORTED GLOBAL)
  set_target_properties(spdlog::spdlog PROPERTIES INTERFACE_LINK_LIBRARIES
                                                  spdlog::spdlog_header_only)
  add_library(OpenSSL::Crypto STATIC IMPORTED GLOBAL)
  set_target_properties(OpenSSL::Crypto PROPERTIES
    IMPORTED_LOCATION ${deps}/lib/libcrypto.a
    INTERFACE_INCLUDE_DIRECTORIES ${deps}/include
    INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS}")
  add_library(OpenSSL::SSL STATIC IMPORTED GLOBAL)
  set_target_properties(OpenSSL::SSL PROPERTIES
    IMPORTED_LOCATION ${deps}/lib/libssl.a
    INTERFACE_INCLUDE_DIRECTORIES ${deps}/include
    INTERFACE_LINK_LIBRARIES OpenSSL::Crypto)
endfunction()

if(DDPRUN_PORTABLE)
  set(CMAKE_DISABLE_FIND_PACKAGE_Torch ON)
  set(OPENSSL_USE_STATIC_LIBS TRUE)
  message(STATUS "ddprun: portable build (static C++ runtime and OpenSSL; "
                 "header-only fmt and spdlog; no LibTorch)")
endif()

# Every target defined in DIR and below it.
function(_ddprun_portable_targets dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdir IN LISTS subdirs)
    _ddprun_portable_targets(${subdir} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# fmt::fmt -> fmt::fmt-header-only and spdlog::spdlog ->
# spdlog::spdlog_header_only in TARGET's PROPERTY, also inside the
# $<LINK_ONLY:...> that static libraries carry for their private links.
function(_ddprun_portable_use_header_only target property)
  get_target_property(links ${target} ${property})
  if(NOT links)
    return()
  endif()
  set(rewritten "")
  foreach(link IN LISTS links)
    if(link MATCHES "^([$]<LINK_ONLY:)?fmt::fmt>?$")
      string(REPLACE "fmt::fmt" "fmt::fmt-header-only" link "${link}")
    elseif(link MATCHES "^([$]<LINK_ONLY:)?spdlog::spdlog>?$")
      string(REPLACE "spdlog::spdlog" "spdlog::spdlog_header_only" link "${link}")
    endif()
    list(APPEND rewritten "${link}")
  endforeach()
  set_target_properties(${target} PROPERTIES ${property} "${rewritten}")
endfunction()

function(ddprun_portable_finish)
  if(NOT DDPRUN_PORTABLE)
    return()
  endif()
  # Debian's spdlog::spdlog_header_only links the shared fmt::fmt.
  _ddprun_portable_use_header_only(spdlog::spdlog_header_only INTERFACE_LINK_LIBRARIES)
  _ddprun_portable_targets(${PROJECT_SOURCE_DIR} targets)
  foreach(target IN LISTS targets)
    _ddprun_portable_use_header_only(${target} LINK_LIBRARIES)
    _ddprun_portable_use_header_only(${target} INTERFACE_LINK_LIBRARIES)
  endforeach()
  if(NOT DDPRUN_ZIG)  # zig links its libc++ statically anyway
    foreach(executable ddprun ddprun-rendezvous ddprun-launch)
      target_link_options(${executable} PRIVATE -static-libstdc++ -static-libgcc)
    endforeach()
  endif()
endfunction()
