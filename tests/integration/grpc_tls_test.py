#!/usr/bin/env python3
"""oip-serve's gRPC over TLS (Triton's --grpc-use-ssl options), with Triton's own Python gRPC
client: a self-signed certificate made with openssl, the client trusting it; a client without
TLS is refused. Keepalive options, in Triton's --name=VALUE form, are taken too.

Usage: grpc_tls_test.py PATH/TO/oip-serve
"""

import os
import subprocess
import sys
import tempfile

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

import oip_serve_runner

checks = []
certificates = tempfile.TemporaryDirectory()
certificate = os.path.join(certificates.name, "server.pem")
key = os.path.join(certificates.name, "server.key")


def check(function):
    checks.append(function)
    return function


@check
def secure_client(clients):
    secure, _ = clients
    assert secure.is_server_live()
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
              grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    result = secure.infer("simple", inputs)
    assert np.array_equal(result.as_numpy("OUTPUT0"), 2 * a)


@check
def plain_client_refused(clients):
    _, plain = clients
    try:
        plain.is_server_live(client_timeout=5)
    except InferenceServerException:
        return
    raise AssertionError("a client without TLS was answered")


def main():
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", key, "-out", certificate],
                   check=True, capture_output=True)

    def make_clients(http_url, grpc_url):
        return (grpcclient.InferenceServerClient(grpc_url, ssl=True,
                                                 root_certificates=certificate),
                grpcclient.InferenceServerClient(grpc_url))

    return oip_serve_runner.run(sys.argv[1], checks, make_clients,
                                extra_args=("--grpc-use-ssl=true", "--grpc-server-cert",
                                            certificate, f"--grpc-server-key={key}",
                                            "--grpc-keepalive-time=20000",
                                            "--grpc-keepalive-permit-without-calls", "true"))


if __name__ == "__main__":
    sys.exit(main())
