#!/usr/bin/env bash
# Portable.BinariesNeedGlibc228Only (and the wheel's check): every
# executable of BIN_DIR (ddprun, ddprun-rendezvous, ddprun-launch) is built
# for CPU (x86_64 or aarch64), every NEEDED library is glibc's own (libc,
# libm, libpthread, libdl, librt, ld-linux), and no symbol it takes from
# glibc is newer than GLIBC_<MAX> (2.28: RHEL 8, PyTorch's manylinux_2_28).
# Anything else fails the test with the list. Without the binaries it fails
# and says to run scripts/build-portable.
#   needs_only_glibc.sh BIN_DIR CPU [MAX]
set -euo pipefail
bin_dir=$1
cpu=$2
max=${3:-2.28}
glibc='^(libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|ld-linux[-a-z0-9_.]*\.so\.[0-9]+)$'
case $cpu in
  x86_64) machine="Advanced Micro Devices X86-64" ;;
  aarch64) machine="AArch64" ;;
  *) echo "FAIL: unknown CPU $cpu" >&2; exit 2 ;;
esac
status=0
for name in ddprun ddprun-rendezvous ddprun-launch; do
  binary=$bin_dir/$name
  if [[ ! -x "$binary" ]]; then
    echo "FAIL: $binary is missing: run scripts/build-portable first" >&2
    exit 1
  fi
  readelf -h "$binary" | grep -q "Machine: *$machine\$" ||
    { echo "FAIL: $binary is not built for $cpu: $(readelf -h "$binary" | grep Machine)" >&2; status=1; }
  needed=$(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  outside=$(grep -Ev "$glibc" <<<"$needed" || true)
  if [[ -n "$outside" ]]; then
    echo "FAIL: $binary needs libraries outside glibc: $(echo $outside)" >&2
    status=1
  fi
  # The glibc versions its symbols need (readelf reads any CPU's ELF).
  versions=$(readelf -V --wide "$binary" | grep -oE 'Name: GLIBC_[0-9.]+' | sed 's/Name: GLIBC_//' |
    sort -uV)
  newest=$(tail -n1 <<<"$versions")
  echo "$binary ($cpu): needs $(echo $needed); glibc symbols up to $newest"
  if [[ "$(printf '%s\n%s\n' "$newest" "$max" | sort -V | tail -n1)" != "$max" ]]; then
    echo "FAIL: $binary needs GLIBC_$newest, newer than $max:" \
      "$(readelf -V --wide "$binary" | grep -oE "GLIBC_[0-9.]+" | sort -uV | tr '\n' ' ')" >&2
    status=1
  fi
done
exit $status
