#!/usr/bin/env bash
# Portable.RunsOnDebian11: the portable x86_64 executables (built for glibc
# 2.28) run in the Debian 11 root of scripts/setup-debian11 (glibc 2.31,
# older than this machine's 2.36): portable_job.sh there runs jobs under
# ddprun, ddprun-launch and ddprun-rendezvous. As a control, the default
# build's ddprun (Debian 12's glibc and shared libraries) must fail to start
# there, or the test would prove nothing. Fails, never skips: without the
# binaries it says to run scripts/build-portable, without the root
# scripts/setup-debian11.
#   runs_on_debian11.sh SOURCE_DIR PORTABLE_BIN_DIR BUILD_BIN_DIR
set -euo pipefail
source_dir=$1
bin_dir=$2
build_bin_dir=$3
root=${DDPRUN_DEBIAN11_ROOT:-/var/cache/ddprun/debian11-root}
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ -f "$root/.ddprun-ready" ]] || fail "no Debian 11 root at $root: run scripts/setup-debian11"
for name in ddprun ddprun-rendezvous ddprun-launch; do
  [[ -x "$bin_dir/$name" ]] || fail "$bin_dir/$name is missing: run scripts/build-portable"
done
# In a private mount namespace: /proc, /dev and the folders the commands
# need at the same paths inside the root; they vanish with the process.
if [[ "${DDPRUN_IN_DEBIAN11:-}" != 1 ]]; then
  export DDPRUN_IN_DEBIAN11=1
  exec unshare --mount --propagation private "$0" "$@"
fi
bind() {
  mkdir -p "$root$1"
  mount --bind "$1" "$root$1"
}
mount -t proc proc "$root/proc"
# A fresh /tmp first: the folders bound below may lie under /tmp (a clone there).
mount -t tmpfs tmpfs "$root/tmp"
bind /dev
bind "$bin_dir"
bind "$build_bin_dir"
bind "$source_dir/tests/portable"
control=$(chroot "$root" "$build_bin_dir/ddprun" --help 2>&1) && started=1 || started=0
((started == 0)) || fail "the default build's ddprun started in Debian 11, so this test cannot tell"
echo "control (the default build, expected to fail): $control"
chroot "$root" env -i PATH=/usr/bin:/bin /bin/bash "$source_dir/tests/portable/portable_job.sh" \
  "$bin_dir"
