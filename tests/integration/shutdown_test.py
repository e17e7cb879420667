#!/usr/bin/env python3
"""oip-serve's shutdown as a cluster needs it. On SIGTERM with --exit-delay-secs N, readiness
turns 503 at once (HTTP, gRPC ServerReady, grpc.health.v1) while liveness and inference answer as
before; after N seconds the ports stop accepting; a request in flight finishes; the process exits
0. With an --exit-timeout-secs shorter than a request, that request is cancelled at the timeout
and the process still exits 0. A second signal ends the delay early.

Usage: shutdown_test.py PATH/TO/oip-serve
"""

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import tritonclient.grpc as grpcclient

SIMPLE = json.dumps({"inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]}).encode()
WORDS = "one two three four five six seven"


def start(server_path, *args):
    server = subprocess.Popen([server_path, "--http-port", "0", "--grpc-port", "0",
                               "--metrics-port", "0", "--address", "127.0.0.1",
                               "--models", "simple,text_stream", *args],
                              stdout=subprocess.PIPE, text=True)
    for line in server.stdout:
        if "workers, models" in line:
            http = int(re.search(r"HTTP on [^ ]+:(\d+)", line).group(1))
            grpc = int(re.search(r"gRPC on [^ ]+:(\d+)", line).group(1))
            return server, http, grpc
    server.wait(timeout=30)
    raise AssertionError(f"oip-serve {args} did not start")


def request(port, method, path, body=None, timeout=30):
    """(status, body) of one request on a new connection."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def accepts(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def generate_slowly(port, delay_ms, outcome):
    """A streamed generate request whose seven words come `delay_ms` apart: its status and the
    words of its events, in outcome."""
    body = json.dumps({"text_input": WORDS, "parameters": {"delay_ms": delay_ms}}).encode()
    try:
        status, events = request(port, "POST", "/v2/models/text_stream/generate_stream", body)
        words = [json.loads(line[len("data: "):]).get("text_output")
                 for line in events.decode().splitlines() if line.startswith("data: ")]
        outcome.append((status, words))
    except Exception as e:  # a connection closed under the request: the test reads it
        outcome.append((None, repr(e).encode()))


def in_flight(port, delay_ms):
    outcome = []
    thread = threading.Thread(target=generate_slowly, args=(port, delay_ms, outcome))
    thread.start()
    time.sleep(0.3)  # the request has reached the model
    return thread, outcome


def delay_then_drain(path):
    server, http, grpc = start(path, "--exit-delay-secs", "2", "--exit-timeout-secs", "20")
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
    assert request(http, "GET", "/v2/health/ready")[0] == 200
    assert client.is_server_ready()
    # 7 words 600 ms apart: about 3.6 s, past the 2 s delay.
    thread, outcome = in_flight(http, 600)
    signalled = time.monotonic()
    server.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    # The delay: not ready at once, everything else served, new connections too.
    assert request(http, "GET", "/v2/health/ready") == (503, b'{"ready":false}')
    assert request(http, "GET", "/v2/health/live")[0] == 200
    assert not client.is_server_ready()
    assert client.is_server_live()
    status, body = request(http, "POST", "/v2/models/simple/infer", SIMPLE)
    assert status == 200, (status, body)
    assert json.loads(body)["outputs"][0]["data"] == list(range(1, 17))
    assert time.monotonic() - signalled < 2, "the checks outlasted the delay"
    # After the delay the port stops accepting, while the request in flight goes on.
    deadline = time.monotonic() + 5
    while accepts(http) and time.monotonic() < deadline:
        time.sleep(0.05)
    stopped_accepting = time.monotonic() - signalled
    assert 1.9 < stopped_accepting < 3.0, stopped_accepting
    assert not accepts(grpc)
    thread.join(timeout=30)
    assert outcome and outcome[0][0] == 200, outcome
    assert "".join(outcome[0][1]) == WORDS, outcome
    assert server.wait(timeout=30) == 0
    print(f"delay then drain: not accepting after {stopped_accepting:.2f} s, the request in "
          f"flight answered, exit 0 after {time.monotonic() - signalled:.2f} s")


def timeout_cancels(path):
    server, http, _ = start(path, "--exit-timeout-secs", "1")
    # 7 words 2 s apart: 12 s, far past the 1 s timeout.
    thread, outcome = in_flight(http, 2000)
    signalled = time.monotonic()
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=10) == 0
    took = time.monotonic() - signalled
    assert took < 3, took
    thread.join(timeout=10)
    # The stream had begun (200) and is cut short: its chunked body never ends.
    assert outcome and outcome[0][0] is None and b"IncompleteRead" in outcome[0][1], outcome
    print(f"exit timeout: the stream in flight cut short, exit 0 after {took:.2f} s")


def second_signal_ends_delay(path):
    server, http, _ = start(path, "--exit-delay-secs", "60")
    server.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert request(http, "GET", "/v2/health/ready")[0] == 503
    signalled = time.monotonic()
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=10) == 0
    print(f"a second signal: exit 0 after {time.monotonic() - signalled:.2f} s of a 60 s delay")


def main():
    path = sys.argv[1]
    delay_then_drain(path)
    timeout_cancels(path)
    second_signal_ends_delay(path)
    print("shutdown: all passed")


if __name__ == "__main__":
    main()
