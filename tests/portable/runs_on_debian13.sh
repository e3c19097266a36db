#!/usr/bin/env bash
# Portable.RunsOnDebian13: the portable ddprun and ddprun-rendezvous, built
# on Debian 12, run in the Debian 13 (trixie) root of scripts/setup-torch2
# with that system's libraries only: scripts/torch2-run adds
# /opt/ddprun-host-libs (Debian 12's spdlog, fmt) to LD_LIBRARY_PATH, and
# this test removes it again (env -u LD_LIBRARY_PATH) before
# portable_job.sh runs there. As a control, the default build's ddprun
# (BUILD_BIN_DIR, Debian 12's shared libraries) must fail to start there
# for want of a shared library, or the test would prove nothing.
# Fails, never skips: without the binaries it says to run
# scripts/build-portable, without the root scripts/torch2-run says to run
# scripts/setup-torch2.
#   runs_on_debian13.sh SOURCE_DIR PORTABLE_BIN_DIR BUILD_BIN_DIR
set -euo pipefail
source_dir=$1
bin_dir=$2
build_bin_dir=$3
for name in ddprun ddprun-rendezvous; do
  if [[ ! -x "$bin_dir/$name" ]]; then
    echo "FAIL: $bin_dir/$name is missing: run scripts/build-portable first" >&2
    exit 1
  fi
done
run=("$source_dir/scripts/torch2-run" env -u LD_LIBRARY_PATH)
control=$("${run[@]}" "$build_bin_dir/ddprun" --help 2>&1) && started=1 || started=0
if ((started)); then
  echo "FAIL: the default build's ddprun started in the Debian 13 root without" \
       "/opt/ddprun-host-libs, so this test cannot tell a portable binary from another" >&2
  exit 1
fi
if [[ "$control" != *"error while loading shared libraries"* ]]; then
  echo "FAIL: cannot run in the Debian 13 root: $control" >&2
  exit 1
fi
echo "control (the default build, expected to fail): $control"
"${run[@]}" /bin/bash "$source_dir/tests/portable/portable_job.sh" "$bin_dir"
