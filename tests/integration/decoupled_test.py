#!/usr/bin/env python3
"""Decoupled models against oip-serve, through the clients that stream: tritonclient[grpc]'s
streaming API (the flows and expected values of Triton's repeat and square examples, the empty
final response on and off, several requests in flight on one stream, cancellation), the raw gRPC
stub for the fields of a refused request's reply, and generate_stream read by a server-sent-events
client (httpx-sse) with each event's arrival time.

Usage: decoupled_test.py PATH/TO/oip-serve
"""

import json
import queue
import sys
import time
from functools import partial

import grpc
import httpx
import httpx_sse
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.service_pb2 as pb
import tritonclient.grpc.service_pb2_grpc as pb_grpc
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import oip_serve_runner

checks = []


def check(function):
    checks.append(function)
    return function


class Clients:
    def __init__(self, http_url, grpc_url):
        self.http_url = http_url
        self.grpc_url = grpc_url
        self.http = httpclient.InferenceServerClient(http_url)


def repeat_inputs(values, delays, wait):
    inputs = [grpcclient.InferInput("IN", [len(values)], "INT32"),
              grpcclient.InferInput("DELAY", [len(delays)], "UINT32"),
              grpcclient.InferInput("WAIT", [1], "UINT32")]
    inputs[0].set_data_from_numpy(np.array(values, dtype=np.int32))
    inputs[1].set_data_from_numpy(np.array(delays, dtype=np.uint32))
    inputs[2].set_data_from_numpy(np.array([wait], dtype=np.uint32))
    return inputs


def final_flag(result):
    return result.get_response().parameters["triton_final_response"].bool_param


def stream(clients, requests, expect_finals, timeout=20):
    """Sends `requests` (keyword arguments of async_stream_infer) on one stream and collects what
    arrives until `expect_finals` final responses or errors came: [(time, result or error)]."""
    received = queue.Queue()
    client = grpcclient.InferenceServerClient(clients.grpc_url)
    client.start_stream(callback=lambda result, error: received.put(
        (time.monotonic(), error if error else result)))
    try:
        for request in requests:
            client.async_stream_infer(**request)
        out, finals = [], 0
        deadline = time.monotonic() + timeout
        while finals < expect_finals:
            item = received.get(timeout=max(0.1, deadline - time.monotonic()))
            out.append(item)
            if isinstance(item[1], InferenceServerException) or final_flag(item[1]):
                finals += 1
        return out
    finally:
        client.stop_stream()
        client.close()


@check
def repeat_example_flow(clients):
    # Triton's simple_grpc_custom_repeat.py: ten values from 100, each its own response, in order
    # (with shorter delays than the example's second).
    got = stream(clients, [dict(model_name="repeat_int32",
                                inputs=repeat_inputs(list(range(100, 110)), [20] * 10, 20),
                                outputs=[grpcclient.InferRequestedOutput("OUT")],
                                enable_empty_final_response=True)], 1)
    results = [r for _, r in got]
    assert len(results) == 11, results
    assert [int(r.as_numpy("OUT")[0]) for r in results[:10]] == list(range(100, 110))
    assert not any(final_flag(r) for r in results[:10])
    # The flag-only final: an empty response, flagged final, naming the model.
    last = results[10].get_response()
    assert final_flag(results[10]) and len(last.outputs) == 0, last
    assert last.model_name == "repeat_int32", last
    # Only OUT was asked for.
    assert results[0].as_numpy("IDX") is None


@check
def empty_final_response_off(clients):
    # Without the empty final response, three responses, none flagged final: the stream sends
    # nothing for the flag-only final (as Triton).
    received = queue.Queue()
    client = grpcclient.InferenceServerClient(clients.grpc_url)
    client.start_stream(callback=lambda result, error: received.put(error or result))
    try:
        client.async_stream_infer(model_name="repeat_int32",
                                  inputs=repeat_inputs([4, 5, 6], [0, 0, 0], 0), request_id="off")
        results = [received.get(timeout=10) for _ in range(3)]
        assert [int(r.as_numpy("OUT")[0]) for r in results] == [4, 5, 6]
        assert [int(r.as_numpy("IDX")[0]) for r in results] == [0, 1, 2]
        assert not any(final_flag(r) for r in results)
        assert all(r.get_response().id == "off" for r in results)
        time.sleep(0.3)
        assert received.empty(), received.get()
    finally:
        client.stop_stream()
        client.close()


@check
def zero_responses(clients):
    # IN of shape [0]: no response, only the empty final when asked for.
    got = stream(clients, [dict(model_name="repeat_int32", inputs=repeat_inputs([], [], 0),
                                enable_empty_final_response=True)], 1)
    assert len(got) == 1 and final_flag(got[0][1]), got
    assert len(got[0][1].get_response().outputs) == 0


@check
def square_example_flow(clients):
    # Triton's square example: n responses of OUT = n.
    inputs = [grpcclient.InferInput("IN", [1], "INT32")]
    inputs[0].set_data_from_numpy(np.array([4], dtype=np.int32))
    got = stream(clients, [dict(model_name="square_int32", inputs=inputs,
                                enable_empty_final_response=True)], 1)
    values = [int(r.as_numpy("OUT")[0]) for _, r in got[:-1]]
    assert values == [4, 4, 4, 4], values
    assert final_flag(got[-1][1])


