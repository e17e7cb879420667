#!/usr/bin/env python3
"""Seldon's MLServer types and codecs (the `mlserver` package from PyPI), unchanged, against
oip-serve: requests built with MLServer's codecs and sent as its pydantic types serialise them
(REST) or as its converters turn them into its gRPC messages, and replies read back into its types
and decoded with its codecs, the way a Seldon user's client code does it.

Usage: mlserver_client_test.py PATH/TO/oip-serve
"""

import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

import grpc
import numpy as np
from mlserver.codecs import NumpyCodec, StringCodec
from mlserver.grpc import dataplane_pb2 as pb
from mlserver.grpc import dataplane_pb2_grpc
from mlserver.grpc.converters import (ModelInferRequestConverter, ModelInferResponseConverter,
                                      ModelMetadataResponseConverter,
                                      ServerMetadataResponseConverter)
from mlserver.types import (InferenceRequest, InferenceResponse, MetadataModelResponse,
                            MetadataServerResponse, Parameters, RequestOutput)

import oip_serve_runner

checks = []


def check(function):
    checks.append(function)
    return function


class clients:
    def __init__(self, http, grpc_address):
        self.http = "http://" + http
        self.channel = grpc.insecure_channel(grpc_address)
        self.grpc = dataplane_pb2_grpc.GRPCInferenceServiceStub(self.channel)

    def get(self, path):
        with urllib.request.urlopen(self.http + path, timeout=30) as reply:
            return reply.read()

    def infer_rest(self, model, request):
        body = request.model_dump_json(exclude_none=True).encode()
        with urllib.request.urlopen(self.http + f"/v2/models/{model}/infer", data=body,
                                    timeout=30) as reply:
            return InferenceResponse.model_validate_json(reply.read())

    def infer_grpc(self, model, request, use_raw):
        # The converter empties the request's inputs when it packs them raw: it gets a copy.
        message = ModelInferRequestConverter.from_types(request.model_copy(deep=True),
                                                        model_name=model, use_raw=use_raw)
        return ModelInferResponseConverter.to_types(self.grpc.ModelInfer(message, timeout=30))

    def close(self):
        self.channel.close()


def outputs_of(response):
    return {output.name: output for output in response.outputs}


def simple_request(**fields):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    inputs = [NumpyCodec.encode_input("INPUT0", a), NumpyCodec.encode_input("INPUT1", b)]
    return a, b, InferenceRequest(inputs=inputs, **fields)


@check
def metadata_reads_into_mlserver_types(c):
    server = MetadataServerResponse.model_validate_json(c.get("/v2"))
    assert server.name == "oip" and "binary_tensor_data" in server.extensions, server
    model = MetadataModelResponse.model_validate_json(c.get("/v2/models/simple"))
    assert model.name == "simple" and model.versions == ["1"], model
    assert [(t.name, t.datatype, t.shape) for t in model.inputs] == [
        ("INPUT0", "INT32", [-1, 16]), ("INPUT1", "INT32", [-1, 16])], model.inputs

    assert c.grpc.ServerLive(pb.ServerLiveRequest()).live
    assert c.grpc.ServerReady(pb.ServerReadyRequest()).ready
    assert c.grpc.ModelReady(pb.ModelReadyRequest(name="simple")).ready
    assert ServerMetadataResponseConverter.to_types(
        c.grpc.ServerMetadata(pb.ServerMetadataRequest())) == server
    assert ModelMetadataResponseConverter.to_types(
        c.grpc.ModelMetadata(pb.ModelMetadataRequest(name="simple"))) == model


@check
def simple_over_rest_and_grpc(c):
    a, b, request = simple_request(id="mlserver-1")
    replies = {"rest": c.infer_rest("simple", request),
               "grpc": c.infer_grpc("simple", request, use_raw=False),
               "grpc raw": c.infer_grpc("simple", request, use_raw=True)}
    for how, reply in replies.items():
        assert (reply.model_name, reply.model_version, reply.id) == (
            "simple", "1", "mlserver-1"), (how, reply)
        outputs = outputs_of(reply)
        assert np.array_equal(NumpyCodec.decode_output(outputs["OUTPUT0"]), a + b), how
        assert np.array_equal(NumpyCodec.decode_output(outputs["OUTPUT1"]), a - b), how


@check
def every_fixed_size_type_round_trips(c):
    rng = np.random.default_rng(7)
    # MLServer's gRPC converter puts typed FP16 values in `bytes_contents`, which protobuf
    # refuses before anything is sent: FP16 goes raw over gRPC, as MLServer's own server needs.
    # numpy has no bfloat16, so NumpyCodec has no BF16.
    for name, numpy_type in oip_serve_runner.IDENTITY_TYPES.items():
        if name == "BF16":
            continue
        values = oip_serve_runner.identity_values(name, rng)
        request = InferenceRequest(inputs=[NumpyCodec.encode_input("INPUT0", values)])
        model = "identity_" + name.lower()
        replies = {"rest": c.infer_rest(model, request),
                   "grpc raw": c.infer_grpc(model, request, use_raw=True)}
        if name != "FP16":
            replies["grpc"] = c.infer_grpc(model, request, use_raw=False)
        for how, reply in replies.items():
            output = reply.outputs[0]
            assert (output.datatype, output.shape) == (name, [2, 3]), (how, output)
            decoded = NumpyCodec.decode_output(output)
            assert decoded.dtype == numpy_type and np.array_equal(decoded, values), (
                name, how, decoded, values)


