#!/usr/bin/env bash
# Portable.Aarch64UnderQemu: the portable aarch64 executables run under
# Debian's qemu-user-static with the aarch64 glibc of scripts/setup-portable
# (SYSROOT): each prints its version, and ddprun runs a job of two workers.
# The workers are this machine's own x86_64 programs (qemu-user runs only
# ddprun's aarch64 code; what it execs runs natively), and each says which
# CPU ddprun itself runs on. Fails, never skips.
#   aarch64_under_qemu.sh BIN_DIR SYSROOT
set -euo pipefail
bin_dir=$(cd "$1" 2>/dev/null && pwd || echo "$1")
sysroot=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
qemu=$(command -v qemu-aarch64-static || true)
[[ -n "$qemu" ]] || fail "qemu-aarch64-static is missing: run scripts/setup"
[[ -e "$sysroot/lib/ld-linux-aarch64.so.1" ]] ||
  fail "no aarch64 glibc in $sysroot: run scripts/setup-portable aarch64"
for name in ddprun ddprun-rendezvous ddprun-launch; do
  binary=$bin_dir/$name
  [[ -x "$binary" ]] || fail "$binary is missing: run scripts/build-portable aarch64"
  echo "$name: $(readelf -h "$binary" | grep -o 'Machine:.*')"
  version=$("$qemu" -L "$sysroot" "$binary" --version) || fail "$name --version failed under qemu"
  echo "$version"
  [[ "$version" == "$name "* ]] || fail "$name --version printed: $version"
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The workers are x86_64 programs started by the emulated aarch64 ddprun.
worker='echo "rank $RANK of $WORLD_SIZE on $(uname -m)"'
out=$(cd "$work" && "$qemu" -L "$sysroot" "$bin_dir/ddprun" --nproc_per_node=2 --log_prefix= \
  /bin/sh -c "$worker" 2>&1) || fail "ddprun under qemu exited with $?: $out"
echo "$out"
for rank in 0 1; do
  grep -q "rank $rank of 2 on x86_64" <<<"$out" || fail "no rank $rank in: $out"
done
echo "PASS"
