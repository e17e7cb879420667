"""Starts oip-serve on free loopback ports, runs a list of checks against it, stops it with
SIGTERM, and prints "N passed, M failed" (the closing line that CI counts).

Each check is called with the object that `make_clients(http_url, grpc_url)` returns; the
metrics endpoint's address is in `metrics_url` while the checks run.
"""

import json
import os
import re
import signal
import subprocess
import tempfile
import time
import traceback

import ml_dtypes
import numpy as np
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

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
# oip-serve's trace file (tracing is off until a check turns it on).
trace_file = None


def run(server_path, checks, make_clients, extra_args=()):
    global metrics_url, trace_file
    trace_directory = tempfile.TemporaryDirectory()
    trace_file = os.path.join(trace_directory.name, "trace.json")
    server = subprocess.Popen([server_path, "--http-port", "0", "--grpc-port", "0",
                               "--metrics-port", "0",
                               "--address", "127.0.0.1", "--threads", "2", "--io-threads", "2",
                               "--trace-file", trace_file, *extra_args],
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
    trace_directory.cleanup()
    if code != 0:
        print(f"FAILED: oip-serve exited with {code} after SIGTERM")
        failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def check_system_shared_memory(client, client_module, region_names):
    """Inputs and outputs of `simple` through regions that the client makes and registers (the
    same for Triton's HTTP and gRPC clients; `region_names(client)` lists the registered ones)."""
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    tag = client_module.__name__.rsplit(".", 1)[-1]
    keys = [f"/oip_it_{name}_{os.getpid()}_{tag}" for name in ("in", "out")]
    regions = [shm.create_shared_memory_region(name, key, 128)
               for name, key in zip(("in", "out"), keys)]
    try:
        shm.set_shared_memory_region(regions[0], [a, b])
        client.unregister_system_shared_memory()
        client.register_system_shared_memory("in", keys[0], 128)
        client.register_system_shared_memory("out", keys[1], 128)
        assert sorted(region_names(client)) == ["in", "out"]
        inputs = [client_module.InferInput("INPUT0", [1, 16], "INT32"),
                  client_module.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory("in", 64)
        inputs[1].set_shared_memory("in", 64, offset=64)
        outputs = [client_module.InferRequestedOutput("OUTPUT0"),
                   client_module.InferRequestedOutput("OUTPUT1")]
        outputs[0].set_shared_memory("out", 64)
        outputs[1].set_shared_memory("out", 64, offset=64)
        result = client.infer("simple", inputs, outputs=outputs)
        assert result.get_output("OUTPUT0") is not None
        total = shm.get_contents_as_numpy(regions[1], np.int32, [1, 16])
        difference = shm.get_contents_as_numpy(regions[1], np.int32, [1, 16], offset=64)
        assert np.array_equal(total, a + b), total
        assert np.array_equal(difference, a - b), difference
        try:
            client.register_system_shared_memory("in", keys[0], 128)
            raise AssertionError("a second region named 'in' was accepted")
        except InferenceServerException as e:
            assert "already in manager" in e.message(), e.message()
            # Triton's codes: HTTP 400, gRPC ALREADY_EXISTS.
            assert e.status() in ("400", "StatusCode.ALREADY_EXISTS"), e.status()
        client.unregister_system_shared_memory("in")
        assert region_names(client) == ["out"]
        client.unregister_system_shared_memory()
        assert region_names(client) == []
    finally:
        for region in regions:
            shm.destroy_shared_memory_region(region)


def check_log_settings(client, flat):
    """Triton's logging extension through the client's get_log_settings / update_log_settings
    (the same for the HTTP and gRPC clients; `flat(reply)` turns a reply into a plain dict)."""
    assert flat(client.get_log_settings()) == {
        "log_file": "", "log_info": False, "log_warning": True, "log_error": True,
        "log_verbose_level": 0, "log_format": "default"}
    try:
        changed = flat(client.update_log_settings({"log_info": True, "log_format": "ISO8601"}))
        assert changed["log_info"] is True and changed["log_format"] == "ISO8601", changed
        assert flat(client.get_log_settings()) == changed
        for refused, words in (({"log_file": "/tmp/oip.log"}, "log file location"),
                               ({"log_format": "xml"}, "invalid argument for log_format")):
            try:
                client.update_log_settings(refused)
                raise AssertionError(f"{refused} was accepted")
            except InferenceServerException as e:
                assert words in e.message(), e.message()
        assert flat(client.get_log_settings()) == changed
    finally:
        client.update_log_settings({"log_info": False, "log_format": "default"})


def check_trace_settings(client, flat):
    """Triton's trace extension through the client's get_trace_settings / update_trace_settings,
    globally and for a model; `flat(reply)` turns a reply into a plain dict of Triton's HTTP
    shape."""
    defaults = {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
                "log_frequency": "0", "trace_file": trace_file, "trace_mode": "triton"}
    assert flat(client.get_trace_settings()) == defaults
    try:
        own = flat(client.update_trace_settings(model_name="simple", settings={"trace_rate": "7"}))
        assert own == dict(defaults, trace_rate="7"), own
        assert flat(client.get_trace_settings(model_name="simple")) == own
        assert flat(client.get_trace_settings()) == defaults
        for refused, words in (({"trace_file": "/tmp/oip.trace"}, "trace file location"),
                               ({"trace_count": "-2"}, "Expecting value >= -1, got: -2"),
                               ({"trace_rate": "often"}, "Unable to parse 'trace_rate'")):
            try:
                client.update_trace_settings(settings=refused)
                raise AssertionError(f"{refused} was accepted")
            except InferenceServerException as e:
                assert words in e.message(), e.message()
        try:  # Triton's own test of an unknown model asserts this text
            client.get_trace_settings(model_name="does-not-exist")
            raise AssertionError("an unknown model's trace settings were given")
        except InferenceServerException as e:
            assert "Request for unknown model : does-not-exist" in e.message(), e.message()
    finally:
        client.update_trace_settings(model_name="simple", settings={"trace_rate": None})
    assert flat(client.get_trace_settings(model_name="simple")) == defaults


def check_traced_request(client, infer, frontend):
    """One request traced through oip-serve's own transport: the trace file holds Triton's
    frontend timestamps (`frontend` "HTTP" or "GRPC") around the request's, in order. Triton's
    trace_summary.py skips every trace that lacks them."""
    client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    try:
        infer()
    finally:
        client.update_trace_settings(settings={"trace_level": None, "trace_rate": None})
    sent = frontend + "_SEND_END"
    text = ""
    for _ in range(300):  # the trace is written once the reply has gone
        if os.path.exists(trace_file):
            with open(trace_file) as f:
                text = f.read()
        if sent in text:
            break
        time.sleep(0.01)
    # The file is one JSON array, closed when oip-serve stops.
    stamps = {}
    for entry in json.loads(text.rstrip() + "]"):
        for stamp in entry.get("timestamps", []):
            stamps.setdefault(entry["id"], {})[stamp["name"]] = stamp["ns"]
    traced = [t for t in stamps.values() if sent in t]
    assert traced, text
    read = ("HTTP_RECV_START", "HTTP_RECV_END") if frontend == "HTTP" else (
        "GRPC_WAITREAD_START", "GRPC_WAITREAD_END")
    order = [*read, "REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_END",
             "REQUEST_END", "INFER_RESPONSE_COMPLETE", frontend + "_SEND_START", sent]
    times = [traced[-1][name] for name in order]
    assert times == sorted(times), traced[-1]
