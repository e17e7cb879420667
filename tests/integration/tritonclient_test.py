#!/usr/bin/env python3
"""Triton's own Python HTTP client (tritonclient[http] from PyPI), unchanged, against oip-serve.

Usage: tritonclient_test.py PATH/TO/oip-serve [MORE oip-serve ARGUMENTS]
Starts oip-serve on free loopback ports, runs every check, stops it with SIGTERM, and prints
"N passed, M failed". Exits non-zero if any check failed.
"""

import sys

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import oip_serve_runner

checks = []


def check(function):
    checks.append(function)
    return function


def infer_simple(client, binary_inputs, binary_outputs, **options):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
              httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a, binary_data=binary_inputs)
    inputs[1].set_data_from_numpy(b, binary_data=binary_inputs)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_outputs),
               httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary_outputs)]
    result = client.infer("simple", inputs, outputs=outputs, request_id="7", **options)
    assert np.array_equal(result.as_numpy("OUTPUT0"), a + b)
    assert np.array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.get_response()["id"] == "7"
    assert result.get_response()["model_name"] == "simple"


@check
def health_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("simple")
    assert not client.is_model_ready("no_such_model")
    meta = client.get_server_metadata()
    assert meta["name"] == "oip", meta
    assert "binary_tensor_data" in meta["extensions"]
    model = client.get_model_metadata("simple")
    assert model["name"] == "simple" and model["versions"] == ["1"]
    assert model["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}
    config = client.get_model_config("simple")
    assert config["max_batch_size"] == 8
    assert config["input"][0]["data_type"] == "TYPE_INT32"
    stats = client.get_inference_statistics("simple")
    assert stats["model_stats"][0]["name"] == "simple"


@check
def infer_json_binary_and_mixed(client):
    for binary_inputs in (False, True):
        for binary_outputs in (False, True):
            infer_simple(client, binary_inputs, binary_outputs)


@check
def binary_data_output_at_request_level(client):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    inputs = [httpclient.InferInput("INPUT0", [2, 16], "INT32"),
              httpclient.InferInput("INPUT1", [2, 16], "INT32")]
    inputs[0].set_data_from_numpy(a, binary_data=False)
    inputs[1].set_data_from_numpy(a, binary_data=False)
    # No requested outputs: the client asks for all of them with binary_data_output, which
    # then decides the framing of every output.
    result = client.infer("simple", inputs)
    assert np.array_equal(result.as_numpy("OUTPUT0"), 2 * a)
    assert np.array_equal(result.as_numpy("OUTPUT1"), 0 * a)
    for output in result.get_response()["outputs"]:
        assert "binary_data_size" in output.get("parameters", {}), output


@check
def compression_both_ways(client):
    for algorithm in ("gzip", "deflate"):
        infer_simple(client, True, True, request_compression_algorithm=algorithm,
                     response_compression_algorithm=algorithm)


@check
def asyncio_client(client):
    """tritonclient.http.aio: aiohttp asks for gzip and deflate on every request while the client
    reads every reply but an inference's as it comes, so those replies must not be compressed."""
    import asyncio

    import tritonclient.http.aio as aioclient

    async def run():
        c = aioclient.InferenceServerClient(server_url)
        try:
            assert await c.is_server_ready()
            stats = await c.get_inference_statistics()  # every model's: several KiB
            assert len(stats["model_stats"]) > 5, stats
            index = await c.get_model_repository_index(headers={"admin-key": "admin-value"})
            assert any(m["name"] == "simple" for m in index), index
            config = await c.get_model_config("simple")
            assert config["max_batch_size"] == 8, config
            a = np.arange(16, dtype=np.int32).reshape(1, 16)
            inputs = [aioclient.InferInput("INPUT0", [1, 16], "INT32"),
                      aioclient.InferInput("INPUT1", [1, 16], "INT32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(a)
            result = await c.infer("simple", inputs)
            assert np.array_equal(result.as_numpy("OUTPUT0"), 2 * a)
            try:
                await c.get_model_metadata("no_such_model")
                raise AssertionError("an unknown model was found")
            except InferenceServerException as e:
                assert "no_such_model" in e.message(), e.message()
        finally:
            await c.close()

    asyncio.run(run())


@check
def strings(client):
    a = np.array([[str(i) for i in range(16)]], dtype=np.object_)
    b = np.array([["1"] * 16], dtype=np.object_)
    for binary in (False, True):
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "BYTES"),
                  httpclient.InferInput("INPUT1", [1, 16], "BYTES")]
        inputs[0].set_data_from_numpy(a, binary_data=binary)
        inputs[1].set_data_from_numpy(b, binary_data=binary)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
        result = client.infer("simple_string", inputs, outputs=outputs)
        got = [x.decode() if isinstance(x, bytes) else x for x in result.as_numpy("OUTPUT0")[0]]
        assert got == [str(i + 1) for i in range(16)], got


@check
def strings_with_nul_bytes(client):
    data = np.array([[b"a\x00b", b"\x00", b"", b"\xff\xfe"]], dtype=np.object_)
    inputs = [httpclient.InferInput("INPUT0", [1, 4], "BYTES")]
    inputs[0].set_data_from_numpy(data, binary_data=True)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
    result = client.infer("simple_identity", inputs, outputs=outputs)
    assert list(result.as_numpy("OUTPUT0")[0]) == list(data[0])
    # Through JSON too (valid UTF-8 with a NUL inside).
    text = np.array([["a\x00b", "c"]], dtype=np.object_)
    inputs = [httpclient.InferInput("INPUT0", [1, 2], "BYTES")]
    inputs[0].set_data_from_numpy(text, binary_data=False)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)]
    result = client.infer("simple_identity", inputs, outputs=outputs)
    got = [x.decode() if isinstance(x, bytes) else x for x in result.as_numpy("OUTPUT0")[0]]
    assert got == ["a\x00b", "c"], got