@check
def strings_over_rest_and_grpc(c):
    def strings(name, values):
        tensor = StringCodec.encode_input(name, [str(v) for v in values])
        tensor.shape = [1, 16]  # StringCodec makes a list; simple_string takes [batch, 16]
        return tensor

    request = InferenceRequest(inputs=[strings("INPUT0", range(16)), strings("INPUT1", [2] * 16)])
    for how, reply in {"rest": c.infer_rest("simple_string", request),
                       "grpc": c.infer_grpc("simple_string", request, use_raw=False),
                       "grpc raw": c.infer_grpc("simple_string", request,
                                                use_raw=True)}.items():
        outputs = outputs_of(reply)
        assert outputs["OUTPUT0"].datatype == "BYTES", (how, outputs)
        assert StringCodec.decode_output(outputs["OUTPUT0"]) == [
            str(v + 2) for v in range(16)], how
        assert StringCodec.decode_output(outputs["OUTPUT1"]) == [
            str(v - 2) for v in range(16)], how


@check
def requested_outputs_and_classification(c):
    a, b, request = simple_request(outputs=[
        RequestOutput(name="OUTPUT1"),
        RequestOutput(name="OUTPUT0", parameters=Parameters(classification=2))])
    for how, reply in {"rest": c.infer_rest("simple", request),
                       "grpc": c.infer_grpc("simple", request, use_raw=False)}.items():
        assert [o.name for o in reply.outputs] == ["OUTPUT1", "OUTPUT0"], (how, reply)
        difference, classes = reply.outputs
        assert np.array_equal(NumpyCodec.decode_output(difference), a - b), how
        # a + b is 3..18: the two largest are 18 at index 15 and 17 at index 14, one row each.
        assert (classes.datatype, classes.shape) == ("BYTES", [1, 2]), (how, classes)
        assert StringCodec.decode_output(classes) == ["18:15", "17:14"], (how, classes)


@check
def client_mistakes_are_4xx_with_triton_words(c):
    _, _, request = simple_request()
    try:
        c.infer_rest("nope", request)
        raise AssertionError("an unknown model was answered")
    except urllib.error.HTTPError as e:
        assert e.code == 404, e.code
        assert json.loads(e.read()) == {
            "error": "Request for unknown model: 'nope' is not found"}
    request.inputs[1].datatype = "FP32"
    try:
        c.infer_rest("simple", request)
        raise AssertionError("a wrong datatype was answered")
    except urllib.error.HTTPError as e:
        assert e.code == 400, e.code
        assert "FP32" in json.loads(e.read())["error"]

    _, _, request = simple_request()
    try:
        c.infer_grpc("nope", request, use_raw=False)
        raise AssertionError("an unknown model was answered")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND, e.code()
        assert e.details() == "Request for unknown model: 'nope' is not found", e.details()
    request.inputs = request.inputs[:1]
    try:
        c.infer_grpc("simple", request, use_raw=True)
        raise AssertionError("a missing input was answered")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.code()
        assert "INPUT1" in e.details(), e.details()


@check
def mlserver_infer_batch_client(c):
    """`mlserver infer`, MLServer's batch client (tritonclient underneath), with requests merged
    into micro-batches of two in JSON, then one by one as binary data."""
    requests = [{"id": f"r{i}", "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(i, i + 16))},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [i] * 16}]}
        for i in range(5)]
    mlserver = os.path.join(os.path.dirname(sys.executable), "mlserver")
    with tempfile.TemporaryDirectory() as directory:
        inputs = os.path.join(directory, "in.txt")
        with open(inputs, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in requests)
        for options in (["--batch-size", "2"], ["--binary-data"]):
            outputs = os.path.join(directory, "out.txt")
            subprocess.run([mlserver, "infer", "--url", c.http.removeprefix("http://"),
                            "--model-name", "simple", "--input-data-path", inputs,
                            "--output-data-path", outputs, "--transport", "rest", *options],
                           check=True, capture_output=True, timeout=120)
            with open(outputs) as f:
                replies = {r.id: r for r in map(InferenceResponse.model_validate_json, f)}
            assert sorted(replies) == [r["id"] for r in requests], (options, replies)
            for i in range(5):
                got = outputs_of(replies[f"r{i}"])
                assert NumpyCodec.decode_output(got["OUTPUT0"]).tolist() == [
                    [v + i for v in range(i, i + 16)]], (options, i, got)
                assert NumpyCodec.decode_output(got["OUTPUT1"]).tolist() == [
                    [v - i for v in range(i, i + 16)]], (options, i, got)


if __name__ == "__main__":
    sys.exit(oip_serve_runner.run(sys.argv[1], checks, clients))
