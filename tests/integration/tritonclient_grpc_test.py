#!/usr/bin/env python3
"""Triton's own Python gRPC client (tritonclient[grpc] from PyPI), unchanged, against oip-serve.

Usage: tritonclient_grpc_test.py PATH/TO/oip-serve [MORE oip-serve ARGUMENTS]
"""

import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

import oip_serve_runner

checks = []


def check(function):
    checks.append(function)
    return function


def simple_inputs(a, b):
    inputs = [grpcclient.InferInput("INPUT0", list(a.shape), "INT32"),
              grpcclient.InferInput("INPUT1", list(b.shape), "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


@check
def health_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("simple")
    assert not client.is_model_ready("no_such_model")
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "oip" and "statistics" in meta["extensions"], meta
    model = client.get_model_metadata("simple", as_json=True)
    assert model["versions"] == ["1"], model
    assert model["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": ["-1", "16"]}
    config = client.get_model_config("simple", as_json=True)["config"]
    assert config["max_batch_size"] == 8 and config["input"][0]["data_type"] == "TYPE_INT32"
    # oip-serve runs here with --grpc-restricted-protocol model-repository:admin-key=admin-value.
    try:
        client.get_model_repository_index(as_json=True)
        raise AssertionError("the restricted repository index answered without its header")
    except InferenceServerException as e:
        assert e.message() == ("This protocol is restricted, expecting header "
                               "'triton-grpc-protocol-admin-key'"), e.message()
        assert e.status() == "StatusCode.PERMISSION_DENIED", e.status()
    index = client.get_model_repository_index(
        headers={"triton-grpc-protocol-admin-key": "admin-value"}, as_json=True)
    assert any(m["name"] == "simple" and m["state"] == "READY" for m in index["models"]), index


@check
def infer_and_statistics(client):
    before = client.get_inference_statistics("simple", as_json=True)["model_stats"][0]
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.int32)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT1")]
    result = client.infer("simple", simple_inputs(a, b), outputs=outputs, request_id="11")
    assert np.array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.as_numpy("OUTPUT0") is None  # only what was asked for
    response = result.get_response()
    assert response.id == "11" and response.model_name == "simple"
    assert response.model_version == "1"
    after = client.get_inference_statistics("simple", as_json=True)["model_stats"][0]
    assert int(after["inference_count"]) == int(before.get("inference_count", 0)) + 2, after
    assert int(after["execution_count"]) == int(before.get("execution_count", 0)) + 1, after
    # batch_stats: the execution of 2 rows is counted under batch size 2.
    def executions_of_two(stats):
        return sum(int(b["compute_infer"]["count"]) for b in stats.get("batch_stats", [])
                   if int(b["batch_size"]) == 2)
    assert executions_of_two(after) == executions_of_two(before) + 1, after


@check
def compression(client):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    for algorithm in ("gzip", "deflate"):
        result = client.infer("simple", simple_inputs(a, a), compression_algorithm=algorithm)
        assert np.array_equal(result.as_numpy("OUTPUT0"), 2 * a)




@check
def every_identity_datatype(client):
    rng = np.random.default_rng(3)
    for name in oip_serve_runner.IDENTITY_TYPES:
        values = oip_serve_runner.identity_values(name, rng)
        inputs = [grpcclient.InferInput("INPUT0", [2, 3], name)]
        inputs[0].set_data_from_numpy(values)
        got = client.infer("identity_" + name.lower(), inputs).as_numpy("OUTPUT0")
        assert got.shape == (2, 3), (name, got.shape)
        assert got.tobytes() == values.tobytes(), name
    text = np.array([[b"a\x00b", b"", b"\xff\xfe"]], dtype=np.object_)
    inputs = [grpcclient.InferInput("INPUT0", [1, 3], "BYTES")]
    inputs[0].set_data_from_numpy(text)
    got = client.infer("identity_bytes", inputs).as_numpy("OUTPUT0")
    assert list(got[0]) == list(text[0]), got


@check
def strings_and_classification(client):
    a = np.array([[str(i) for i in range(16)]], dtype=np.object_)
    b = np.array([["1"] * 16], dtype=np.object_)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "BYTES"),
              grpcclient.InferInput("INPUT1", [1, 16], "BYTES")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    got = client.infer("simple_string", inputs).as_numpy("OUTPUT0")[0]
    assert [x.decode() for x in got] == [str(i + 1) for i in range(16)], got
    x = np.array([[5, 1, 9, 3] * 4], dtype=np.int32)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)]
    top = client.infer("simple", simple_inputs(x, np.zeros_like(x)), outputs=outputs)
    assert [v.decode() for v in top.as_numpy("OUTPUT0")[0]] == ["9:2", "9:6"]