@check
def every_identity_datatype(client):
    rng = np.random.default_rng(3)
    for name in oip_serve_runner.IDENTITY_TYPES:
        values = oip_serve_runner.identity_values(name, rng)
        json_ok = name != "BF16"  # tritonclient sends BF16 as binary only
        for binary in ((False, True) if json_ok else (True,)):
            inputs = [httpclient.InferInput("INPUT0", [2, 3], name)]
            inputs[0].set_data_from_numpy(values, binary_data=binary)
            outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
            result = client.infer("identity_" + name.lower(), inputs, outputs=outputs)
            got = result.as_numpy("OUTPUT0")
            assert got.shape == (2, 3), (name, got.shape)
            assert got.tobytes() == values.tobytes(), (name, binary)


@check
def classification(client):
    a = np.array([[5, 1, 9, 3] * 4], dtype=np.int32)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
              httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.zeros((1, 16), dtype=np.int32))
    for binary in (False, True):
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary, class_count=2)]
        result = client.infer("simple", inputs, outputs=outputs)
        got = [x.decode() if isinstance(x, bytes) else x for x in result.as_numpy("OUTPUT0")[0]]
        assert got == ["9:2", "9:6"], got


@check
def classifier_with_labels_and_batches(client):
    x = np.random.default_rng(5).standard_normal((2, 2048)).astype(np.float32)
    inputs = [httpclient.InferInput("INPUT0", [2, 2048], "FP32")]
    inputs[0].set_data_from_numpy(x)
    full = client.infer("classifier", inputs).as_numpy("OUTPUT0")
    assert full.shape == (2, 1000)
    assert np.allclose(full.sum(axis=1), 1.0, atol=1e-4)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", class_count=3)]
    top = client.infer("classifier", inputs, outputs=outputs).as_numpy("OUTPUT0")
    assert top.shape == (2, 3), top.shape
    for row in range(2):
        best = int(np.argmax(full[row]))
        value, index, label = top[row][0].decode().split(":")
        assert int(index) == best and label == f"class_{best:03}", top[row][0]
        assert np.float32(value) == full[row][best], (value, full[row][best])


@check
def errors_for_unknown_model_and_bad_input(client):
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(np.zeros((1, 16), dtype=np.int32))
    try:
        client.infer("no_such_model", inputs)
        raise AssertionError("no error for an unknown model")
    except InferenceServerException as e:
        assert "Request for unknown model: 'no_such_model' is not found" in e.message(), e
        assert e.status() == "404", e.status()
    try:
        client.infer("simple", inputs)
        raise AssertionError("no error for a missing input")
    except InferenceServerException as e:
        assert "expected 2 inputs but got 1 inputs for model 'simple'" in e.message(), e
        assert e.status() == "400", e.status()


