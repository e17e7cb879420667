#!/usr/bin/env python3
"""examples/serve_model.cpp (a host's own model behind oip's servers, in one file) against
Triton's own clients, unchanged: metadata and an inference over HTTP and over gRPC, a bad
request refused with a 4xx, then a clean exit on SIGTERM.

Usage: serve_model_test.py PATH/TO/serve_model
"""

import re
import signal
import subprocess
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def infer_double(module, client):
    x = np.array([1.5, -2.0, 3.25], dtype=np.float32)
    inputs = [module.InferInput("X", [3], "FP32")]
    inputs[0].set_data_from_numpy(x)
    result = client.infer("double", inputs)
    assert np.array_equal(result.as_numpy("Y"), 2 * x), result.as_numpy("Y")


def main():
    server = subprocess.Popen([sys.argv[1], "--http-port", "0", "--grpc-port", "0"],
                              stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        ports = re.search(r"HTTP on :(\d+), gRPC on :(\d+)", line)
        assert ports, f"serve_model did not start: {line!r}"
        http = httpclient.InferenceServerClient(f"127.0.0.1:{ports.group(1)}")
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{ports.group(2)}")
        assert http.is_model_ready("double") and grpc.is_model_ready("double")
        metadata = http.get_model_metadata("double")
        assert metadata["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1]}], metadata
        infer_double(httpclient, http)
        infer_double(grpcclient, grpc)
        wrong = [httpclient.InferInput("X", [2], "INT32")]
        wrong[0].set_data_from_numpy(np.array([1, 2], dtype=np.int32))
        try:
            http.infer("double", wrong)
            raise AssertionError("an INT32 input was accepted for an FP32 one")
        except InferenceServerException as e:
            assert e.status() == "400", e.status()
        grpc.close()
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=30)
    assert code == 0, f"serve_model exited with {code} after SIGTERM"
    print("serve_model: Triton's clients over HTTP and gRPC passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
