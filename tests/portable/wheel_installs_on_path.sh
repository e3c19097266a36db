#!/usr/bin/env bash
# Package.WheelInstallsDdprunOnPath: the x86_64 wheel of scripts/build-dist,
# installed with pip (offline: --no-index, it has no dependencies) into a
# fresh venv in a temporary folder, puts ddprun, ddprun-rendezvous and
# ddprun-launch on that venv's PATH (VENV/bin); `ddprun --version` names the
# version and the commit, the installed ddprun runs two workers, and every
# installed executable needs only glibc 2.28 (needs_only_glibc.sh).
# `auditwheel show` accepts both wheels (x86_64 and aarch64) as
# manylinux_2_28, and the sdist is there. Fails, never skips: without the
# files it says to run scripts/build-dist.
#   wheel_installs_on_path.sh DIST_DIR
set -euo pipefail
dist=$1
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
shopt -s nullglob
for cpu in x86_64 aarch64; do
  wheels=("$dist"/ddprun-*-py3-none-manylinux_2_28_$cpu.whl)
  ((${#wheels[@]} == 1)) ||
    fail "expected one $cpu wheel in $dist, found ${#wheels[@]}: run scripts/build-dist first"
  auditwheel=$("$source_dir/scripts/setup-python" --path portable)/bin/auditwheel
  shown=$("$auditwheel" show "${wheels[0]}" 2>&1) || fail "auditwheel show failed: $shown"
  echo "$shown"
  # "consistent with the following platform tag: manylinux_2_NN_<cpu>", NN <= 28.
  minor=$(tr -d '\n' <<<"$shown" | sed -n "s/.*platform tag: *\"manylinux_2_\([0-9]*\)_$cpu\".*/\1/p")
  [[ -n "$minor" ]] && ((minor <= 28)) ||
    fail "auditwheel does not accept ${wheels[0]} as manylinux_2_28 (or lower)"
done
sdists=("$dist"/ddprun-*.tar.gz)
((${#sdists[@]} == 1)) || fail "expected one sdist in $dist, found ${#sdists[@]}"
# It carries the commit for --version (it has no .git).
files=$(tar tzf "${sdists[0]}")
grep -q '/\.commit$' <<<"$files" || fail "${sdists[0]} has no .commit"
wheel=("$dist"/ddprun-*-manylinux_2_28_x86_64.whl)
python=${DDPRUN_VENV_PYTHON:-$(command -v python3.11 || command -v python3)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
venv=$work/venv
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --no-index --no-deps "${wheel[0]}"
# As a user of the activated venv sees it.
for exe in ddprun ddprun-rendezvous ddprun-launch; do
  found=$(PATH="$venv/bin:$PATH" command -v "$exe") || fail "$exe is not on the venv's PATH"
  [[ "$found" == "$venv/bin/$exe" ]] || fail "$exe on PATH is $found, not $venv/bin/$exe"
done
echo "on PATH: $venv/bin/{ddprun,ddprun-rendezvous,ddprun-launch}"
version=$(PATH="$venv/bin:$PATH" ddprun --version)
echo "$version"
[[ "$version" =~ ^ddprun\ [0-9.]+\ \(commit\ [0-9a-f]{12} ]] || fail "ddprun --version printed: $version"
out=$(cd "$work" && PATH="$venv/bin:$PATH" ddprun --nproc_per_node=2 /bin/sh -c 'echo rank $RANK' 2>&1) ||
  fail "the venv's ddprun exited with $?: $out"
echo "$out"
for rank in 0 1; do
  grep -q "rank $rank\$" <<<"$out" || fail "no 'rank $rank' in: $out"
done
PATH="$venv/bin:$PATH" ddprun-rendezvous --help | grep -q "rendezvous daemon" ||
  fail "the venv's ddprun-rendezvous --help printed no usage"
"$here/needs_only_glibc.sh" "$venv/bin" x86_64 2.28
echo "PASS"
