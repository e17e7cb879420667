#!/usr/bin/env python3
"""oip-serve's command line as Triton's users write it: --models loads just those models (an
unknown one is an error), --allow-metrics=false and --allow-grpc false leave those servers off,
--allow-shared-memory=false leaves the extension off, a wrong value is exit code 2, Triton's
metrics options that oip-serve has no use for are accepted, and --model-control-mode: none (the
default) refuses loads and unloads over HTTP and gRPC while the index answers as fast as a health
check, explicit loads those of --load-model and what clients ask for; --cache-config turns on
Triton's response cache.

Usage: oip_serve_options_test.py PATH/TO/oip-serve
"""

import json
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def start(server_path, *args):
    """oip-serve with `args`, and its line of listening servers."""
    server = subprocess.Popen([server_path, "--http-port", "0", "--grpc-port", "0",
                               "--metrics-port", "0", "--address", "127.0.0.1", *args],
                              stdout=subprocess.PIPE, text=True)
    for line in server.stdout:
        if "workers, models" in line:
            return server, line
    server.wait(timeout=30)
    raise AssertionError(f"oip-serve {args} did not start")


def stop(server):
    server.send_signal(signal.SIGTERM)
    code = server.wait(timeout=30)
    assert code == 0, code


def post(port, path, body=b"{}"):
    """(status, parsed JSON reply) of a POST."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def ports(line):
    return (re.search(r"HTTP on [^ ]+:(\d+)", line).group(1),
            re.search(r"gRPC on [^ ]+:(\d+)", line).group(1))


def median_ms(action, times=200):
    samples = []
    for _ in range(times):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def model_control_off(path):
    server, line = start(path)
    try:
        http_port, grpc_port = ports(line)
        refused = "explicit model load / unload is not allowed if polling is enabled"
        for action in ("load", "unload"):
            status, reply = post(http_port, f"/v2/repository/models/simple/{action}")
            assert (status, reply) == (400, {"error": refused}), (status, reply)
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        for call in (client.load_model, client.unload_model):
            try:
                call("simple")
                raise AssertionError("a load or unload was accepted in none mode")
            except InferenceServerException as e:
                assert e.status() == "StatusCode.FAILED_PRECONDITION", e.status()
                assert e.message() == refused, e.message()
        assert client.is_model_ready("simple")
        # The index answers from what the repository knows, building nothing.
        def health():
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready",
                                        timeout=10) as reply:
                assert reply.status == 200
        def index():
            assert post(http_port, "/v2/repository/index")[0] == 200
        health_ms, index_ms = median_ms(health), median_ms(index)
        print(f"median: health {health_ms:.3f} ms, index {index_ms:.3f} ms")
        assert index_ms <= max(10 * health_ms, 5.0), (health_ms, index_ms)
        # Shared memory is off by default and with =false.
        metadata = json.load(urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2"))
        assert "system_shared_memory" not in metadata["extensions"], metadata
    finally:
        stop(server)


def model_control_explicit(path):
    server, line = start(path, "--model-control-mode=explicit", "--load-model", "simple",
                         "--allow-shared-memory=false", "--models",
                         "simple,identity_fp32,classifier")
    try:
        assert "models simple," in line or line.rstrip().endswith("models simple"), line
        http_port, grpc_port = ports(line)
        status, index = post(http_port, "/v2/repository/index")
        states = {entry["name"]: entry["state"] for entry in index}
        assert states == {"simple": "READY", "identity_fp32": "UNAVAILABLE",
                          "classifier": "UNAVAILABLE"}, states
        assert post(http_port, "/v2/repository/models/identity_fp32/load") == (200, {})
        assert post(http_port, "/v2/repository/models/classifier/unload")[0] == 404
        status, reply = post(http_port, "/v2/repository/models/simple_int8/load")
        assert status == 404, (status, reply)  # not among --models
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        assert client.is_model_ready("identity_fp32")
        client.unload_model("identity_fp32")
        client.load_model("classifier")
        assert client.is_model_ready("classifier")
        status, reply = post(http_port, "/v2/systemsharedmemory/region/r/register",
                             b'{"key": "/r", "offset": 0, "byte_size": 8}')
        assert status == 501, (status, reply)  # --allow-shared-memory=false: off
    finally:
        stop(server)


def response_cache(path):
    """--cache-config: simple's repeated requests are answered from the cache, whichever
    transport and encoding they come by; the sequence model does not use it."""
    server, line = start(path, "--cache-config", "local,size=1048576", "--models",
                         "simple,sequence_accumulator")
    try:
        http_port, grpc_port = ports(line)
        values = np.arange(16, dtype=np.int32).reshape(1, 16)
        http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        sums = []
        for client, module, binary in [(http, httpclient, True), (http, httpclient, False),
                                       (grpc, grpcclient, None), (http, httpclient, True)]:
            inputs = [module.InferInput("INPUT0", [1, 16], "INT32"),
                      module.InferInput("INPUT1", [1, 16], "INT32")]
            for tensor in inputs:
                if binary is None:
                    tensor.set_data_from_numpy(values)
                else:
                    tensor.set_data_from_numpy(values, binary_data=binary)
            sums.append(client.infer("simple", inputs).as_numpy("OUTPUT0"))
        for got in sums:
            assert (got == 2 * values).all(), got
        stats = http.get_inference_statistics("simple")["model_stats"][0]
        assert stats["inference_stats"]["cache_hit"]["count"] == 3, stats
        assert stats["inference_stats"]["cache_miss"]["count"] == 1, stats
        assert stats["inference_stats"]["success"]["count"] == 4, stats
        assert stats["execution_count"] == 1, stats
        assert http.get_model_config("simple")["response_cache"] == {"enable": True}
        assert http.get_model_config("sequence_accumulator")["response_cache"] == \
            {"enable": False}
        assert grpc.get_model_config("simple").config.response_cache.enable
        metrics_port = re.search(r"metrics on [^ ]+:(\d+)", line).group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                    timeout=10) as reply:
            text = reply.read().decode()
        for series in ['nv_cache_num_hits_per_model{model="simple",version="1"} 3',
                       'nv_cache_num_misses_per_model{model="simple",version="1"} 1',
                       'nv_cache_num_hits_per_model{model="sequence_accumulator",version="1"} 0']:
            assert series + "\n" in text, (series, text)
    finally:
        stop(server)


def refused_command_lines(path):
    for arguments, message in [
            (["--allow-shared-memory=maybe"],
             "--allow-shared-memory takes true, false, on, off, 1 or 0, not 'maybe'"),
            (["--allow-shared-memory"], "allow-shared-memory"),
            (["--http-port", "70000"], "--http-port takes a whole number from 0 to 65535"),
            (["--model-control-mode", "poll"], "--model-control-mode takes none or explicit"),
            (["--load-model", "simple"], "--load-model needs --model-control-mode explicit"),
            (["--model-control-mode=explicit", "--load-model=nope"], "unknown model 'nope'"),
            (["--cache-config", "redis,size=10"], "--cache-config takes local,size=BYTES"),
            (["--no-such-option"], "no-such-option")]:
        refused = subprocess.run([path, *arguments], capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2, (arguments, refused)
        assert message in refused.stderr, (arguments, refused.stderr)


def main():
    path = sys.argv[1]
    model_control_off(path)
    model_control_explicit(path)
    response_cache(path)
    refused_command_lines(path)
    server, line = start(path, "--models", "simple,identity_fp32", "--allow-metrics=false",
                         "--allow-gpu-metrics", "true", "--metrics-interval-ms=2000")
    try:
        assert "metrics off" in line, line
        http_port = re.search(r"HTTP on [^ ]+:(\d+)", line).group(1)
        request = urllib.request.Request(f"http://127.0.0.1:{http_port}/v2/repository/index",
                                         data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=10) as reply:
            names = sorted(model["name"] for model in json.load(reply)
                           if model.get("state") == "READY")
        assert names == ["identity_fp32", "simple"], names
    finally:
        stop(server)

    server, line = start(path, "--models", "simple", "--allow-grpc", "false")
    stop(server)
    assert "gRPC off" in line and re.search(r"metrics on [^ ]+:\d+", line), line

    unknown = subprocess.run([path, "--models", "simple,no_such_model"], capture_output=True,
                             text=True, timeout=60)
    assert unknown.returncode == 2, unknown
    assert "unknown model 'no_such_model'" in unknown.stderr, unknown.stderr
    print("5 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
