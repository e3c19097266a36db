#!/usr/bin/python3
"""Real PyTorch TCPStore clients against ddprun-rendezvous, which detects
their dialect from the first bytes: Debian's python3-torch 1.13.1, and the
current PyTorch when run with scripts/python (its 2.2+ dialect, with the
queue ops of 2.8+, LIST_KEYS of 2.10+ and BARRIER of 2.11+).

  tcpstore_python_test.py BUILD_BIN_DIR
"""
import datetime
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import torch.distributed as dist

BIN = sys.argv[1]
failures = []


def check(name, condition, detail=""):
    print(("ok   " if condition else "FAIL ") + name + (f": {detail}" if detail and not condition else ""))
    if not condition:
        failures.append(name)


def client(port, timeout=10.0):
    return dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=timeout))


def main():
    env = dict(os.environ, DDPRUN_TOKEN="python-test")
    # With a token, TCPStore clients (which carry none) are served only from
    # trusted addresses or those where an agent joined: this host is trusted.
    daemon = subprocess.Popen([os.path.join(BIN, "ddprun-rendezvous"), "--host", "127.0.0.1",
                               "--port", "0", "--trusted-address", "127.0.0.1", "--metrics_port", "0"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = daemon.stdout.readline().strip()
        port = int(line.rsplit(":", 1)[1])
        metrics = daemon.stdout.readline().split()[-1]  # "metrics on http://HOST:PORT/metrics"
        s = client(port)
        s.set("k", "v")
        check("set/get", s.get("k") == b"v")
        check("add", s.add("n", 5) == 5 and s.add("n", 2) == 7)
        check("compare_set match", s.compare_set("k", "v", "w") == b"w")
        check("compare_set mismatch", s.compare_set("k", "x", "y") == b"w")
        check("compare_set missing, expected empty", s.compare_set("new", "", "z") == b"z")
        s.wait(["k", "n"])
        check("num_keys", s.num_keys() == 3, str(s.num_keys()))
        check("delete_key", s.delete_key("new") and not s.delete_key("new"))
        s.set_timeout(datetime.timedelta(milliseconds=200))
        start = time.time()
        try:
            s.wait(["never"])
            check("wait times out", False)
        except RuntimeError as e:
            check("wait times out", time.time() - start >= 0.15, str(e))
        # The same client goes on after its timed-out wait (1.13 sends no cancel).
        s.set_timeout(datetime.timedelta(seconds=10))
        check("client usable after a timeout", s.get("k") == b"w")

        # Two clients wait on one key; a third sets it. The clients are built
        # on this thread: PyTorch 2.x's TCPStore constructed from several
        # threads at once corrupts pybind11's instance registry and aborts
        # when deleted (pytorch/pytorch#143593, pybind/pybind11#5473).
        results = []
        waiters = [client(port) for _ in range(2)]
        def waiter(c):
            c.wait(["go"])
            results.append(c.get("go"))
        threads = [threading.Thread(target=waiter, args=(c,)) for c in waiters]
        for t in threads:
            t.start()
        time.sleep(0.3)
        client(port).set("go", "now")
        for t in threads:
            t.join(10)
        check("two clients woken by one set", results == [b"now", b"now"], str(results))

        # A client vanishes mid-wait: the server drops its wait and goes on.
        code = ("import datetime, torch.distributed as d; "
                f"s = d.TCPStore('127.0.0.1', {port}, None, False, datetime.timedelta(seconds=60)); "
                "s.set('vanisher/ready', '1'); s.wait(['never/set'])")
        vanisher = subprocess.Popen([sys.executable, "-c", code])
        s.wait(["vanisher/ready"])
        time.sleep(0.2)
        vanisher.send_signal(signal.SIGKILL)
        vanisher.wait()
        s.set("never/set", "1")
        check("server healthy after a client vanished mid-wait", s.get("never/set") == b"1")

        # The native and TCPStore clients share one key space (keys as sent).
        check("shared key space", s.get("k") == b"w")
        newer_ops(port, metrics)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(10)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


def pending_waits(metrics):
    """The server's blocking requests pending now (its ddprun_store_waits gauge)."""
    with urllib.request.urlopen(metrics, timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("ddprun_store_waits "):
                return int(float(line.split()[1]))
    raise RuntimeError("no ddprun_store_waits in " + metrics)


def wait_until_pending(metrics, n):
    """Waits until the server holds n blocking requests (10 s at most)."""
    deadline = time.monotonic() + 10
    while pending_waits(metrics) != n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server never held {n} waits (now {pending_waits(metrics)})")
        time.sleep(0.01)


def newer_ops(port, metrics):
    """The ops this client's PyTorch has beyond 2.6, as its own server has them."""
    s = client(port)
    if not hasattr(s, "queue_push"):
        print("note this PyTorch has no queues, list_keys or barrier (2.8+)")
        return
    check("queue_len of a missing queue", s.queue_len("q") == 0)
    check("check on a missing queue", not s.check(["q"]))
    s.queue_push("q", "1")
    s.queue_push("q", b"2")
    check("queue_len after two pushes", s.queue_len("q") == 2)
    check("check sees a non-empty queue", s.check(["q"]))
    check("queue_pop is FIFO", s.queue_pop("q") == b"1" and s.queue_pop("q", block=False) == b"2")
    check("a drained queue is not present", not s.check(["q"]))
    try:
        s.queue_pop("q", block=False)
        check("non-blocking pop on an empty queue raises", False)
    except dist.QueueEmptyError:
        check("non-blocking pop on an empty queue raises", True)
    # A blocking pop waits for a push from another client.
    popped = []
    popper = client(port)
    t = threading.Thread(target=lambda: popped.append(popper.queue_pop("later")))
    t.start()
    wait_until_pending(metrics, 1)  # the pop's WAIT is held by the server
    s.queue_push("later", "v")
    t.join(10)
    check("a push wakes a blocked pop", popped == [b"v"], str(popped))
    s.set_timeout(datetime.timedelta(milliseconds=200))
    try:
        s.queue_pop("never")
        check("blocking pop times out", False)
    except dist.DistStoreError as e:
        check("blocking pop times out", "timeout" in str(e), str(e))
    s.set_timeout(datetime.timedelta(seconds=10))
    check("client usable after a pop's timeout", s.queue_len("never") == 0)
    if hasattr(s, "list_keys"):
        s.set("listed", "x")
        check("list_keys lists a set key, no queue", "listed" in s.list_keys() and "q" not in s.list_keys())
    if not hasattr(dist.Store, "barrier"):
        print("note this PyTorch has no store barrier (2.11+)")
        return
    s.barrier("b1", 1)
    check("a barrier of one passes", True)
    others = [client(port) for _ in range(2)]
    passed = []
    threads = [threading.Thread(target=lambda c=c: (c.barrier("b3", 3), passed.append(1))) for c in others]
    for t in threads:
        t.start()
    wait_until_pending(metrics, 2)  # both arrivals are held by the server
    check("a barrier waits for the world", passed == [])
    s.barrier("b3", 3)
    for t in threads:
        t.join(10)
    check("the last arrival releases every rank", len(passed) == 2, str(passed))
    try:
        s.barrier("lonely", 2, datetime.timedelta(milliseconds=200))
        check("a barrier times out", False)
    except dist.DistStoreError as e:
        check("a barrier times out", "barrier timeout" in str(e), str(e))
    check("client usable after a cancelled barrier", s.get("b3") == b"3")


if __name__ == "__main__":
    sys.exit(main())
