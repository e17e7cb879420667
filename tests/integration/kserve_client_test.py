#!/usr/bin/env python3
"""KServe's own Python clients (the `kserve` SDK from PyPI: InferenceRESTClient with the v2
protocol, InferenceGRPCClient), unchanged, against oip-serve.

Usage: kserve_client_test.py PATH/TO/oip-serve
"""

import asyncio
import logging
import sys

import grpc
import httpx
import numpy as np
from kserve import (InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest,
                    RESTConfig)
from kserve.protocol.infer_type import RequestedOutput

import oip_serve_runner

# The clients log each failed call with its traceback; the checks assert the failures they expect.
logging.getLogger("kserve").setLevel(logging.CRITICAL)

checks = []


def check(function):
    checks.append(function)
    return function


class urls:
    def __init__(self, http, grpc_address):
        self.http = "http://" + http
        self.grpc = grpc_address


async def with_rest(use):
    client = InferenceRESTClient(RESTConfig(protocol="v2"))
    try:
        return await use(client)
    finally:
        await client.close()


async def with_grpc(servers, use):
    client = InferenceGRPCClient(servers.grpc)
    try:
        return await use(client)
    finally:
        await client.close()


def simple_request(binary=False):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    inputs = [InferInput("INPUT0", [1, 16], "INT32"), InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return a, b, inputs


def outputs_of(response):
    return {output.name: output.as_numpy() for output in response.outputs}


@check
def health_over_rest_and_grpc(servers):
    async def rest(client):
        assert await client.is_server_live(servers.http)
        assert await client.is_server_ready(servers.http)
        assert await client.is_model_ready(servers.http, "simple")
        assert not await client.is_model_ready(servers.http, "no_such_model")

    async def over_grpc(client):
        assert await client.is_server_live()
        assert await client.is_server_ready()
        assert await client.is_model_ready("simple")

    asyncio.run(with_rest(rest))
    asyncio.run(with_grpc(servers, over_grpc))


@check
def simple_over_rest_as_json_and_binary(servers):
    async def infer(client):
        for binary in (False, True):
            a, b, inputs = simple_request(binary)
            request = InferRequest(model_name="simple", infer_inputs=inputs, request_id="k1")
            response = await client.infer(servers.http, request, model_name="simple")
            assert response.id == "k1", response.id
            assert response.model_name == "simple", response.model_name
            out = outputs_of(response)
            assert np.array_equal(out["OUTPUT0"], a + b), out
            assert np.array_equal(out["OUTPUT1"], a - b), out

    asyncio.run(with_rest(infer))


@check
def binary_outputs_over_rest(servers):
    async def infer(client):
        a, b, inputs = simple_request(binary=True)
        request = InferRequest(model_name="simple", infer_inputs=inputs,
                               request_outputs=[RequestedOutput("OUTPUT1",
                                                                {"binary_data": True})])
        response = await client.infer(servers.http, request, model_name="simple")
        out = outputs_of(response)
        assert list(out) == ["OUTPUT1"], out
        assert np.array_equal(out["OUTPUT1"], a - b), out

    asyncio.run(with_rest(infer))


@check
def fp16_and_bytes_over_rest(servers):
    half = np.array([[1.5, -2.25, 65504.0]], dtype=np.float16)
    # KServe's REST client turns every BYTES output into text, so these are UTF-8 (a NUL included).
    text = np.array([[b"ab", "h\u00e9llo\u0000".encode()]], dtype=np.object_)

    async def infer(client):
        x = InferInput("INPUT0", [1, 3], "FP16")
        x.set_data_from_numpy(half, binary_data=True)  # KServe sends FP16 in binary only
        response = await client.infer(servers.http, InferRequest(model_name="identity_fp16",
                                                                 infer_inputs=[x]),
                                      model_name="identity_fp16")
        out = response.outputs[0]
        assert out.datatype == "FP16", out.datatype
        assert np.array_equal(out.as_numpy(), half), out.as_numpy()
        y = InferInput("INPUT0", [1, 2], "BYTES")
        y.set_data_from_numpy(text, binary_data=True)
        request = InferRequest(model_name="simple_identity", infer_inputs=[y],
                               request_outputs=[RequestedOutput("OUTPUT0",
                                                                {"binary_data": True})])
        response = await client.infer(servers.http, request, model_name="simple_identity")
        got = [x if isinstance(x, bytes) else x.encode()
               for x in response.outputs[0].as_numpy().flatten()]
        assert got == text.flatten().tolist(), got

    asyncio.run(with_rest(infer))


@check
def simple_fp16_and_bytes_over_grpc(servers):
    async def infer(client):
        a, b, inputs = simple_request()
        response = await client.infer(InferRequest(model_name="simple", infer_inputs=inputs,
                                                   request_id="g1"))
        assert response.id == "g1", response.id
        out = outputs_of(response)
        assert np.array_equal(out["OUTPUT0"], a + b), out
        assert np.array_equal(out["OUTPUT1"], a - b), out
        half = np.array([[0.5, -1.0, 3.0]], dtype=np.float16)
        x = InferInput("INPUT0", [1, 3], "FP16")
        x.set_data_from_numpy(half)
        response = await client.infer(InferRequest(model_name="identity_fp16", infer_inputs=[x]))
        assert np.array_equal(response.outputs[0].as_numpy(), half)
        text = np.array([[b"ab", b"\xff\x00c"]], dtype=np.object_)  # not UTF-8: fine over gRPC
        y = InferInput("INPUT0", [1, 2], "BYTES")
        y.set_data_from_numpy(text)
        response = await client.infer(InferRequest(model_name="simple_identity",
                                                   infer_inputs=[y]))
        assert response.outputs[0].as_numpy().tolist() == text.tolist(), response.outputs[0]

    asyncio.run(with_grpc(servers, infer))


@check
def client_mistakes_are_4xx_with_triton_words(servers):
    wrong = InferInput("INPUT0", [1, 16], "FP32")
    wrong.set_data_from_numpy(np.zeros((1, 16), dtype=np.float32))
    ones = InferInput("INPUT1", [1, 16], "INT32")
    ones.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))

    async def rest(client):
        try:
            await client.infer(servers.http, InferRequest(model_name="simple",
                                                          infer_inputs=[wrong, ones]),
                               model_name="simple")
        except httpx.HTTPStatusError as e:
            assert e.response.status_code == 400, e.response.status_code
            assert ("inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects"
                    " 'INT32'") in str(e), str(e)
            return
        raise AssertionError("an FP32 input was accepted for an INT32 one")

    async def over_grpc(client):
        try:
            await client.infer(InferRequest(model_name="no_such_model",
                                            infer_inputs=[wrong, ones]))
        except grpc.aio.AioRpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND, e.code()
            assert "Request for unknown model: 'no_such_model' is not found" in e.details()
            return
        raise AssertionError("an unknown model answered")

    asyncio.run(with_rest(rest))
    asyncio.run(with_grpc(servers, over_grpc))


if __name__ == "__main__":
    sys.exit(oip_serve_runner.run(sys.argv[1], checks, urls))
