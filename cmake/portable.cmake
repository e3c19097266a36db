# The portable build (option DDPRUN_PORTABLE, preset "portable",
# scripts/build-portable, and the wheel of pyproject.toml): ddprun and
# ddprun-rendezvous as self-contained executables whose only NEEDED
# libraries are glibc's (libc, libm, ld-linux), so one binary runs on any
# x86_64 Linux whose glibc is at least the build machine's (2.36 on
# Debian 12), without Debian 12's spdlog, fmt, OpenSSL or libstdc++.
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
#  - ddprun and ddprun-rendezvous link libstdc++ and libgcc statically.
#
# The top-level CMakeLists.txt includes this file before its find_package()
# calls and calls ddprun_portable_finish() once every part has been added.

option(DDPRUN_PORTABLE
       "Build ddprun and ddprun-rendezvous to need only glibc at run time (no LibTorch)" OFF)

if(DDPRUN_PORTABLE)
  set(CMAKE_DISABLE_FIND_PACKAGE_Torch ON)
  set(OPENSSL_USE_STATIC_LIBS TRUE)
  message(STATUS "ddprun: portable build (static libstdc++, libgcc and OpenSSL; "
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
  foreach(executable ddprun ddprun-rendezvous ddprun-launch)
    target_link_options(${executable} PRIVATE -static-libstdc++ -static-libgcc)
  endforeach()
endfunction()
