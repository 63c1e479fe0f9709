#!/usr/bin/env python3
# Usage: build/gdn serve --model models/demo --port 18181 & scripts/attack/slow_and_huge.py 18181 $!
# Manual check against a real `gdn serve`: slowloris + silent sockets + 100 MB chunked upload,
# with normal-request latency and the server's peak RSS (VmHWM). Loopback only, bounded in time.
import socket, time, sys, threading, subprocess, json
port = int(sys.argv[1]); pid = int(sys.argv[2])
def normal():
    t0 = time.time()
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    body = b'{"prompt":"The cat","max_tokens":2}'
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    data = b""
    while b"\r\n\r\n" not in data: data += s.recv(65536)
    st = int(data.split(b" ")[1]); s.close()
    return st, time.time() - t0
def hwm():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmHWM") or l.startswith("VmRSS"): print("  ", l.strip())
print("before:"); hwm()
socks = []
for i in range(200):
    s = socket.create_connection(("127.0.0.1", port)); s.sendall(b"GET /health HTTP/1.1\r\n"); socks.append(s)
worst = 0; t0 = time.time(); cut = 0
while time.time() - t0 < 20:
    for s in socks:
        try: s.sendall(b"X-Drip: 1\r\n")
        except OSError: pass
    st, dt = normal(); worst = max(worst, dt); assert st == 200, st
    time.sleep(2)
for s in socks:
    s.settimeout(0.1)
    try: cut += s.recv(100) is not None
    except OSError: cut += 1
    s.close()
print(f"slowloris 200 sockets, one header line per 2 s for 20 s: worst normal request {worst*1000:.0f} ms")
silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
st, dt = normal(); print(f"200 silent sockets: normal request {st} in {dt*1000:.0f} ms")
for s in silent: s.close()
# 100 MB chunked upload
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
chunk = b"10000\r\n" + b"a" * 65536 + b"\r\n"; sent = 0; t0 = time.time(); lat = []
try:
    s.sendall(b'10000\r\n{"prompt":"' + b"a" * (65536 - 11) + b"\r\n")
    while sent < 100 << 20:
        s.sendall(chunk); sent += 65536
        if sent % (8 << 20) == 0: lat.append(normal()[1])
except OSError as e:
    print(f"100 MB chunked upload: connection closed by the server after {sent/1048576:.1f} MiB ({e.__class__.__name__})")
s.settimeout(2)
try: print("  answer:", s.recv(300).split(b"\r\n")[0])
except OSError as e: print("  answer: none", e)
print("after:"); hwm()
print("normal requests during upload:", [f"{x*1000:.0f} ms" for x in lat], normal())
