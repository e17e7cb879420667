#!/usr/bin/env python3
"""Triton's security advisories of 2024-2026, each as a request to oip-serve over its real
sockets (docs/reliability.md has the table): a client setting the log or trace file, shared-memory
offsets that overflow, a `file:` load parameter past 2 GiB, zero-sized dimensions in every input of every reference model (HTTP and
gRPC), deep recursion, large JSON bodies, and requests naming 100,000 outputs or one output twice.
Each must be refused with a 4xx (gRPC: a client's error code), and the server must go on.

Usage: security_advisories_test.py PATH/TO/oip-serve
"""

import http.client
import json
import os
from multiprocessing import shared_memory
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import grpc
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

CLIENT_ERRORS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                 grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNIMPLEMENTED,
                 grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.PERMISSION_DENIED,
                 grpc.StatusCode.OUT_OF_RANGE}


class server:
    def __init__(self, path):
        self.process = subprocess.Popen(
            [path, "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--address",
             "127.0.0.1", "--allow-shared-memory", "true"], stdout=subprocess.PIPE, text=True)
        for line in self.process.stdout:
            if "workers, models" in line:
                self.http = int(re.search(r"HTTP on [^ ]+:(\d+)", line).group(1))
                self.grpc = int(re.search(r"gRPC on [^ ]+:(\d+)", line).group(1))
                break
        else:
            raise AssertionError("oip-serve did not start")
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc}")
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self.client = grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc}")

    def request(self, method, path, body=None, headers=None):
        """(status, body) of one HTTP request on its own connection."""
        connection = http.client.HTTPConnection("127.0.0.1", self.http, timeout=60)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            reply = connection.getresponse()
            return reply.status, reply.read()
        finally:
            connection.close()

    def alive(self):
        assert self.process.poll() is None, "oip-serve ended"
        assert self.request("GET", "/v2/health/live")[0] == 200

    def stop(self):
        self.client.close()
        self.channel.close()
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=30)
        assert code == 0, code


def client_error(status):
    assert 400 <= status < 500, status


def files_set_by_clients(s):
    """CVE-2024-0087, CVE-2024-0100: the log and trace files are the host's alone."""
    with tempfile.TemporaryDirectory() as directory:
        target = os.path.join(directory, "written")
        for path, body in (("/v2/logging", {"log_file": target}),
                           ("/v2/trace/setting", {"trace_file": target})):
            status, reply = s.request("POST", path, json.dumps(body))
            assert status in (400, 403, 501), (path, status, reply)
            assert b"can not be updated" in reply or b"cannot" in reply, reply
        for update in (lambda: s.client.update_log_settings(settings={"log_file": target}),
                       lambda: s.client.update_trace_settings(settings={"trace_file": target})):
            try:
                update()
                raise AssertionError("a client set a file")
            except InferenceServerException:
                pass
        assert not os.path.exists(target)


def shared_memory_overflow(s):
    """CVE-2024-0088: offsets and sizes that overflow are refused before anything is mapped."""
    for offset, size in ((2**64 - 1, 2), (2**63, 2**63), (0, 2**64 - 1)):
        body = json.dumps({"key": "/oip_no_such_object", "offset": offset, "byte_size": size})
        status, reply = s.request("POST", "/v2/systemsharedmemory/region/r/register", body)
        client_error(status)
    # On use: a registered region, and ranges in it that overflow or pass its end.
    region = shared_memory.SharedMemory(create=True, size=4096)
    try:
        body = json.dumps({"key": "/" + region.name, "offset": 0, "byte_size": 4096})
        status, reply = s.request("POST", "/v2/systemsharedmemory/region/r/register", body)
        assert status == 200, reply
        for offset, size in ((2**64 - 1, 64), (4095, 64), (64, 2**64 - 64)):
            body = json.dumps({"inputs": [
                {"name": name, "shape": [1, 16], "datatype": "INT32",
                 "parameters": {"shared_memory_region": "r", "shared_memory_offset": offset,
                                "shared_memory_byte_size": size}}
                for name in ("INPUT0", "INPUT1")]})
            client_error(s.request("POST", "/v2/models/simple/infer", body)[0])
        assert s.request("POST", "/v2/systemsharedmemory/region/r/unregister")[0] == 200
    finally:
        region.close()
        region.unlink()


def huge_file_load_parameter(s):
    """CVE-2024-53880: a `file:` load parameter past 2 GiB of base64 meets the body limit (413)
    before a byte of it is read (the decoder's size arithmetic: tests/base64_test.cpp)."""
    connection = http.client.HTTPConnection("127.0.0.1", s.http, timeout=30)
    try:
        connection.putrequest("POST", "/v2/repository/models/simple/load")
        connection.putheader("Content-Length", str(3 << 30))
        connection.endheaders()
        reply = connection.getresponse()
        assert reply.status == 413, reply.status
    finally:
        connection.close()


