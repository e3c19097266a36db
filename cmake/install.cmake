# Installs the binaries and the worker library with a CMake package, so a
# user's project can say:
#   find_package(ddprun REQUIRED)
#   target_link_libraries(train PRIVATE ddprun::worker)
#
# Under scikit-build-core (pip install ., pyproject.toml) only the two
# executables are installed, into the wheel's scripts directory, which pip
# puts on PATH (a venv's bin/).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

if(SKBUILD)
  install(TARGETS ddprun ddprun-rendezvous ddprun-launch RUNTIME DESTINATION ${SKBUILD_SCRIPTS_DIR})
  return()
endif()

install(TARGETS ddprun ddprun-rendezvous ddprun-launch RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

if(TARGET ddprun_worker)
  # The exported names: ddprun::worker, ddprun::worker_env, ...
  foreach(target common rendezvous_wire rendezvous_client worker_env worker)
    set_target_properties(ddprun_${target} PROPERTIES EXPORT_NAME ${target})
  endforeach()
  install(TARGETS ddprun_common ddprun_rendezvous_wire ddprun_rendezvous_client
                  ddprun_worker_env ddprun_worker
          EXPORT ddprunTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(DIRECTORY common/include/ worker_lib/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  # Workers need only the client side of the rendezvous headers (and the
  # wire types the client's API uses).
  install(DIRECTORY rendezvous/client/include/ rendezvous/wire/include/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT ddprunTargets NAMESPACE ddprun::
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ddprun)
  configure_package_config_file(cmake/ddprunConfig.cmake.in
    ${CMAKE_CURRENT_BINARY_DIR}/ddprunConfig.cmake
    INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ddprun)
  write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/ddprunConfigVersion.cmake
    COMPATIBILITY SameMinorVersion)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ddprunConfig.cmake
                ${CMAKE_CURRENT_BINARY_DIR}/ddprunConfigVersion.cmake
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ddprun)
endif()
