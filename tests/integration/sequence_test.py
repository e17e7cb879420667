#!/usr/bin/env python3
"""Triton's sequence examples, as its own clients run them (tritonclient[http] and [grpc] from
PyPI, unchanged), against oip-serve: over HTTP, gRPC unary and gRPC streaming; integer and string
correlation ids; the plain (simple_sequence) and dyna (simple_dyna_sequence,
simple_string_dyna_sequence) models; a sequence that moves between transports; the rule errors.

Usage: sequence_test.py PATH/TO/oip-serve
"""

import queue
import sys
import threading
import uuid

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import oip_serve_runner

checks = []


def check(function):
    checks.append(function)
    return function


VALUES = [11, 7, 5, 3, 2, 0, 1]


def inputs_for(module, value):
    tensor = module.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return [tensor]


def output_of(result):
    return int(result.as_numpy("OUTPUT")[0][0])


def expected_lists(dyna, int_ids, string_id):
    """What Triton's example clients assert (simple_*_sequence_*_infer_client.py)."""
    seq0, seq1, strings = [], [], []
    for i in range(len(VALUES) + 1):
        e0 = 1 if i == 0 else VALUES[i - 1]
        e1 = 101 if i == 0 else -VALUES[i - 1]
        if i == 0:
            es = 20 if dyna else 21
        else:
            es = -VALUES[i - 1] + strings[i - 1] if dyna else -VALUES[i - 1]
        if dyna and i != 0 and VALUES[i - 1] == 1:
            e0 += int_ids[0]
            e1 += int_ids[1]
            es += int(string_id)
        seq0.append(e0)
        seq1.append(e1)
        strings.append(es)
    return seq0, seq1, strings


def sequence_inputs():
    return [0] + VALUES, [100] + [-v for v in VALUES], [20] + [-v for v in VALUES]


def run_sync(module, client, dyna):
    """The sync clients: seq0, then seq1, then the string sequence, each start to end."""
    int_model = "simple_dyna_sequence" if dyna else "simple_sequence"
    string_model = "simple_string_dyna_sequence" if dyna else "simple_sequence"
    int_ids = [1000, 1001]
    string_id = "1002" if dyna else str(uuid.uuid4())
    got = []
    for model, sequence_id, values in ((int_model, int_ids[0], sequence_inputs()[0]),
                                       (int_model, int_ids[1], sequence_inputs()[1]),
                                       (string_model, string_id, sequence_inputs()[2])):
        outputs = []
        for i, value in enumerate(values):
            result = client.infer(model, inputs_for(module, value), sequence_id=sequence_id,
                                  sequence_start=i == 0, sequence_end=i == len(values) - 1)
            outputs.append(output_of(result))
        got.append(outputs)
    expected = expected_lists(dyna, int_ids, string_id if dyna else 0)
    assert tuple(got) == expected, (got, expected)


@check
def http_sequences(clients):
    run_sync(httpclient, clients[0], dyna=False)


@check
def http_dyna_sequences(clients):
    run_sync(httpclient, clients[0], dyna=True)


@check
def grpc_sequences(clients):
    run_sync(grpcclient, clients[1], dyna=False)


@check
def grpc_dyna_sequences(clients):
    run_sync(grpcclient, clients[1], dyna=True)


def run_stream(client, dyna, offset):
    """The C++ stream client's order: the three STARTs first, then the rest interleaved; replies
    matched by request id, in order per sequence."""
    int_model = "simple_dyna_sequence" if dyna else "simple_sequence"
    string_model = "simple_string_dyna_sequence" if dyna else "simple_sequence"
    int_ids = [1000 + 2 * offset, 1001 + 2 * offset]
    string_id = str(1002 + offset) if dyna else f"SEQ-{uuid.uuid4()}"
    replies = queue.Queue()
    client.start_stream(callback=lambda result, error: replies.put((result, error)))
    sequences = list(zip((int_model, int_model, string_model), (*int_ids, string_id),
                         sequence_inputs(), ("a", "b", "s")))
    count = len(VALUES) + 1
    for i in range(count):
        for model, sequence_id, values, key in sequences:
            client.async_stream_infer(model, inputs_for(grpcclient, values[i]),
                                      request_id=f"{key}_{i}", sequence_id=sequence_id,
                                      sequence_start=i == 0, sequence_end=i == count - 1)
    got = {"a": [], "b": [], "s": []}
    for _ in range(3 * count):
        result, error = replies.get(timeout=30)
        assert error is None, error
        key, index = result.get_response().id.split("_")
        assert int(index) == len(got[key]), ("out of order", key, index)
        got[key].append(output_of(result))
    client.stop_stream()
    expected = expected_lists(dyna, int_ids, string_id if dyna else 0)
    assert (got["a"], got["b"], got["s"]) == expected, (got, expected)


@check
def grpc_stream_sequences(clients):
    run_stream(clients[1], dyna=False, offset=10)


@check
def grpc_stream_dyna_sequences(clients):
    run_stream(clients[1], dyna=True, offset=20)


@check
def one_sequence_across_transports(clients):
    http, grpc, _ = clients
    steps = [(http, httpclient, 5), (grpc, grpcclient, 7), (http, httpclient, -2),
             (grpc, grpcclient, 10)]
    sums = []
    for i, (client, module, value) in enumerate(steps):
        result = client.infer("sequence_accumulator", inputs_for_accumulator(module, value),
                              sequence_id="shared-across", sequence_start=i == 0,
                              sequence_end=i == len(steps) - 1)
        sums.append(int(result.as_numpy("OUTPUT")[0]))
    assert sums == [5, 12, 10, 20], sums