@check
def errors_with_their_codes(client):
    a = np.zeros((1, 16), dtype=np.int32)
    cases = [
        (lambda: client.infer("no_such_model", simple_inputs(a, a)), "StatusCode.NOT_FOUND",
         "Request for unknown model: 'no_such_model' is not found"),
        (lambda: client.infer("simple", simple_inputs(a, a)[:1]), "StatusCode.INVALID_ARGUMENT",
         "expected 2 inputs but got 1 inputs for model 'simple'"),
        (lambda: client.infer("simple", simple_inputs(a, a), model_version="x"),
         "StatusCode.INVALID_ARGUMENT", "invalid model version 'x'"),
        (lambda: client.get_model_metadata("no_such_model"), "StatusCode.NOT_FOUND",
         "Request for unknown model"),
    ]
    for call, code, text in cases:
        try:
            call()
            raise AssertionError("no error: " + text)
        except InferenceServerException as e:
            assert e.status() == code, (e.status(), code)
            assert text in e.message(), (e.message(), text)


@check
def streaming_many_requests(client):
    replies = queue.Queue()
    client.start_stream(callback=lambda result, error: replies.put((result, error)))
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    for i in range(50):
        client.async_stream_infer("simple", simple_inputs(a, np.full_like(a, i)),
                                  request_id=str(i))
    client.async_stream_infer("no_such_model", simple_inputs(a, a), request_id="missing")
    seen = set()
    errors = []
    order = []
    for _ in range(51):
        result, error = replies.get(timeout=30)
        if error is not None:
            errors.append(str(error))
            order.append("missing")
            continue
        i = int(result.get_response().id)
        assert np.array_equal(result.as_numpy("OUTPUT0"), a + i)
        seen.add(i)
        order.append(i)
    client.stop_stream()
    assert seen == set(range(50)), seen
    assert len(errors) == 1 and "no_such_model" in errors[0], errors
    assert order == list(range(50)) + ["missing"], order  # in the order sent, as Triton answers


@check
def streaming_final_response_flag(client):
    # What PyTriton and many streaming clients wait for: with enable_empty_final_response, a reply
    # that says it is the request's last.
    replies = queue.Queue()
    client.start_stream(callback=lambda result, error: replies.put((result, error)))
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    client.async_stream_infer("simple", simple_inputs(a, a), request_id="f",
                              enable_empty_final_response=True)
    result, error = replies.get(timeout=30)
    client.stop_stream()
    assert error is None, error
    response = result.get_response()
    assert response.parameters["triton_final_response"].bool_param, response
    assert np.array_equal(result.as_numpy("OUTPUT0"), 2 * a)


def region_names(client):
    return sorted(client.get_system_shared_memory_status(as_json=True).get("regions", {}))


@check
def system_shared_memory(client):
    """Inputs and outputs through regions that the client makes and registers."""
    oip_serve_runner.check_system_shared_memory(client, grpcclient, region_names)

def flat_log_settings(reply):
    """A LogSettingsResponse as a plain dict, each value from its oneof."""
    return {key: getattr(value, value.WhichOneof("parameter_choice"))
            for key, value in reply.settings.items()}


@check
def log_settings(client):
    """Triton's logging extension: read, change, refusals."""
    oip_serve_runner.check_log_settings(client, flat_log_settings)


def flat_trace_settings(reply):
    """A TraceSettingResponse in Triton's HTTP shape: trace_level a list, the rest strings."""
    return {key: list(value.value) if key == "trace_level" else value.value[0]
            for key, value in reply.settings.items()}


@check
def trace_settings(client):
    """Triton's trace extension: global and per-model settings, refusals."""
    oip_serve_runner.check_trace_settings(client, flat_trace_settings)


@check
def load_with_a_configuration(client):
    """oip-serve's loader takes no configuration: a load with one is refused, never ignored."""
    try:
        client.load_model("simple", config='{"max_batch_size": 8}',
                          headers={"triton-grpc-protocol-admin-key": "admin-value"})
        raise AssertionError("a load with a configuration was accepted")
    except InferenceServerException as e:
        assert "takes no load parameters" in e.message(), e.message()


@check
def traced_request(client):
    """A request traced with Triton's gRPC frontend timestamps."""
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    oip_serve_runner.check_traced_request(
        client, lambda: client.infer("simple", simple_inputs(a, a)), "GRPC")


def main():
    # Arguments after the server's path go to it as well (ctest runs the checks again with
    # --inline-execution true).
    return oip_serve_runner.run(sys.argv[1], checks,
                                lambda http_url, grpc_url: grpcclient.InferenceServerClient(grpc_url),
                                extra_args=("--allow-shared-memory", "true", "--model-control-mode", "explicit",
                                            "--load-model", "*", "--grpc-restricted-protocol",
                                            "model-repository:admin-key=admin-value",
                                            *sys.argv[2:]))


if __name__ == "__main__":
    sys.exit(main())
