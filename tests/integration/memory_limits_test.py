#!/usr/bin/env python3
"""oip-serve out of memory: run under a small address-space limit (RLIMIT_AS, set on the running
process), a body it cannot allocate and a JSON document it cannot parse are each answered 503, and
the server answers the next request. Then the memory budget: with --max-inflight-bytes, a body that
would pass it is a 503 before it is sent.

The sanitizers reserve terabytes of address space, so this runs in the plain builds alone (the
integration tests run against the plain build's oip-serve).

Usage: memory_limits_test.py PATH/TO/oip-serve
"""

import http.client
import json
import os
import re
import resource
import signal
import subprocess
import sys

SIMPLE = json.dumps({"inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]}).encode()


def start(server_path, *args):
    server = subprocess.Popen([server_path, "--http-port", "0", "--grpc-port", "0",
                               "--metrics-port", "0", "--address", "127.0.0.1", "--models",
                               "simple", *args], stdout=subprocess.PIPE, text=True)
    for line in server.stdout:
        if "workers, models" in line:
            return server, int(re.search(r"HTTP on [^ ]+:(\d+)", line).group(1))
    server.wait(timeout=30)
    raise AssertionError(f"oip-serve {args} did not start")


def stop(server):
    server.send_signal(signal.SIGTERM)
    code = server.wait(timeout=30)
    assert code == 0, code


def post(port, body, content_length=None):
    """(status, body) of a POST to simple; with `content_length`, only the header is sent."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        if content_length is None:
            connection.request("POST", "/v2/models/simple/infer", body=body)
        else:
            connection.putrequest("POST", "/v2/models/simple/infer")
            connection.putheader("Content-Length", str(content_length))
            connection.endheaders()
        reply = connection.getresponse()
        return reply.status, reply.read().decode()
    finally:
        connection.close()


def address_space_bytes(pid):
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize")


def out_of_memory(path):
    server, port = start(path, "--max-body-bytes", str(2 << 30))
    try:
        assert post(port, SIMPLE)[0] == 200
        # What it has mapped now, and 256 MiB more: no 512 MiB body, no parser for 48 MiB of JSON (about 7 bytes a byte).
        limit = address_space_bytes(server.pid) + (256 << 20)
        resource.prlimit(server.pid, resource.RLIMIT_AS, (limit, limit))

        status, body = post(port, b"", content_length=512 << 20)
        assert status == 503 and "out of memory" in body, (status, body)
        assert post(port, SIMPLE)[0] == 200

        status, body = post(port, SIMPLE + b" " * (48 << 20))
        assert status == 503 and "out of memory" in body, (status, body[:200])
        assert post(port, SIMPLE)[0] == 200
        assert server.poll() is None
    finally:
        stop(server)


def inflight_budget(path):
    server, port = start(path, "--max-inflight-bytes", str(1 << 20))
    try:
        # Above the whole budget: no retry could pass it, so a 413, not a 503.
        status, body = post(port, b"", content_length=2 << 20)
        assert status == 413 and "1048576 bytes that the server holds" in body, (status, body)
        assert post(port, SIMPLE + b" " * (512 << 10))[0] == 200
    finally:
        stop(server)


def main():
    path = sys.argv[1]
    out_of_memory(path)
    inflight_budget(path)
    print("2 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
