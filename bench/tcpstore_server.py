#!/usr/bin/python3
"""Hosts PyTorch's own TCPStore server until it is killed: the reference
server of the fan-in benchmark for the current PyTorch (bench/fanin_bench.py).

  bench/tcpstore_server.py [--host 127.0.0.1] [--port 0] [--backend libuv|legacy]
                           [--world-size N] [--no-reverse-dns]

Prints `listening on HOST:PORT` (the first line ddprun-bench's ServerProcess
waits for, as ddprun-rendezvous prints it) once the server accepts
connections, then sleeps until SIGTERM/SIGKILL. `ddprun-bench fanin
--dialect 2.x --reference-command bench/tcpstore_server.py` starts it afresh
for every run (a fresh store per rank count). Options it does not know
(ddprun-rendezvous's --open, --max-connections N, ...) are ignored.

It runs under the project's current PyTorch: started by another interpreter
(the shebang's, i.e. Debian's Python with PyTorch 1.13), it re-executes
itself with $TCPSTORE_SERVER_PYTHON (default scripts/python). The backend
defaults to $TCPSTORE_SERVER_BACKEND, else libuv (the default server of
PyTorch 2.4+; pip's wheel has it). Both backends of 2.x expect the 2.2+
dialect (VALIDATE first, opcodes shifted by one): the legacy one resets a
connection whose first request is anything else, the libuv one ignores it
(the client waits forever); see bench/fanin_bench.py.

--no-reverse-dns: PyTorch 2.x's server (both backends) formats every
accepted peer's address with getnameinfo() on its one server thread, and
this machine's /etc/hosts names 127.0.0.1 but not ::ffff:127.0.0.1 (how the
dual-stack listener sees an IPv4 peer), so each connection costs a PTR
query to the DNS server, and a lost one stalls the server for the
resolver's 5 s timeout (seen at 64 simultaneous connections; 512 ranks did
not finish in 20 s). With this flag the server runs in a private mount
namespace (unshare -m; needs root) whose /etc/nsswitch.conf says `hosts:
files`: the lookup then fails locally and getnameinfo falls back to the
numeric address, as on a cluster whose resolver answers at once.
"""
import argparse
import os
import signal
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REEXEC = "DDPRUN_TCPSTORE_SERVER_REEXEC"


# Runs "$@" with /etc/nsswitch.conf replaced by $0 (then removed) in a private
# mount namespace.
NSSWITCH_SH = ('mount --bind "$0" /etc/nsswitch.conf || { echo "tcpstore_server: cannot '
               'replace /etc/nsswitch.conf in a private mount namespace (needs root); run '
               'without --no-reverse-dns" >&2; exit 1; }; rm -f "$0"; exec "$@"')


def files_only_nsswitch():
    """A copy of /etc/nsswitch.conf whose hosts line is `hosts: files`."""
    with open("/etc/nsswitch.conf") as f:
        lines = [line for line in f if not line.startswith("hosts:")]
    fd, path = tempfile.mkstemp(prefix="tcpstore-nsswitch-", suffix=".conf")
    with os.fdopen(fd, "w") as f:
        f.writelines(lines + ["hosts: files\n"])
    os.chmod(path, 0o644)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--backend", choices=["libuv", "legacy"],
                        default=os.environ.get("TCPSTORE_SERVER_BACKEND", "libuv"))
    parser.add_argument("--world-size", type=int, default=None,
                        help="the store's world size (default: none, as for an agent store)")
    parser.add_argument("--no-reverse-dns", action="store_true",
                        default=bool(os.environ.get("TCPSTORE_SERVER_NO_DNS")),
                        help="resolve peer addresses from /etc/hosts only (see above)")
    args, _ = parser.parse_known_args()  # the daemon's other options mean nothing here
    if not os.environ.get(REEXEC):
        python = os.environ.get("TCPSTORE_SERVER_PYTHON", os.path.join(ROOT, "scripts", "python"))
        os.environ[REEXEC] = "1"
        command = [python, os.path.abspath(__file__)] + sys.argv[1:]
        if args.no_reverse_dns:
            command = ["unshare", "-m", "/bin/sh", "-c", NSSWITCH_SH,
                       files_only_nsswitch()] + command
        os.execvp(command[0], command)

    import datetime
    import torch.distributed as dist
    store = dist.TCPStore(args.host, args.port, world_size=args.world_size, is_master=True,
                          timeout=datetime.timedelta(seconds=3600), wait_for_workers=False,
                          use_libuv=args.backend == "libuv")
    if store.libuvBackend != (args.backend == "libuv"):
        sys.exit(f"tcpstore_server: asked for the {args.backend} backend, PyTorch gave the other")
    print(f"listening on {args.host}:{store.port}", flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
