"""Starts oip-serve on free loopback ports, runs a list of checks against it, stops it with
SIGTERM, and prints "N passed, M failed" (the closing line that CI counts).

Each check is called with the object that `make_clients(http_url, grpc_url)` returns; the
metrics endpoint's address is in `metrics_url` while the checks run.
"""

import re
import signal
import subprocess
import traceback

import ml_dtypes
import numpy as np

# The fixed-size datatypes of the identity_<type> models, with the numpy type of each.
IDENTITY_TYPES = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "BF16": ml_dtypes.bfloat16, "FP32": np.float32,
    "FP64": np.float64,
}


def identity_values(name, rng):
    """Random [2, 3] values of datatype `name`."""
    if name == "BOOL":
        return rng.standard_normal((2, 3)) > 0
    return (rng.standard_normal((2, 3)) * 100).astype(IDENTITY_TYPES[name])


metrics_url = None


def run(server_path, checks, make_clients, extra_args=()):
    global metrics_url
    server = subprocess.Popen([server_path, "--http-port", "0", "--grpc-port", "0",
                               "--metrics-port", "0",
                               "--address", "127.0.0.1", "--threads", "2", "--io-threads", "2",
                               *extra_args],
                              stdout=subprocess.PIPE, text=True)
    passed = failed = 0
    try:
        # The start-up lines: where the models run, then the ports.
        seen = ""
        match = None
        while match is None:
            line = server.stdout.readline()
            if not line:
                break
            seen += line
            match = re.search(
                r"HTTP on [^ ]+:(\d+), gRPC on [^ ]+:(\d+), metrics on [^ ]+:(\d+)", line)
        if not match:
            print("oip-serve did not start: " + seen)
            print("0 passed, 1 failed")
            return 1
        metrics_url = f"http://127.0.0.1:{match.group(3)}/metrics"
        clients = make_clients(f"127.0.0.1:{match.group(1)}", f"127.0.0.1:{match.group(2)}")
        for function in checks:
            try:
                function(clients)
                passed += 1
                print("ok: " + function.__name__)
            except Exception:  # noqa: BLE001 - every failure is reported, then counted
                failed += 1
                print("FAILED: " + function.__name__)
                traceback.print_exc()
        for client in (clients if isinstance(clients, tuple) else (clients,)):
            if hasattr(client, "close"):
                client.close()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            code = "killed"
    if code != 0:
        print(f"FAILED: oip-serve exited with {code} after SIGTERM")
        failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0
