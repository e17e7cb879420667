#!/usr/bin/env python3
"""The hostile half of scripts/soak: until the deadline, in a loop, against oip-serve on HTTP_PORT:
opens slow connections and abandons them, sends malformed requests (each must be answered 4xx,
or the connection closed by the server), announces bodies above the memory budget (each must be
a 503, before the body is sent), and unloads and reloads a model that the load does not
use. Prints counts as JSON on the last line; exits 1 if a malformed request got anything but a 4xx.

Usage: soak-abuse.py HTTP_PORT SECONDS
"""

import json
import random
import socket
import sys
import time
import urllib.error
import urllib.request

port = int(sys.argv[1])
deadline = time.monotonic() + float(sys.argv[2])
rng = random.Random(7)
counts = {"slow_connections": 0, "malformed": 0, "malformed_4xx": 0, "closed_by_server": 0,
          "reloads": 0, "over_budget": 0, "over_budget_413": 0, "violations": []}
# oip-serve's --max-inflight-bytes in scripts/soak; the body limit is above it.
BUDGET = 64 << 20

SIMPLE = json.dumps({"inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]})


def malformed_bodies():
    """(target, headers, body) of requests that are a client's mistake."""
    good = SIMPLE.encode()
    cut = good[:rng.randrange(1, len(good) - 1)]
    flipped = bytearray(good)
    flipped[rng.randrange(len(flipped))] = rng.randrange(256)
    return [
        ("/v2/models/simple/infer", {}, cut),
        ("/v2/models/simple/infer", {}, b'{"inputs":[1,2,}'),
        ("/v2/models/simple/infer", {}, SIMPLE.replace("INT32", "FP64").encode()),
        ("/v2/models/simple/infer", {}, SIMPLE.replace("[1, 16]", "[2, 16]").encode()),
        ("/v2/models/simple/infer", {"Inference-Header-Content-Length": "99999"}, good),
        ("/v2/models/simple/infer", {"Content-Encoding": "gzip"}, good),
        ("/v2/models/no_such_model/infer", {}, good),
        ("/v2/models/simple/versions/x/infer", {}, good),
        ("/v2/models/simple/infer", {}, bytes(flipped)),
        ("/v2/models/simple/infer", {}, bytes(rng.randrange(256) for _ in range(200))),
    ]


def send_malformed(target, headers, body):
    counts["malformed"] += 1
    request = urllib.request.Request(f"http://127.0.0.1:{port}{target}", data=body,
                                     headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            status = reply.status
    except urllib.error.HTTPError as e:
        status = e.code
    except (ConnectionError, urllib.error.URLError):
        counts["closed_by_server"] += 1
        return
    if 400 <= status < 500 and status != 408:
        counts["malformed_4xx"] += 1
    elif status == 200 and body.startswith(b"{") and b"[2, 16]" not in body:
        counts["malformed_4xx"] += 1  # a flipped byte that left a valid request: not malformed
    else:
        counts["violations"].append(f"{target} {body[:60]!r}: {status}")


def slow_connection():
    """Sends half a request line, slowly, then abandons the socket."""
    counts["slow_connections"] += 1
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: soak\r\nContent-Le")
    time.sleep(0.2)
    s.sendall(b"ngth: 1000\r\n\r\n{\"inp")
    time.sleep(0.2)
    s.close()


def over_budget():
    """A body announced above the server's whole memory budget: a 413 (no retry could pass it)
    before any of it is sent."""
    counts["over_budget"] += 1
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                  f"Content-Length: {BUDGET + 1}\r\n\r\n".encode())
        reply = s.recv(4096)
    if reply.startswith(b"HTTP/1.1 413"):
        counts["over_budget_413"] += 1
    else:
        counts["violations"].append(f"over budget: {reply[:60]!r}")


def reload_model(name):
    for action in ("unload", "load"):
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v2/repository/models/{name}/{action}", data=b"{}",
            method="POST")
        with urllib.request.urlopen(request, timeout=30) as reply:
            assert reply.status == 200, reply.status
    counts["reloads"] += 1


held = []
while time.monotonic() < deadline:
    for target, headers, body in malformed_bodies():
        send_malformed(target, headers, body)
    slow_connection()
    over_budget()
    # A few connections left open without a request: the server's header timeout closes them.
    held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    if len(held) > 20:
        held.pop(0).close()
    reload_model("identity_fp32")
    time.sleep(0.05)
for s in held:
    s.close()
print(json.dumps(counts))
sys.exit(1 if counts["violations"] else 0)