@check
def requests_interleave_on_one_stream(clients):
    # Three requests in flight on one stream: their responses come interleaved, each naming its
    # request, and every request ends with its final response.
    requests = [dict(model_name="repeat_int32", request_id=f"r{i}",
                     inputs=repeat_inputs([i * 10 + k for k in range(4)], [60] * 4, 0),
                     enable_empty_final_response=True) for i in range(3)]
    got = stream(clients, requests, 3)
    ids = [r.get_response().id for _, r in got]
    assert sorted(set(ids)) == ["r0", "r1", "r2"], ids
    for i in range(3):
        mine = [r for _, r in got if r.get_response().id == f"r{i}"]
        assert [int(r.as_numpy("OUT")[0]) for r in mine[:-1]] == [i * 10 + k for k in range(4)]
        assert final_flag(mine[-1]) and not any(final_flag(r) for r in mine[:-1])
    # Interleaved: the first request is not done before the others begin.
    first_done = ids.index("r0") + 4
    assert "r1" in ids[:first_done] and "r2" in ids[:first_done], ids


def response_stats(clients, model):
    stats = clients.http.get_inference_statistics(model)["model_stats"][0]
    return stats["response_stats"], stats["inference_stats"]


@check
def cancelling_the_stream_stops_the_model(clients):
    # A stream cancelled after the first of twenty responses: the model sees it within its next
    # delay, and sends nothing more (its statistics count a cancel, not nineteen more responses).
    before, _ = response_stats(clients, "repeat_int32")
    received = queue.Queue()
    client = grpcclient.InferenceServerClient(clients.grpc_url)
    client.start_stream(callback=lambda result, error: received.put(error or result))
    client.async_stream_infer(model_name="repeat_int32",
                              inputs=repeat_inputs(list(range(20)), [0] + [100] * 19, 0))
    first = received.get(timeout=10)
    assert int(first.as_numpy("OUT")[0]) == 0
    client.stop_stream(cancel_requests=True)
    client.close()
    deadline = time.monotonic() + 5
    while True:
        after, _ = response_stats(clients, "repeat_int32")
        cancels = sum(v["cancel"]["count"] for v in after.values()) - sum(
            v["cancel"]["count"] for v in before.values())
        if cancels == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert cancels == 1, after
    sent = sum(v["success"]["count"] for v in after.values()) - sum(
        v["success"]["count"] for v in before.values())
    assert sent <= 2, sent


@check
def unary_calls_are_refused(clients):
    grpc_client = grpcclient.InferenceServerClient(clients.grpc_url)
    try:
        grpc_client.infer("repeat_int32", repeat_inputs([1], [0], 0))
        raise AssertionError("ModelInfer ran a decoupled model")
    except InferenceServerException as e:
        assert "ModelInfer RPC doesn't support models with decoupled transaction policy" in \
            e.message(), e.message()
        assert e.status() == "StatusCode.UNIMPLEMENTED", e.status()
    finally:
        grpc_client.close()
    reply = httpx.post(f"http://{clients.http_url}/v2/models/repeat_int32/infer",
                       json={"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32",
                                         "data": [1]}]})
    assert reply.status_code == 400, reply
    assert reply.json()["error"] == \
        "HTTP end point doesn't support models with decoupled transaction policy"


@check
def refused_stream_requests_name_their_request(clients):
    # Every reply on a stream carries the request's id, model and version and the final flag,
    # a refused one too (so a client counting final flags never waits forever).
    channel = grpc.insecure_channel(clients.grpc_url)
    stub = pb_grpc.GRPCInferenceServiceStub(channel)

    def request(model, request_id, count):
        r = pb.ModelInferRequest(model_name=model, model_version="", id=request_id)
        tensor = r.inputs.add()
        tensor.name, tensor.datatype = "IN", "INT32"
        tensor.shape.extend([1])
        r.raw_input_contents.append(np.array([1] * count, dtype=np.int32).tobytes())
        return r

    replies = list(stub.ModelStreamInfer(iter([request("no_such_model", "a", 1),
                                               request("square_int32", "b", 2)]), timeout=10))
    channel.close()
    assert len(replies) == 2, replies
    for reply, (model, request_id) in zip(replies, [("no_such_model", "a"), ("square_int32", "b")]):
        assert reply.error_message, reply
        assert reply.infer_response.id == request_id, reply
        assert reply.infer_response.model_name == model, reply
        assert reply.infer_response.parameters["triton_final_response"].bool_param, reply


