"""Triton's CUDA shared-memory extension with Triton's own Python clients and their CUDA utilities
(`tritonclient.utils.cuda_shared_memory`), as `simple_http_cudashm_client.py` and
`simple_grpc_cudashm_client.py` use them: regions made on the GPU and registered by handle over
HTTP and gRPC, `simple`'s inputs read from them and its outputs written to them, status and
unregistration. Exits 77 (a skip) where there is no GPU or no CUDA Python bindings.

Usage: cuda_shared_memory_test.py OIP_SERVE [extra oip-serve arguments]
"""

import sys

import numpy as np

try:
    import cuda.bindings.runtime as cudart
    import tritonclient.utils.cuda_shared_memory as cudashm
except (ImportError, RuntimeError) as error:
    print(f"skipped: no CUDA Python bindings ({error})")
    sys.exit(77)

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import oip_serve_runner


def check_simple_through_cuda_regions(client, client_module, region_names):
    """Both inputs of `simple` from one region, its outputs to another, on device 0."""
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    regions = [cudashm.create_shared_memory_region(name, 128, 0) for name in ("in", "out")]
    try:
        cudashm.set_shared_memory_region(regions[0], [a, b])
        client.unregister_cuda_shared_memory()
        client.register_cuda_shared_memory("in", cudashm.get_raw_handle(regions[0]), 0, 128)
        client.register_cuda_shared_memory("out", cudashm.get_raw_handle(regions[1]), 0, 128)
        assert sorted(region_names(client)) == ["in", "out"], region_names(client)
        inputs = [client_module.InferInput("INPUT0", [1, 16], "INT32"),
                  client_module.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory("in", 64)
        inputs[1].set_shared_memory("in", 64, offset=64)
        outputs = [client_module.InferRequestedOutput("OUTPUT0"),
                   client_module.InferRequestedOutput("OUTPUT1")]
        outputs[0].set_shared_memory("out", 64)
        outputs[1].set_shared_memory("out", 64, offset=64)
        result = client.infer("simple", inputs, outputs=outputs)
        assert result.get_output("OUTPUT0") is not None
        written = cudashm.get_contents_as_numpy(regions[1], np.int32, [2, 16])
        assert (written[0] == (a + b)[0]).all(), written
        assert (written[1] == (a - b)[0]).all(), written
        client.unregister_cuda_shared_memory("in")
        assert region_names(client) == ["out"], region_names(client)
        client.unregister_cuda_shared_memory()
        assert region_names(client) == []
    finally:
        for region in regions:
            cudashm.destroy_shared_memory_region(region)


def http_cuda_shared_memory(clients):
    http, _ = clients
    check_simple_through_cuda_regions(
        http, httpclient,
        lambda c: sorted(r["name"] for r in c.get_cuda_shared_memory_status()))


def grpc_cuda_shared_memory(clients):
    _, grpc = clients
    check_simple_through_cuda_regions(
        grpc, grpcclient,
        lambda c: sorted(c.get_cuda_shared_memory_status(as_json=True).get("regions", {})))


def server_metadata_lists_the_extension(clients):
    http, _ = clients
    assert "cuda_shared_memory" in http.get_server_metadata()["extensions"]


checks = [server_metadata_lists_the_extension, http_cuda_shared_memory, grpc_cuda_shared_memory]


def make_clients(http_url, grpc_url):
    return httpclient.InferenceServerClient(http_url), grpcclient.InferenceServerClient(grpc_url)


def main():
    error, count = cudart.cudaGetDeviceCount()
    if error != cudart.cudaError_t.cudaSuccess or count == 0:
        print("skipped: no CUDA device")
        return 77
    return oip_serve_runner.run(sys.argv[1], checks, make_clients,
                                extra_args=("--allow-shared-memory", "true", "--device", "cuda",
                                            *sys.argv[2:]))


if __name__ == "__main__":
    sys.exit(main())
