#!/usr/bin/python3
"""A hostile client for the multi-node security test (multinode_test.cc).

  store_attacker.py native HOST PORT CREDENTIAL RDZV_ID
      With a worker's credential: tries to report a failure for every node,
      leave for them, set the control key that ends a rendezvous, and
      overwrite another job's key. Prints one line per attempt with the
      reply's status code (0 = OK, 2 = AUTH_FAILED, 3 = BAD_REQUEST).
  store_attacker.py tcpstore HOST PORT SOURCE RDZV_ID
      A PyTorch TCPStore 2.x client from SOURCE (no token): sets the control
      key, deletes and overwrites every key it can list. Prints what it saw
      ("closed" when the server closed the connection).
"""
import socket
import struct
import sys


def frame(request_id, code, body):
    return struct.pack("<IIB", len(body), request_id, code) + body


def s(text):
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<I", len(data)) + data


def read_frame(sock):
    header = b""
    while len(header) < 9:
        chunk = sock.recv(9 - len(header))
        if not chunk:
            return None
        header += chunk
    size, _, code = struct.unpack("<IIB", header)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return code


PROTOCOL_VERSION = 5  # protocol::kVersion


def native(host, port, credential, rdzv):
    sock = socket.create_connection((host, port), timeout=5)
    hello = struct.pack("<H", PROTOCOL_VERSION) + s(credential) + s("attacker")
    sock.sendall(b"DDPR" + frame(1, 1, hello))
    print("hello", read_frame(sock))
    next_id = [2]

    def call(code, body):
        sock.sendall(frame(next_id[0], code, body))
        next_id[0] += 1
        return read_frame(sock)

    for node in ("node-a", "does-not-exist"):
        report = (s(rdzv) + s(node) + struct.pack("<qqq", 1, 1000, 9) + s("forged failure")
                  + struct.pack("<q", 0))  # failed_at_ms
        print("report_failure", call(16, report))
        print("leave", call(15, report))
    print("set_control", call(2, s(f"__ddprun/rendezvous/{rdzv}/finished") + s("1")))
    print("set_other_job", call(2, s("someone-else/key") + s("x")))


def tcpstore(host, port, source, rdzv):
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect((host, port))
    sock.settimeout(3)
    u64 = lambda v: struct.pack("<Q", v)
    ts = lambda t: u64(len(t)) + t.encode()
    try:
        sock.sendall(b"\x00" + struct.pack("<I", 0x3C85F7CE))  # VALIDATE
        sock.sendall(b"\x11")  # LIST_KEYS
        count = struct.unpack("<q", sock.recv(8))[0]
        keys = []
        for _ in range(count):
            size = struct.unpack("<Q", sock.recv(8))[0]
            keys.append(sock.recv(size).decode(errors="replace") if size else "")
        print("listed", len(keys), "control" if any(k.startswith("__ddprun/") for k in keys) else "")
        for key in keys:
            sock.sendall(b"\x08" + ts(key))  # DELETE_KEY
            sock.recv(8)
            sock.sendall(b"\x01" + ts(key) + ts("garbage"))  # SET
        sock.sendall(b"\x01" + ts(f"__ddprun/rendezvous/{rdzv}/finished") + ts("1"))
        sock.sendall(b"\x07")  # GET_NUM_KEYS: a reply proves the connection is still open
        got = sock.recv(8)
        print("after control key", "closed" if not got else "open")
    except (ConnectionError, socket.timeout, struct.error) as error:
        print("closed", type(error).__name__)


if __name__ == "__main__":
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "native":
        native(host, port, sys.argv[4], sys.argv[5])
    else:
        tcpstore(host, port, sys.argv[4], sys.argv[5])
