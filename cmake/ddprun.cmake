# Helpers shared by every part: one way to declare a library, an executable
# and a test, so warnings and layout rules are set in one place.

function(ddprun_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
                                           -Wnon-virtual-dtor -Werror=switch)
  if(DDPRUN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC warns of types in an anonymous namespace inside a class only when
    # they come from an included file, as every source of a unity unit does.
    target_compile_options(${target} PRIVATE -Wno-subobject-linkage)
  endif()
endfunction()

# ddprun_add_library(NAME ALIAS SOURCES ...): a static library whose public
# headers live in <part>/include and private headers beside its sources.
function(ddprun_add_library name)
  cmake_parse_arguments(ARG "" "ALIAS" "SOURCES" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name}
    PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
           $<INSTALL_INTERFACE:include>
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  ddprun_set_warnings(${name})
  if(ARG_ALIAS)
    add_library(${ARG_ALIAS} ALIAS ${name})
  endif()
endfunction()

function(ddprun_add_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  ddprun_set_warnings(${name})
endfunction()

# ddprun_embed_text(TARGET FILE CONSTANT): the text of FILE (relative to the
# calling CMakeLists.txt) as `inline constexpr char CONSTANT[]` in namespace
# ddprun::agent, in the generated header <FILE's stem>_source.h on TARGET's
# private include path; CMake configures again when FILE changes. For the
# Python programs the agent writes into the run directory (no install path
# to find at run time).
function(ddprun_embed_text target file constant)
  get_filename_component(stem ${file} NAME_WE)
  set(source ${CMAKE_CURRENT_SOURCE_DIR}/${file})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${source})
  file(READ ${source} DDPRUN_EMBEDDED_TEXT)
  file(RELATIVE_PATH from ${PROJECT_SOURCE_DIR} ${source})
  file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/generated/${stem}_source.h
    CONTENT "// Generated from ${from} by ddprun_embed_text (cmake/ddprun.cmake).\n#pragma once\n\nnamespace ddprun::agent {\ninline constexpr char ${constant}[] = R\"ddprun_text(@DDPRUN_EMBEDDED_TEXT@)ddprun_text\";\n}  // namespace ddprun::agent\n"
    @ONLY)
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/generated)
endfunction()