@check
def prometheus_metrics(client):
    """GET /metrics on the metrics port: Triton's names, the same counts as the statistics."""
    import re
    import urllib.error
    import urllib.request
    infer_simple(client, False, False)
    with urllib.request.urlopen(oip_serve_runner.metrics_url, timeout=10) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4"), reply.headers
        text = reply.read().decode()
    stats = client.get_inference_statistics("simple")["model_stats"][0]

    def value(name, labels='model="simple",version="1"'):
        match = re.search(r"^" + re.escape(name + "{" + labels + "}") + r" (\S+)$", text, re.M)
        assert match, f"{name} missing:\n{text[:2000]}"
        return float(match.group(1))
    success = value("nv_inference_request_success")
    assert success >= 1 and success == stats["inference_stats"]["success"]["count"], (success, stats)
    assert value("nv_inference_exec_count") == stats["execution_count"]
    assert value("nv_inference_count") == stats["inference_count"]
    failures = sum(value("nv_inference_request_failure", f'model="simple",reason="{reason}",version="1"')
                   for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"))
    assert failures == stats["inference_stats"]["fail"]["count"]
    assert value("nv_inference_pending_request_count") == 0
    assert value("oip_inference_request_duration_seconds_count") == success
    assert value("oip_inference_request_duration_seconds_bucket",
                 'model="simple",version="1",le="+Inf"') == success
    assert "# TYPE nv_inference_queue_duration_us counter" in text
    assert value("oip_sequences_active", 'model="simple_sequence",version="1"') >= 0

    def machine(name):
        match = re.search(r"^" + name + r" (\S+)$", text, re.M)
        assert match, f"{name} missing:\n{text[-2000:]}"
        return float(match.group(1))
    assert 0 <= machine("nv_cpu_utilization") <= 1
    with open("/proc/meminfo") as meminfo:
        total = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:")) * 1024
    assert machine("nv_cpu_memory_total_bytes") == total
    assert 0 < machine("nv_cpu_memory_used_bytes") <= total
    try:
        urllib.request.urlopen(oip_serve_runner.metrics_url.replace("/metrics", "/v2"), timeout=10)
        raise AssertionError("the metrics port serves the protocol too")
    except urllib.error.HTTPError as e:
        assert e.code == 404, e.code


def region_names(client):
    return [region["name"] for region in client.get_system_shared_memory_status()]


@check
def system_shared_memory(client):
    """Inputs and outputs through regions that the client makes and registers."""
    oip_serve_runner.check_system_shared_memory(client, httpclient, region_names)

@check
def log_settings(client):
    """Triton's logging extension: read, change, refusals."""
    oip_serve_runner.check_log_settings(client, lambda reply: reply)


@check
def trace_settings(client):
    """Triton's trace extension: global and per-model settings, refusals."""
    oip_serve_runner.check_trace_settings(client, lambda reply: reply)


@check
def traced_request(client):
    """A request traced with Triton's HTTP frontend timestamps."""
    oip_serve_runner.check_traced_request(
        client, lambda: infer_simple(client, binary_inputs=True, binary_outputs=True), "HTTP")


@check
def restricted_repository(client):
    """oip-serve runs here with --http-restricted-api model-repository:admin-key=admin-value."""
    try:
        client.get_model_repository_index()
        raise AssertionError("the restricted repository index answered without its header")
    except InferenceServerException as e:
        assert e.message() == "This API is restricted, expecting header 'admin-key'", e.message()
        assert e.status() == "403", e.status()
    index = client.get_model_repository_index(headers={"admin-key": "admin-value"})
    assert any(entry["name"] == "simple" for entry in index), index
    # oip-serve's loader takes no configuration: one is refused, not ignored.
    try:
        client.load_model("simple", headers={"admin-key": "admin-value"},
                          config='{"max_batch_size": 8}')
        raise AssertionError("a load with a configuration was accepted")
    except InferenceServerException as e:
        assert e.status() == "400", e.status()
        assert "takes no load parameters" in e.message(), e.message()
    assert client.is_server_live()  # health is not restricted


server_url = None  # the HTTP address oip-serve listens on, for the checks that make their own client


def make_client(http_url, grpc_url):
    global server_url
    server_url = http_url
    return httpclient.InferenceServerClient(http_url)


def main():
    # Arguments after the server's path go to it as well (ctest runs the checks again with
    # --inline-execution true).
    return oip_serve_runner.run(sys.argv[1], checks, make_client,
                                extra_args=("--allow-shared-memory", "true", "--model-control-mode", "explicit",
                                            "--load-model", "*", "--http-restricted-api",
                                            "model-repository:admin-key=admin-value",
                                            *sys.argv[2:]))


if __name__ == "__main__":
    sys.exit(main())
