#!/usr/bin/env python3
"""The kernel's floor for the fan-in benchmark on this machine.

Every simulated rank of `ddprun-bench fanin` opens one TCP connection (to
the store, or to its node's relay) and makes PyTorch's init_process_group
round trips on it. This measures what one loopback connect + accept and
one small round trip cost here, both ends in one process with blocking
sockets (the least any implementation can spend), and prints the CPU the
kernel alone needs for N ranks of R round trips and the wall time that is
on this machine's cores:

    python3 bench/loopback_floor.py [--ranks 98304] [--round-trips 6] [--sample 8000]
"""
import argparse
import os
import resource
import socket
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=98304)
    parser.add_argument("--round-trips", type=int, default=6)
    parser.add_argument("--sample", type=int, default=8000, help="connections measured")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    n = min(args.sample, (hard - 64) // 2)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    port = listener.getsockname()[1]
    clients, servers = [], []
    t0, c0 = time.monotonic(), os.times()
    for i in range(n):
        c = socket.socket()
        c.setsockopt(socket.SOL_IP, 24, 1)  # IP_BIND_ADDRESS_NO_PORT, as the benchmark
        c.bind((f"127.0.0.{1 + i % 8}", 0))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.connect(("127.0.0.1", port))
        clients.append(c)
        servers.append(listener.accept()[0])
    t1, c1 = time.monotonic(), os.times()
    for c, s in zip(clients, servers):
        c.sendall(b"x" * 40)
        s.recv(64)
        s.sendall(b"y" * 8)
        c.recv(64)
    t2, c2 = time.monotonic(), os.times()
    connect = (c1.user + c1.system - c0.user - c0.system) / n
    trip = (c2.user + c2.system - c1.user - c1.system) / n
    cpu = args.ranks * (connect + args.round_trips * trip)
    cores = os.cpu_count() or 1
    print(f"connect+accept: {connect * 1e6:.1f} us CPU ({(t1 - t0) / n * 1e6:.1f} us wall)")
    print(f"round trip:     {trip * 1e6:.1f} us CPU ({(t2 - t1) / n * 1e6:.1f} us wall)")
    print(f"floor for {args.ranks} ranks x {args.round_trips} round trips: {cpu:.2f} CPU seconds, "
          f"at least {cpu / cores:.2f} s of wall time on {cores} cores")


if __name__ == "__main__":
    main()
