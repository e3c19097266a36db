#!/usr/bin/env bash
# Runs inside another system's root (runs_on_debian13.sh,
# runs_on_debian11.sh; no LD_LIBRARY_PATH): two workers under the portable
# ddprun with its embedded store, the same under ddprun-launch, then a
# ddprun-rendezvous daemon with a one-node job of two workers rendezvousing
# through it, and the daemon's clean stop on SIGTERM.
#   portable_job.sh PORTABLE_BIN_DIR
set -euo pipefail
bin_dir=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ -z "${LD_LIBRARY_PATH+set}" ]] || fail "LD_LIBRARY_PATH is set: $LD_LIBRARY_PATH"
echo "inside: Debian $(cat /etc/debian_version), $(ldd --version | sed -n 1p)"
"$bin_dir/ddprun" --version
worker='echo "rank $RANK of $WORLD_SIZE ld_library_path=${LD_LIBRARY_PATH-unset}"'

out=$("$bin_dir/ddprun" --nproc_per_node=2 /bin/sh -c "$worker" 2>&1) ||
  fail "ddprun --nproc_per_node=2 exited with $?: $out"
echo "$out"
for rank in 0 1; do
  grep -q "rank $rank of 2 ld_library_path=unset" <<<"$out" || fail "no rank $rank in: $out"
done

out=$("$bin_dir/ddprun-launch" --nproc_per_node=2 --no_python --use_env /bin/sh -c "$worker" 2>&1) ||
  fail "ddprun-launch --nproc_per_node=2 exited with $?: $out"
grep -q "rank 1 of 2" <<<"$out" || fail "no rank 1 under ddprun-launch in: $out"

"$bin_dir/ddprun-rendezvous" --help | grep -q "rendezvous daemon" ||
  fail "ddprun-rendezvous --help printed no usage"
work=$(mktemp -d)
daemon=""
port=""
trap '[[ -z "$daemon" ]] || kill "$daemon" 2>/dev/null || true; rm -rf "$work"' EXIT
export DDPRUN_TOKEN=portable-test-token
"$bin_dir/ddprun-rendezvous" --host 127.0.0.1 --port 0 >"$work/daemon.out" 2>"$work/daemon.err" &
daemon=$!
for _ in $(seq 300); do  # 30 s at most
  # "listening on 127.0.0.1:PORT", once its line is complete.
  if [[ $(wc -l <"$work/daemon.out") -ge 1 ]]; then
    port=$(sed -n '1s/.*:\([0-9][0-9]*\)$/\1/p' "$work/daemon.out")
    break
  fi
  kill -0 "$daemon" 2>/dev/null || fail "ddprun-rendezvous exited: $(cat "$work/daemon.err")"
  sleep 0.1
done
[[ -n "$port" ]] || fail "ddprun-rendezvous printed no port: $(cat "$work/daemon.out")"
echo "daemon: $(head -1 "$work/daemon.out")"
out=$("$bin_dir/ddprun" --nnodes=1 --nproc_per_node=2 --rdzv_backend=c10d \
  --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=portable /bin/sh -c "$worker" 2>&1) ||
  fail "ddprun through the daemon exited with $?: $out"
echo "$out"
for rank in 0 1; do
  grep -q "rank $rank of 2" <<<"$out" || fail "no rank $rank through the daemon in: $out"
done
kill -TERM "$daemon"
wait "$daemon" || fail "ddprun-rendezvous exited with $? on SIGTERM: $(cat "$work/daemon.err")"
echo "PASS"
