#!/usr/bin/env python3
"""The flows of Triton's three explicit-content examples (triton-inference-server/client,
src/python/examples/grpc_explicit_{int,int8,byte}_content_client.py) against oip-serve: typed
INT32, INT8 and BYTES `contents` in, the outputs read from `raw_output_contents` by index, as
those examples and Triton's server do.

Usage: triton_explicit_content_test.py PATH/TO/oip-serve
"""

import sys

import grpc
import numpy as np
from tritonclient import utils
from tritonclient.grpc import service_pb2, service_pb2_grpc

import oip_serve_runner

checks = []


def check(function):
    checks.append(function)
    return function


def request_of(model, fill):
    """A request for `model` with INPUT0 and INPUT1 of [1, 16] filled by `fill(tensor, index)`,
    and both outputs asked for by name."""
    request = service_pb2.ModelInferRequest()
    request.model_name = model
    request.model_version = ""
    for index in range(2):
        tensor = service_pb2.ModelInferRequest().InferInputTensor()
        tensor.name = f"INPUT{index}"
        tensor.shape.extend([1, 16])
        fill(tensor, index)
        request.inputs.append(tensor)
    for name in ("OUTPUT0", "OUTPUT1"):
        output = service_pb2.ModelInferRequest().InferRequestedOutputTensor()
        output.name = name
        request.outputs.append(output)
    return request


def outputs_by_index(response, read):
    """Each output read from raw_output_contents[i], as the examples read them."""
    assert len(response.raw_output_contents) == len(response.outputs), response
    return [np.resize(read(response.raw_output_contents[i]), list(output.shape))
            for i, output in enumerate(response.outputs)]


def check_integer_flow(stub, model, datatype, dtype):
    """Typed int_contents in (0..15 and ones), the sums and differences read raw as `dtype`."""
    def fill(tensor, index):
        tensor.datatype = datatype
        tensor.contents.int_contents[:] = list(range(16)) if index == 0 else [1] * 16
    response = stub.ModelInfer(request_of(model, fill))
    sums, differences = outputs_by_index(response, lambda raw: np.frombuffer(raw, dtype=dtype))
    assert list(sums[0]) == [i + 1 for i in range(16)], sums
    assert list(differences[0]) == [i - 1 for i in range(16)], differences


@check
def explicit_int_content(stub):
    check_integer_flow(stub, "simple", "INT32", np.int32)


@check
def explicit_int8_content(stub):
    check_integer_flow(stub, "simple_int8", "INT8", np.int8)


@check
def explicit_byte_content(stub):
    def fill(tensor, index):
        tensor.datatype = "BYTES"
        for i in range(16):
            tensor.contents.bytes_contents.append(str(i if index == 0 else 1).encode("utf-8"))
    response = stub.ModelInfer(request_of("simple_string", fill))
    sums, differences = outputs_by_index(response, utils.deserialize_bytes_tensor)
    assert [int(x) for x in sums[0]] == [i + 1 for i in range(16)], sums
    assert [int(x) for x in differences[0]] == [i - 1 for i in range(16)], differences


def main():
    return oip_serve_runner.run(
        sys.argv[1], checks,
        lambda http_url, grpc_url: service_pb2_grpc.GRPCInferenceServiceStub(
            grpc.insecure_channel(grpc_url)))


if __name__ == "__main__":
    sys.exit(main())
