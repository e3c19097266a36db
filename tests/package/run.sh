#!/usr/bin/env bash
# Installs the ddprun build in BUILD_DIR into a scratch prefix, builds
# tests/package (find_package(ddprun)) against it and runs the result.
set -euo pipefail
build_dir=$1
source_dir=$2
work=$build_dir/package-test
rm -rf "$work"
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "$source_dir/tests/package" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" "${launcher[@]}" >/dev/null
cmake --build "$work/build" >/dev/null
test -x "$work/prefix/bin/ddprun" && test -f "$work/prefix/include/ddprun/worker/ddp.h"
DDPRUN_RENDEZVOUS_BIN="$work/prefix/bin/ddprun-rendezvous" "$work/build/consumer"