@check
def triton_grpc_error_ends_the_stream_with_the_status(clients):
    # Triton's triton_grpc_error header (tritonclient's start_stream(headers=...)): the responses
    # before the failed request, then its gRPC status in the callback, and the stream is over.
    received = queue.Queue()
    client = grpcclient.InferenceServerClient(clients.grpc_url)
    client.start_stream(callback=lambda result, error: received.put(error or result),
                        headers={"triton_grpc_error": "true"})
    try:
        client.async_stream_infer(model_name="repeat_int32",
                                  inputs=repeat_inputs([7, 8], [0, 0], 0), request_id="ok")
        results = [received.get(timeout=10) for _ in range(2)]
        assert [int(r.as_numpy("OUT")[0]) for r in results] == [7, 8], results
        client.async_stream_infer(model_name="no_such_model",
                                  inputs=repeat_inputs([1], [0], 0), request_id="refused")
        error = received.get(timeout=10)
        assert isinstance(error, InferenceServerException), error
        assert error.status() == "StatusCode.NOT_FOUND", error.status()
        assert "no_such_model" in error.message(), error.message()
        time.sleep(0.3)
        assert received.empty(), received.get()
    finally:
        client.stop_stream()
        client.close()


@check
def generate_stream_sends_each_event_as_it_is_made(clients):
    body = {"IN": [4, 5, 6], "DELAY": [150, 150, 150], "WAIT": [0]}
    arrivals, events = [], []
    with httpx.Client(timeout=10) as http:
        with httpx_sse.connect_sse(http, "POST",
                                   f"http://{clients.http_url}/v2/models/repeat_int32/"
                                   "generate_stream", json=body) as source:
            assert source.response.status_code == 200
            for event in source.iter_sse():
                arrivals.append(time.monotonic())
                events.append(json.loads(event.data))
    assert [e["OUT"] for e in events] == [4, 5, 6], events
    assert [e["IDX"] for e in events] == [0, 1, 2], events
    # Each came when it was made, about 150 ms apart: not buffered to the end of the body.
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert all(gap > 0.1 for gap in gaps), gaps


@check
def generate_stream_streams_text(clients):
    prompt = "The quick brown fox jumps over the lazy dog"
    with httpx.Client(timeout=10) as http:
        with httpx_sse.connect_sse(http, "POST",
                                   f"http://{clients.http_url}/v2/models/text_stream/"
                                   "generate_stream", json={"text_input": prompt}) as source:
            events = [json.loads(e.data) for e in source.iter_sse()]
        assert "".join(e["text_output"] for e in events) == prompt, events
        assert [e["completion_tokens"] for e in events] == list(range(1, 10)), events
        assert events[-1]["finish_reason"] == "stop" and events[0]["prompt_tokens"] == 9
        with httpx_sse.connect_sse(http, "POST",
                                   f"http://{clients.http_url}/v2/models/text_stream/"
                                   "generate_stream",
                                   json={"text_input": prompt, "max_tokens": 3}) as source:
            events = [json.loads(e.data) for e in source.iter_sse()]
        assert "".join(e["text_output"] for e in events) == "The quick brown", events
        assert events[-1]["finish_reason"] == "length"
        # The model's failure is an event too (here before any response).
        with httpx_sse.connect_sse(http, "POST",
                                   f"http://{clients.http_url}/v2/models/text_stream/"
                                   "generate_stream",
                                   json={"text_input": prompt, "delay_ms": "soon"}) as source:
            events = [json.loads(e.data) for e in source.iter_sse()]
        assert len(events) == 1 and "delay_ms" in events[0]["error"], events


@check
def generate_takes_exactly_one_response(clients):
    url = f"http://{clients.http_url}/v2/models/repeat_int32/generate"
    one = httpx.post(url, json={"IN": [7], "DELAY": [0], "WAIT": [0]})
    assert one.status_code == 200 and one.json()["OUT"] == 7, one.text
    many = httpx.post(url, json={"IN": [7, 8], "DELAY": [0, 0], "WAIT": [0]})
    assert many.status_code == 400, many.text
    assert many.json()["error"] == ("generate expects model to produce exactly 1 response, use "
                                    "generate stream for model that generates various number of "
                                    "responses")


@check
def configuration_statistics_and_metrics(clients):
    config = clients.http.get_model_config("repeat_int32")
    assert config["model_transaction_policy"] == {"decoupled": True}, config
    assert clients.http.get_model_config("simple")["model_transaction_policy"] == \
        {"decoupled": False}
    grpc_client = grpcclient.InferenceServerClient(clients.grpc_url)
    try:
        grpc_config = grpc_client.get_model_config("square_int32", as_json=True)["config"]
        assert grpc_config["model_transaction_policy"]["decoupled"] is True, grpc_config
    finally:
        grpc_client.close()
    stats, _ = response_stats(clients, "repeat_int32")
    assert stats["0"]["success"]["count"] > 0 and stats["0"]["compute_infer"]["ns"] > 0, stats
    assert any(v["empty_response"]["count"] > 0 for v in stats.values()), stats
    metrics = httpx.get(oip_serve_runner.metrics_url).text
    assert 'nv_inference_first_response_histogram_ms_count{model="repeat_int32",version="1"}' \
        in metrics


def main():
    return oip_serve_runner.run(sys.argv[1], checks, Clients)


if __name__ == "__main__":
    sys.exit(main())
