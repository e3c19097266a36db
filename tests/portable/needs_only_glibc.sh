#!/usr/bin/env bash
# Portable.BinariesNeedOnlyGlibc: every NEEDED library of the executables
# in BIN_DIR (ddprun, ddprun-rendezvous) must be glibc's own (libc, libm,
# libpthread, libdl, librt, ld-linux); anything else (libstdc++, libgcc_s,
# libspdlog, libfmt, libssl, libcrypto, ...) fails the test with the list.
# Without the binaries it fails and says to run scripts/build-portable.
#   needs_only_glibc.sh BIN_DIR
set -euo pipefail
bin_dir=$1
glibc='^(libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|ld-linux[-a-z0-9_.]*\.so\.[0-9]+)$'
status=0
for name in ddprun ddprun-rendezvous; do
  binary=$bin_dir/$name
  if [[ ! -x "$binary" ]]; then
    echo "FAIL: $binary is missing: run scripts/build-portable first" >&2
    exit 1
  fi
  needed=$(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  echo "$binary needs: $(echo $needed)"
  ldd "$binary"
  outside=$(grep -Ev "$glibc" <<<"$needed" || true)
  if [[ -n "$outside" ]]; then
    echo "FAIL: $binary needs libraries outside glibc: $(echo $outside)" >&2
    status=1
  fi
done
exit $status
