#!/usr/bin/env python3
"""What one request costs etcd itself: the floor under any rendezvous over etcd.

Starts a 3-member etcd cluster on loopback (data on /dev/shm, etcd's default
raft timing), then for each kind of request a node of a rendezvous must make
(a lease grant, a transaction, a read, opening a watch) sends N of them from
T concurrent clients over the JSON gateway and reports the CPU the three
members spent per request (from /proc/<pid>/stat), with the wall time.
With --grpc it also sends them over etcd's gRPC API (needs the `etcd3` and
`grpcio` packages, e.g. in a throwaway venv:
`pip install etcd3 grpcio "protobuf<3.21"`).

    bench/etcd_request_cost.py --requests 1024 --clients 64 [--grpc]

Recorded in docs/benchmarks.md ("What etcd itself costs per node").
"""
import argparse
import base64
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time


def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_cluster(directory):
    ports = free_ports(6)
    client, peer = ports[0::2], ports[1::2]
    initial = ",".join(f"m{i}=http://127.0.0.1:{peer[i]}" for i in range(3))
    members = []
    for i in range(3):
        members.append(subprocess.Popen(
            ["etcd", "--name", f"m{i}", "--data-dir", f"{directory}/m{i}",
             "--listen-client-urls", f"http://127.0.0.1:{client[i]}",
             "--advertise-client-urls", f"http://127.0.0.1:{client[i]}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer[i]}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer[i]}",
             "--initial-cluster", initial, "--initial-cluster-state", "new"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            post(http.client.HTTPConnection("127.0.0.1", client[0], timeout=2), "/v3/kv/put",
                 {"key": b64("/ready"), "value": b64("1")})
            return members, client
        except (OSError, http.client.HTTPException, KeyError, ValueError):
            time.sleep(0.1)
    raise SystemExit("etcd did not start")


def b64(text):
    return base64.b64encode(text.encode()).decode()


def post(connection, path, body):
    connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    reply = connection.getresponse()
    data = json.loads(reply.read())
    if reply.status != 200:
        raise ValueError(data)
    return data


def cpu_seconds(members):
    total = 0
    for m in members:
        fields = open(f"/proc/{m.pid}/stat").read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def measure(name, members, n, clients, one):
    def worker(k):
        for i in range(k, n, clients):
            one(k, i)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    before, start = cpu_seconds(members), time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.time() - start, cpu_seconds(members) - before
    print(f"| {name} | {cpu * 1e6 / n:.0f} µs | {wall * 1000:.0f} ms |", flush=True)


def gateway(members, ports, n, clients, prefix):
    conns = [http.client.HTTPConnection("127.0.0.1", ports[k % 3]) for k in range(clients)]
    leases = [None] * n
    measure("gateway: lease grant", members, n, clients, lambda k, i: leases.__setitem__(
        i, post(conns[k], "/v3/lease/grant", {"TTL": 60})["ID"]))
    measure("gateway: transaction (2 puts, 1 read)", members, n, clients,
            lambda k, i: post(conns[k], "/v3/kv/txn", {"success": [
                {"request_put": {"key": b64(f"{prefix}alive/{i}"), "lease": leases[i]}},
                {"request_put": {"key": b64(f"{prefix}joining/{i}"), "value": b64("x" * 120),
                                 "lease": leases[i]}},
                {"request_range": {"key": b64(f"{prefix}state")}}]}))
    measure("gateway: read", members, n, clients,
            lambda k, i: post(conns[k], "/v3/kv/range", {"key": b64(f"{prefix}state")}))
    watches = []

    def open_watch(k, i):
        s = socket.create_connection(("127.0.0.1", ports[i % 3]))
        body = json.dumps({"create_request": {"key": b64(f"{prefix}state")}})
        s.sendall((f"POST /v3/watch HTTP/1.1\r\nHost: etcd\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        reply = b""
        while b"created" not in reply:
            reply += s.recv(65536)
        watches.append(s)
    measure("gateway: open a watch", members, n, clients, open_watch)
    for s in watches:
        s.close()


def grpc(members, ports, n, clients, prefix):
    import etcd3  # noqa: PLC0415 (optional)
    conns = [etcd3.client(port=ports[k % 3]) for k in range(clients)]
    leases = [None] * n
    measure("gRPC: lease grant", members, n, clients,
            lambda k, i: leases.__setitem__(i, conns[k].lease(60)))
    measure("gRPC: transaction (2 puts, 1 read)", members, n, clients,
            lambda k, i: conns[k].transaction(compare=[], failure=[], success=[
                conns[k].transactions.put(f"{prefix}g/alive/{i}", "", lease=leases[i]),
                conns[k].transactions.put(f"{prefix}g/joining/{i}", "x" * 120, lease=leases[i]),
                conns[k].transactions.get(f"{prefix}state")]))
    measure("gRPC: read", members, n, clients, lambda k, i: conns[k].get(f"{prefix}state"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1024)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--grpc", action="store_true")
    args = parser.parse_args()
    root = "/dev/shm" if os.path.isdir("/dev/shm") else None
    directory = tempfile.mkdtemp(prefix="ddprun-etcd-cost-", dir=root)
    members, ports = start_cluster(directory)
    try:
        print(f"{args.requests} requests from {args.clients} clients, 3 members\n")
        print("| request | etcd CPU per request (3 members) | wall |\n|---|---:|---:|")
        gateway(members, ports, args.requests, args.clients, "/cost/")
        if args.grpc:
            grpc(members, ports, args.requests, args.clients, "/cost/")
    finally:
        for m in members:
            m.kill()
            m.wait()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
