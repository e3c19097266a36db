#!/usr/bin/python3
"""The fan-in benchmark against both PyTorch TCPStore servers: LibTorch 1.13's
legacy server and the current PyTorch's libuv server.

  bench/fanin_bench.py [--ranks 1024,8192,16384] [--limit 120] [--repeat 1]
                       [--backend libuv|legacy] [--dns] [--dialects 1.13,2.x]

Runs `build/bin/ddprun-bench fanin` twice per repetition:
  1. the ranks speak PyTorch 1.13's TCPStore protocol (no handshake):
     ddprun-rendezvous against LibTorch 1.13's c10d::TCPStore server;
  2. the ranks speak the 2.2+ protocol (`--dialect 2.x`: VALIDATE and PING
     first, every later opcode one higher), which PyTorch 2.x's servers
     require (a 1.13-dialect rank gets its connection reset by 2.13's legacy
     server and hangs on its libuv server): ddprun-rendezvous against
     `torch.distributed.TCPStore(..., is_master=True, use_libuv=True,
     wait_for_workers=False)` of scripts/python (bench/tcpstore_server.py,
     `--reference-command`), started afresh for every rank count.
and prints one table with both pairs and their ratios (medians over
--repeat). PyTorch 2.x's server does a reverse DNS lookup for every
connection it accepts; by default it runs with /etc/hosts as its only source
of names (bench/tcpstore_server.py --no-reverse-dns, needs root), because
this machine's resolver makes each lookup a network round trip and
sometimes a 5 s timeout. --dns keeps the machine's resolver.
"""
import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys

from torch_current import current_torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = os.path.join(ROOT, "bench", "tcpstore_server.py")


def fanin(bench, args, extra):
    """One `ddprun-bench fanin` run: {ranks: (ddprun cell, reference cell)}."""
    command = [bench, "fanin", "--ranks", args.ranks, "--limit", str(args.limit),
               "--processes", str(args.processes), "--window", str(args.window)] + extra
    print("$ " + shlex.join(command), file=sys.stderr, flush=True)
    out = subprocess.run(command, stdout=subprocess.PIPE, text=True)  # its log goes to stderr
    if out.returncode != 0:
        sys.exit(f"fanin_bench: {' '.join(command)} exited {out.returncode}:\n{out.stdout}")
    rows = {}
    for line in out.stdout.splitlines():
        m = re.match(r"\| (\d+) \| ([^|]*) \| ([^|]*) \| [^|]* \|$", line)
        if m:
            rows[int(m.group(1))] = (m.group(2).strip(), m.group(3).strip())
    return rows


def seconds(cell):
    m = re.fullmatch(r"([0-9.]+) s", cell)
    return float(m.group(1)) if m else None


def summary(cells):
    """The median of the completed runs, else the last run's text."""
    values = [v for v in map(seconds, cells) if v is not None]
    if len(values) == len(cells):
        return statistics.median(values)
    if not values:
        return cells[-1]
    return f"{statistics.median(values):.2f} s in {len(values)}/{len(cells)} runs"


def cell(value):
    return f"{value:.2f} s" if isinstance(value, float) else value


def ratio(theirs, ours):
    return f"{theirs / ours:.1f}x" if isinstance(theirs, float) and isinstance(ours, float) else "-"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", default=os.path.join(ROOT, "build", "bin", "ddprun-bench"))
    parser.add_argument("--ranks", default="1024,8192,16384")
    parser.add_argument("--limit", type=int, default=120, help="seconds a run may take")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--backend", choices=["libuv", "legacy"], default="libuv",
                        help="the current PyTorch's server backend (legacy: use_libuv=False)")
    parser.add_argument("--dns", action="store_true",
                        help="let PyTorch 2.x's server use this machine's resolver")
    parser.add_argument("--dialects", default="1.13,2.x",
                        help="the pairs to run: 1.13 (against LibTorch 1.13's server), 2.x "
                             "(against the current PyTorch's), or both")
    args = parser.parse_args()
    dialects = args.dialects.split(",")
    if not dialects or set(dialects) - {"1.13", "2.x"}:
        sys.exit(f"fanin_bench: --dialects {args.dialects}: give 1.13, 2.x or 1.13,2.x")
    pairs = [("1.13", "PyTorch TCPStore 1.13", [])] if "1.13" in dialects else []
    if "2.x" in dialects:
        if "--dialect" not in subprocess.run([args.bench, "fanin", "--help"],
                                             capture_output=True, text=True).stdout:
            sys.exit(f"fanin_bench: {args.bench} has no `fanin --dialect`: rebuild it "
                     "(cmake --build build --target ddprun-bench)")
        python, version = current_torch("fanin_bench")
        os.environ["TCPSTORE_SERVER_PYTHON"] = python  # read by bench/tcpstore_server.py
        reference = f"PyTorch TCPStore {version} ({args.backend})"
        server = [SERVER, "--backend", args.backend] + ([] if args.dns else ["--no-reverse-dns"])
        pairs.append(("2.x", reference, ["--dialect", "2.x", "--reference-command",
                                         " ".join(server), "--reference-name", reference]))
    runs = {dialect: {} for dialect, _, _ in pairs}
    for i in range(args.repeat):
        print(f"run {i + 1}/{args.repeat}", file=sys.stderr, flush=True)
        for dialect, _, extra in (pairs if i % 2 == 0 else list(reversed(pairs))):
            for n, cells in fanin(args.bench, args, extra).items():
                runs[dialect].setdefault(n, ([], []))
                runs[dialect][n][0].append(cells[0])
                runs[dialect][n][1].append(cells[1])
    header = ["ranks"]
    for dialect, name, _ in pairs:
        header += [f"ddprun store ({dialect} dialect)", name, f"{name.split(' (')[0]} / ddprun"]
    dns = "" if "2.x" not in dialects else (
        "; PyTorch 2.x's server resolves peers with "
        + ("this machine's resolver" if args.dns else "/etc/hosts only"))
    print(f"\nFan-in, {args.repeat} run(s) each, medians{dns}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---:|" * len(header))
    counts = sorted({n for dialect in runs.values() for n in dialect})
    for n in counts:
        row = [str(n)]
        for dialect, _, _ in pairs:
            ours, theirs = (summary(c) for c in runs[dialect].get(n, (["not run"], ["not run"])))
            row += [cell(ours), cell(theirs), ratio(theirs, ours)]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