def inputs_for_accumulator(module, value):
    tensor = module.InferInput("INPUT", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [tensor]


@check
def concurrent_sequences_keep_their_order(clients):
    _, grpc, http_url = clients
    failures = []

    def one(client, module, sequence_id):
        total = 0
        for i in range(30):
            result = client.infer("sequence_accumulator", inputs_for_accumulator(module, i),
                                  sequence_id=sequence_id, sequence_start=i == 0,
                                  sequence_end=i == 29)
            total += i
            if int(result.as_numpy("OUTPUT")[0]) != total:
                failures.append((sequence_id, i))

    # tritonclient's HTTP client (gevent) serves one thread: each thread makes its own.
    def one_over_http(sequence_id):
        client = httpclient.InferenceServerClient(http_url)
        one(client, httpclient, sequence_id)
        client.close()

    threads = [threading.Thread(target=one_over_http, args=(5000 + n,)) for n in range(3)]
    threads += [threading.Thread(target=one, args=(grpc, grpcclient, f"g{n}")) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures


def expect_error(call, http_status, grpc_status, text):
    try:
        call()
    except InferenceServerException as e:
        assert text in e.message(), (e.message(), text)
        assert e.status() in (http_status, grpc_status), e.status()
        return
    raise AssertionError("no error: " + text)


@check
def rule_errors_over_both_transports(clients):
    for client, module, status in ((clients[0], httpclient, "400"),
                                   (clients[1], grpcclient, "StatusCode.INVALID_ARGUMENT")):
        expect_error(lambda: client.infer("simple_sequence", inputs_for(module, 1),
                                          sequence_id=424242),
                     status, status,
                     "inference request for sequence 424242 to model 'simple_sequence' must "
                     "specify the START flag on the first request of the sequence")
        expect_error(lambda: client.infer("simple_sequence", inputs_for(module, 1)),
                     status, status,
                     "inference request to model 'simple_sequence' must specify a non-zero or "
                     "non-empty correlation ID")
        expect_error(lambda: client.infer("simple_dyna_sequence", inputs_for(module, 1),
                                          sequence_id="text", sequence_start=True),
                     status, status,
                     "sequence batching control 'CORRID' data-type is 'BYTES', but model "
                     "'simple_dyna_sequence' expects 'UINT64'")
        two = module.InferInput("INPUT", [2, 1], "INT32")
        two.set_data_from_numpy(np.array([[1], [2]], dtype=np.int32))
        expect_error(lambda: client.infer("simple_sequence", [two], sequence_id=9,
                                          sequence_start=True),
                     status, status,
                     "inference request to model 'simple_sequence' must specify batch-size 1 due "
                     "to requirements of sequence batcher")


@check
def sequence_parameters_on_a_plain_model_are_ignored(clients):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    for client, module in ((clients[0], httpclient), (clients[1], grpcclient)):
        inputs = [module.InferInput("INPUT0", [1, 16], "INT32"),
                  module.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        # No START for an id never seen: a sequence model would refuse it; `simple` has none.
        result = client.infer("simple", inputs, sequence_id=31337, sequence_end=True)
        assert np.array_equal(result.as_numpy("OUTPUT0"), 2 * a)


@check
def stream_error_keeps_the_stream_open(clients):
    client = clients[1]
    replies = queue.Queue()
    client.start_stream(callback=lambda result, error: replies.put((result, error)))
    client.async_stream_infer("simple_sequence", inputs_for(grpcclient, 1), request_id="bad",
                              sequence_id=777)  # no START
    client.async_stream_infer("sequence_accumulator", inputs_for_accumulator(grpcclient, 4),
                              request_id="good", sequence_id=778, sequence_start=True,
                              sequence_end=True)
    seen = {}
    for _ in range(2):
        result, error = replies.get(timeout=30)
        if error is not None:
            seen["bad"] = str(error)
        else:
            seen[result.get_response().id] = int(result.as_numpy("OUTPUT")[0])
    client.stop_stream()
    assert "must specify the START flag" in seen["bad"], seen
    assert seen["good"] == 4, seen


@check
def configuration_tells_perf_analyzer_the_mode(clients):
    config = clients[0].get_model_config("simple_dyna_sequence")
    batching = config["sequence_batching"]
    assert batching["max_sequence_idle_microseconds"] == 10000000, batching
    kinds = {c["name"]: c["control"][0]["kind"] for c in batching["control_input"]}
    assert kinds == {"START": "CONTROL_SEQUENCE_START", "END": "CONTROL_SEQUENCE_END",
                     "READY": "CONTROL_SEQUENCE_READY", "CORRID": "CONTROL_SEQUENCE_CORRID"}
    grpc_config = clients[1].get_model_config("simple_string_dyna_sequence", as_json=True)
    corrid = grpc_config["config"]["sequence_batching"]["control_input"][-1]["control"][0]
    assert corrid["data_type"] == "TYPE_STRING", corrid
    metadata = clients[0].get_server_metadata()
    assert "sequence" in metadata["extensions"] and "sequence(string_id)" in metadata["extensions"]


def main():
    return oip_serve_runner.run(
        sys.argv[1], checks,
        lambda http_url, grpc_url: (httpclient.InferenceServerClient(http_url),
                                    grpcclient.InferenceServerClient(grpc_url), http_url))


if __name__ == "__main__":
    sys.exit(main())
