#!/usr/bin/env bash
# Package.WheelInstallsDdprunOnPath: the wheel of scripts/build-wheel,
# installed with pip (offline: --no-index, it has no dependencies) into a
# fresh venv in a temporary folder, puts ddprun and ddprun-rendezvous on
# that venv's PATH (VENV/bin); the installed ddprun runs two workers, and
# both installed executables need only glibc (needs_only_glibc.sh).
# Fails, never skips: without a wheel it says to run scripts/build-wheel.
#   wheel_installs_on_path.sh WHEEL_DIR
set -euo pipefail
wheel_dir=$1
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
shopt -s nullglob
wheels=("$wheel_dir"/ddprun-*.whl)
((${#wheels[@]} == 1)) ||
  fail "expected one ddprun wheel in $wheel_dir, found ${#wheels[@]}: run scripts/build-wheel first"
python=${DDPRUN_VENV_PYTHON:-$(command -v python3.11 || command -v python3)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
venv=$work/venv
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --no-index --no-deps "${wheels[0]}"
# As a user of the activated venv sees it.
found=$(PATH="$venv/bin:$PATH" command -v ddprun) || fail "ddprun is not on the venv's PATH"
[[ "$found" == "$venv/bin/ddprun" ]] || fail "ddprun on PATH is $found, not $venv/bin/ddprun"
found=$(PATH="$venv/bin:$PATH" command -v ddprun-rendezvous) ||
  fail "ddprun-rendezvous is not on the venv's PATH"
[[ "$found" == "$venv/bin/ddprun-rendezvous" ]] ||
  fail "ddprun-rendezvous on PATH is $found, not $venv/bin/ddprun-rendezvous"
echo "on PATH: $venv/bin/ddprun, $venv/bin/ddprun-rendezvous"
out=$(cd "$work" && PATH="$venv/bin:$PATH" ddprun --nproc_per_node=2 /bin/sh -c 'echo rank $RANK' 2>&1) ||
  fail "the venv's ddprun exited with $?: $out"
echo "$out"
for rank in 0 1; do
  grep -q "rank $rank\$" <<<"$out" || fail "no 'rank $rank' in: $out"
done
PATH="$venv/bin:$PATH" ddprun-rendezvous --help | grep -q "rendezvous daemon" ||
  fail "the venv's ddprun-rendezvous --help printed no usage"
"$here/needs_only_glibc.sh" "$venv/bin"
echo "PASS"
