#!/usr/bin/env python3
"""oip-serve's command line as Triton's users write it: --models loads just those models (an
unknown one is an error), --allow-metrics=false and --allow-grpc false leave those servers off,
and Triton's metrics options that oip-serve has no use for are accepted.

Usage: oip_serve_options_test.py PATH/TO/oip-serve
"""

import json
import re
import signal
import subprocess
import sys
import urllib.request


def start(server_path, *args):
    """oip-serve with `args`, and its line of listening servers."""
    server = subprocess.Popen([server_path, "--http-port", "0", "--grpc-port", "0",
                               "--metrics-port", "0", "--address", "127.0.0.1", *args],
                              stdout=subprocess.PIPE, text=True)
    for line in server.stdout:
        if "workers, models" in line:
            return server, line
    server.wait(timeout=30)
    raise AssertionError(f"oip-serve {args} did not start")


def stop(server):
    server.send_signal(signal.SIGTERM)
    code = server.wait(timeout=30)
    assert code == 0, code


def main():
    path = sys.argv[1]
    server, line = start(path, "--models", "simple,identity_fp32", "--allow-metrics=false",
                         "--allow-gpu-metrics", "true", "--metrics-interval-ms=2000")
    try:
        assert "metrics off" in line, line
        http_port = re.search(r"HTTP on [^ ]+:(\d+)", line).group(1)
        request = urllib.request.Request(f"http://127.0.0.1:{http_port}/v2/repository/index",
                                         data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=10) as reply:
            names = sorted(model["name"] for model in json.load(reply)
                           if model.get("state") == "READY")
        assert names == ["identity_fp32", "simple"], names
    finally:
        stop(server)

    server, line = start(path, "--models", "simple", "--allow-grpc", "false")
    stop(server)
    assert "gRPC off" in line and re.search(r"metrics on [^ ]+:\d+", line), line

    unknown = subprocess.run([path, "--models", "simple,no_such_model"], capture_output=True,
                             text=True, timeout=60)
    assert unknown.returncode == 2, unknown
    assert "unknown model 'no_such_model'" in unknown.stderr, unknown.stderr
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
