#!/usr/bin/env python3
"""oip-serve's shutdown as a cluster needs it. On SIGTERM with --exit-delay-secs N, readiness
turns 503 at once (HTTP, gRPC ServerReady, grpc.health.v1) while liveness and inference answer as
before; after N seconds the ports stop accepting; a request in flight finishes; the process exits
0. With an --exit-timeout-secs shorter than a request, that request is cancelled at the timeout
and the process still exits 0. A second signal ends the delay early.

Usage: shutdown_test.py PATH/TO/oip-serve
"""

import http.client
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
STARTED = []  # every server started, killed at the end if a check failed with it running


def start(server_path, *args):
    server = subprocess.Popen([server_path, "--http-port", "0", "--grpc-port", "0",
                               "--metrics-port", "0", "--address", "127.0.0.1",
                               "--models", "simple,text_stream", *args],
                              stdout=subprocess.PIPE, text=True)
    STARTED.append(server)
    for line in server.stdout:
        if "workers, models" in line:
            http_port = int(re.search(r"HTTP on [^ ]+:(\d+)", line).group(1))
            grpc_port = int(re.search(r"gRPC on [^ ]+:(\d+)", line).group(1))
            return server, http_port, grpc_port
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


def generate_slowly(port, delay_ms, first_word, outcome):
    """A streamed generate request whose seven words come `delay_ms` apart: sets `first_word`
    once the first event is in (the request is then with the model), and leaves its status and
    words in outcome, or None and the error if the stream broke."""
    body = json.dumps({"text_input": WORDS, "parameters": {"delay_ms": delay_ms}})
    words = []
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("POST", "/v2/models/text_stream/generate_stream", body,
                           {"Content-Type": "application/json"})
        reply = connection.getresponse()
        for line in reply:
            if line.startswith(b"data: "):
                words.append(json.loads(line[len(b"data: "):]).get("text_output"))
                first_word.set()
        outcome.append((reply.status, words))
    except Exception as e:  # a connection closed under the request: the test reads it
        outcome.append((None, repr(e)))
    finally:
        first_word.set()


def in_flight(port, delay_ms):
    outcome = []
    first_word = threading.Event()
    thread = threading.Thread(target=generate_slowly, args=(port, delay_ms, first_word, outcome))
    thread.start()
    assert first_word.wait(timeout=10), "the stream never began"
    assert not outcome, outcome
    return thread, outcome


def wait_closed(port, deadline_secs):
    """Seconds until `port` stops accepting, polled, or None past the deadline."""
    began = time.monotonic()
    while time.monotonic() - began < deadline_secs:
        if not accepts(port):
            return time.monotonic() - began
        time.sleep(0.05)
    return None


def delay_then_drain(path):
    server, http_port, grpc_port = start(path, "--exit-delay-secs", "3", "--exit-timeout-secs", "20")
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    assert request(http_port, "GET", "/v2/health/ready")[0] == 200
    assert client.is_server_ready()
    # 7 words 800 ms apart: about 4.8 s, past the 3 s delay.
    thread, outcome = in_flight(http_port, 800)
    signalled = time.monotonic()
    server.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    # The delay: not ready at once, everything else served, new connections too.
    assert request(http_port, "GET", "/v2/health/ready") == (503, b'{"ready":false}')
    assert request(http_port, "GET", "/v2/health/live")[0] == 200
    assert not client.is_server_ready()
    assert client.is_server_live()
    status, body = request(http_port, "POST", "/v2/models/simple/infer", SIMPLE)
    assert status == 200, (status, body)
    assert json.loads(body)["outputs"][0]["data"] == list(range(1, 17))
    assert time.monotonic() - signalled < 3, "the checks outlasted the delay"
    # After the delay the ports stop accepting, while the request in flight goes on.
    assert wait_closed(http_port, 8) is not None, "the HTTP port still accepts"
    stopped_accepting = time.monotonic() - signalled
    assert 2.9 < stopped_accepting < 5.0, stopped_accepting
    assert wait_closed(grpc_port, 5) is not None, "the gRPC port still accepts"
    thread.join(timeout=30)
    assert outcome and outcome[0][0] == 200, outcome
    assert "".join(outcome[0][1]) == WORDS, outcome
    assert server.wait(timeout=30) == 0
    print(f"delay then drain: not accepting after {stopped_accepting:.2f} s, the request in "
          f"flight answered, exit 0 after {time.monotonic() - signalled:.2f} s")


def timeout_cancels(path):
    server, http_port, _ = start(path, "--exit-timeout-secs", "1")
    # 7 words 2 s apart: 12 s, far past the 1 s timeout.
    thread, outcome = in_flight(http_port, 2000)
    signalled = time.monotonic()
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=10) == 0
    took = time.monotonic() - signalled
    assert took < 5, took
    thread.join(timeout=10)
    # The stream had begun (200) and is cut short: not every word came, or the read broke.
    assert outcome and (outcome[0][0] is None or
                        len(outcome[0][1]) < len(WORDS.split())), outcome
    print(f"exit timeout: the stream in flight cut short, exit 0 after {took:.2f} s")


def second_signal_ends_delay(path):
    server, http_port, _ = start(path, "--exit-delay-secs", "60")
    server.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert request(http_port, "GET", "/v2/health/ready")[0] == 503
    signalled = time.monotonic()
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=10) == 0
    print(f"a second signal: exit 0 after {time.monotonic() - signalled:.2f} s of a 60 s delay")


def main():
    path = sys.argv[1]
    try:
        delay_then_drain(path)
        timeout_cancels(path)
        second_signal_ends_delay(path)
    finally:
        for server in STARTED:
            if server.poll() is None:
                server.kill()
    print("shutdown: all passed")


if __name__ == "__main__":
    main()
