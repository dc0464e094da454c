#!/usr/bin/env python3
"""RSS each open connection costs a running driftguard.

  scripts/conn-rss.py PORT COUNT MODE PID

MODE: idle (TLS handshake only), served (one review, kept alive),
headers (15 KB of headers, no end), body (headers declaring 60 KB, 60 KB sent,
the last byte never). Prints the RSS growth per connection in KiB; the
budget's PER_CONNECTION_BYTES (src/server/budget.rs) must stay above the
first three.
"""
import socket, ssl, sys, time

port, count, mode, pid = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
REVIEW = (b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":'
          b'{"uid":"u","kind":{"group":"","version":"v1","kind":"ConfigMap"},'
          b'"resource":{"group":"","version":"v1","resource":"configmaps"},'
          b'"operation":"CREATE","userInfo":{"username":"u"},'
          b'"object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}}}')


def rss_kib():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])


ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
before = rss_kib()
held = []
for _ in range(count):
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)))
    head = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    if mode == "served":
        s.sendall(head + b"Content-Length: %d\r\n\r\n" % len(REVIEW) + REVIEW)
        s.recv(65536)
    elif mode == "headers":
        s.sendall(head + b"".join(b"X-F%d: %s\r\n" % (i, b"a" * 100) for i in range(140)))
    elif mode == "body":
        s.sendall(head + b"Content-Length: 61441\r\n\r\n" + b"a" * 61440)
    held.append(s)
time.sleep(2)
after = rss_kib()
print(f"{mode}: {len(held)} connections, RSS {before} -> {after} KiB, "
      f"{(after - before) / len(held):.1f} KiB each")