ELEMENT_BYTES = {"BOOL": 1, "INT8": 1, "UINT8": 1, "INT16": 2, "UINT16": 2, "FP16": 2, "BF16": 2,
                 "INT32": 4, "UINT32": 4, "FP32": 4, "INT64": 8, "UINT64": 8, "FP64": 8,
                 "BYTES": 4}  # BYTES: an empty string is its 4-byte length
JSON_ZERO = {"BOOL": False, "BYTES": ""}


def zero_sized_dimensions(s):
    """CVE-2025-23321/23325: every input of every model, each dimension in turn 0, over HTTP
    (JSON) and gRPC (raw contents): a result or a client's error, never a fault."""
    status, index = s.request("POST", "/v2/repository/index", "{}")
    assert status == 200
    models = [m["name"] for m in json.loads(index) if m.get("state") == "READY"]
    assert len(models) > 10, models
    sent = 0
    for name in models:
        status, metadata = s.request("GET", f"/v2/models/{name}")
        assert status == 200, name
        inputs = json.loads(metadata)["inputs"]
        shapes = [[max(d, 1) for d in i["shape"]] for i in inputs]
        for which, declared in enumerate(inputs):
            for zeroed in range(len(declared["shape"])):
                tensors = []
                for k, i in enumerate(inputs):
                    shape = list(shapes[k])
                    if k == which:
                        shape[zeroed] = 0
                    tensors.append((i["name"], i["datatype"], shape))
                body = json.dumps({"inputs": [
                    {"name": n, "datatype": t, "shape": shape,
                     "data": [JSON_ZERO.get(t, 0)] * _count(shape)}
                    for n, t, shape in tensors]})
                status, reply = s.request("POST", f"/v2/models/{name}/infer", body)
                assert status == 200 or 400 <= status < 500, (name, tensors, status, reply)
                request = service_pb2.ModelInferRequest(model_name=name)
                for n, t, shape in tensors:
                    request.inputs.add(name=n, datatype=t, shape=shape)
                    request.raw_input_contents.append(b"\0" * (ELEMENT_BYTES[t] * _count(shape)))
                try:
                    s.stub.ModelInfer(request, timeout=30)
                except grpc.RpcError as e:
                    assert e.code() in CLIENT_ERRORS, (name, tensors, e.code(), e.details())
                sent += 2
    s.alive()
    print(f"  {sent} requests with a zero-sized dimension to {len(models)} models")


def _count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def deep_recursion(s):
    """CVE-2025-23321: nesting far past the depth limit is a 400, read without recursion."""
    for body in ("[" * 100_000, '{"inputs":' + "[" * 100_000,
                 '{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":' +
                 "[" * 100_000 + "]" * 100_000 + "}]}", '{"parameters":' + '{"a":' * 100_000):
        status, reply = s.request("POST", "/v2/models/simple/infer", body)
        assert status == 400, (status, reply[:200])


def large_json_bodies(s):
    """CVE-2025-33201: large JSON that would make a parser throw is a 4xx."""
    huge_string = '{"id":"' + "x" * (60 << 20) + '","inputs":[]}'
    many_numbers = ('{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[' +
                    ",".join(["1e999999"] * 1_000_000) + "]}]}")
    unterminated = '{"inputs":[{"name":"' + "y" * (50 << 20)
    too_large = " " * ((64 << 20) + 1)
    for body in (huge_string, many_numbers, unterminated, too_large):
        status, reply = s.request("POST", "/v2/models/simple/infer", body)
        client_error(status)
    s.alive()


def many_outputs(s):
    """CVE-2026-24146: 100,000 outputs, or one output twice: a 400, in time linear in the
    request."""
    inputs = [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
              {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]
    for outputs in ([{"name": f"OUT{i}"} for i in range(100_000)],
                    [{"name": "OUTPUT0"}] * 100_000,
                    [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]):
        started = time.monotonic()
        status, reply = s.request("POST", "/v2/models/simple/infer",
                                  json.dumps({"inputs": inputs, "outputs": outputs}))
        elapsed = time.monotonic() - started
        assert status == 400, (status, reply[:200])
        # Quadratic work on 100,000 names would take minutes; linear takes milliseconds.
        assert elapsed < 10, elapsed
    request = service_pb2.ModelInferRequest(model_name="simple")
    for i in range(100_000):
        request.outputs.add(name="OUTPUT0")
    try:
        s.stub.ModelInfer(request, timeout=30)
        raise AssertionError("100,000 outputs were accepted")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.code()


def main():
    s = server(sys.argv[1])
    checks = [files_set_by_clients, shared_memory_overflow, huge_file_load_parameter,
              zero_sized_dimensions,
              deep_recursion, large_json_bodies, many_outputs]
    failed = 0
    try:
        for check in checks:
            try:
                check(s)
                print(f"ok: {check.__name__}")
            except Exception:  # noqa: BLE001 - reported, then counted
                failed += 1
                print(f"FAILED: {check.__name__}")
                traceback.print_exc()
        s.alive()
    finally:
        s.stop()
    print(f"{len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
