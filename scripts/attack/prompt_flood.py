#!/usr/bin/env python3
# Usage: build/gdn serve --model models/demo --port 18183 & scripts/attack/prompt_flood.py 18183
# 4 clients send 8 MiB text prompts (rejected after tokenizing: too long) for 20 s; a fifth measures
# normal requests. Loopback only, bounded.
import socket, time, sys, threading
port = int(sys.argv[1])
def req(body, timeout=60):
    t0 = time.time()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    data = b""
    while b"\r\n\r\n" not in data:
        d = s.recv(65536)
        if not d: break
        data += d
    s.close()
    return int(data.split(b" ")[1]) if data else 0, time.time() - t0
big = b'{"prompt":"' + b"hello world " * ((8 << 20) // 12 - 2) + b'"}'
stop = time.time() + 20; n = [0]; statuses = set()
def flood():
    while time.time() < stop:
        st, dt = req(big); n[0] += 1; statuses.add(st)
ts = [threading.Thread(target=flood) for _ in range(4)]
for t in ts: t.start()
lat = []
while time.time() < stop:
    st, dt = req(b'{"prompt":"The cat","max_tokens":16}'); lat.append(dt); time.sleep(0.5)
for t in ts: t.join()
lat.sort()
print(f"{n[0]} 8 MiB prompts in 20 s (statuses {statuses}); normal 16-token request: median {lat[len(lat)//2]*1000:.0f} ms, max {lat[-1]*1000:.0f} ms over {len(lat)}")
