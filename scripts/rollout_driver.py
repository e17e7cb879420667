#!/usr/bin/env python3
"""scripts/rollout-test's driver: replicas, HAProxy, load and restarts (see that script).

Usage: rollout_driver.py OIP_SERVE HAPROXY PERF_ANALYZER CUDART_DIR
"""

import csv
import io
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

OIP_SERVE, HAPROXY, PERF_ANALYZER, CUDART = sys.argv[1:5]
REPLICAS = 3
HTTP_PORT, GRPC_PORT, METRICS_PORT = 18100, 18200, 18300  # + the replica's index
LB_HTTP, LB_GRPC, LB_STATS = 18080, 18081, 18090
EXIT_DELAY_SECS, EXIT_TIMEOUT_SECS = 2, 10
ROUNDS = 2
WORK = pathlib.Path("build/rollout")

HAPROXY_CONFIG = f"""
global
    maxconn 2048
defaults
    mode http
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    # A request whose connection fails or dies unanswered is sent again, to another replica.
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response response-timeout
    # Out of rotation at the first failed readiness check, back after two good ones.
    default-server inter 250ms fall 1 rise 2
frontend stats
    bind 127.0.0.1:{LB_STATS}
    stats enable
    stats uri /stats
frontend http_in
    bind 127.0.0.1:{LB_HTTP}
    default_backend replicas_http
frontend grpc_in
    bind 127.0.0.1:{LB_GRPC} proto h2
    default_backend replicas_grpc
backend replicas_http
    balance roundrobin
    option httpchk GET /v2/health/ready
    http-check expect status 200
{chr(10).join(f"    server r{i} 127.0.0.1:{HTTP_PORT + i} check" for i in range(REPLICAS))}
backend replicas_grpc
    balance roundrobin
    option httpchk GET /v2/health/ready
    http-check expect status 200
{chr(10).join(f"    server r{i} 127.0.0.1:{GRPC_PORT + i} proto h2 check port {HTTP_PORT + i} "
              f"check-proto h1" for i in range(REPLICAS))}
"""


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class replica:
    def __init__(self, index):
        self.index = index
        self.process = None
        self.starts = 0

    def start(self):
        out = open(WORK / f"replica-{self.index}.log", "a")
        self.process = subprocess.Popen(
            [OIP_SERVE, "--address", "127.0.0.1", "--http-port", str(HTTP_PORT + self.index),
             "--grpc-port", str(GRPC_PORT + self.index),
             "--metrics-port", str(METRICS_PORT + self.index), "--models", "simple",
             "--exit-delay-secs", str(EXIT_DELAY_SECS),
             "--exit-timeout-secs", str(EXIT_TIMEOUT_SECS)], stdout=out, stderr=out)
        self.starts += 1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                url = f"http://127.0.0.1:{HTTP_PORT + self.index}/v2/health/ready"
                with urllib.request.urlopen(url, timeout=1) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"replica {self.index} did not become ready")


def haproxy_servers():
    """{(backend, server): row} from HAProxy's statistics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{LB_STATS}/stats;csv", timeout=2) as reply:
        text = reply.read().decode().lstrip("# ")
    return {(row["pxname"], row["svname"]): row for row in csv.DictReader(io.StringIO(text))}


def wait_in_rotation(index, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = haproxy_servers()
        if all(rows[(backend, f"r{index}")]["status"] == "UP"
               for backend in ("replicas_http", "replicas_grpc")):
            return
        time.sleep(0.05)
    raise RuntimeError(f"replica {index} is not back in rotation")


class recorder:
    """Each request's start, latency and outcome, from every client thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.samples = []  # (client, start, seconds, error or None)

    def add(self, client, start, seconds, error):
        with self.lock:
            self.samples.append((client, start, seconds, error))


def client_loop(name, make_client, infer, stop, record):
    client = make_client()
    while not stop.is_set():
        start = time.monotonic()
        try:
            infer(client)
            record.add(name, start, time.monotonic() - start, None)
        except Exception as e:  # every failure counts, whatever its kind
            record.add(name, start, time.monotonic() - start, str(e).splitlines()[0][:200])
            client = make_client()


def simple_inputs(module):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"),
              module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a + b


def checked_infer(module):
    inputs, expected = simple_inputs(module)

    def infer(client):
        result = client.infer("simple", inputs)
        if not np.array_equal(result.as_numpy("OUTPUT0"), expected):
            raise RuntimeError("wrong OUTPUT0")
    return infer


def perf_analyzer_loop(stop, runs):
    """perf_analyzer over HTTP through HAProxy, run after run until stopped: each run's errors."""
    env = dict(os.environ, LD_LIBRARY_PATH=CUDART)
    while not stop.is_set():
        began = time.strftime("%H:%M:%S")
        run = subprocess.run(
            # -x 1: perf_analyzer reads the server's statistics around each window, here from
            # whichever replica HAProxy picks; without a version it takes the latest version
            # with inferences counted, and a replica just restarted has none yet.
            [PERF_ANALYZER, "-m", "simple", "-x", "1", "-u", f"127.0.0.1:{LB_HTTP}", "-i", "http",
             "--concurrency-range", "4", "--measurement-interval", "2000",
             "--stability-percentage", "100", "--max-trials", "5"],
            env=env, capture_output=True, text=True)
        output = run.stdout + run.stderr
        (WORK / f"perf-analyzer-{len(runs)}.log").write_text(
            f"started {began}, ended {time.strftime('%H:%M:%S')}\n{output}")
        bad = [line for line in output.splitlines()
               if any(word in line.lower() for word in ("error", "failed", "unexpected"))]
        if run.returncode != 0:
            bad.append(f"perf_analyzer exited {run.returncode}")
        throughput = [line.strip() for line in output.splitlines() if "throughput" in line]
        runs.append((bad, throughput[-1] if throughput else "no throughput line"))


def frontend_requests():
    rows = haproxy_servers()
    return sum(int(rows[(f, "FRONTEND")]["req_tot"] or 0) for f in ("http_in", "grpc_in"))


def backend_counter(column):
    rows = haproxy_servers()
    return sum(int(rows[(b, "BACKEND")][column] or 0) for b in ("replicas_http", "replicas_grpc"))


def main():
    try:
        return rollout()
    except Exception as e:  # a replica that never came back, HAProxy gone: still one summary
        print(f"rollout-test: FAILED: {type(e).__name__}: {e}", flush=True)
        return 1


def rollout():
    WORK.mkdir(parents=True, exist_ok=True)
    replicas = [replica(i) for i in range(REPLICAS)]
    lb = None
    try:
        for r in replicas:
            r.start()
        (WORK / "haproxy.cfg").write_text(HAPROXY_CONFIG)
        lb = subprocess.Popen([HAPROXY, "-db", "-f", str(WORK / "haproxy.cfg")],
                              stdout=open(WORK / "haproxy.log", "w"), stderr=subprocess.STDOUT)
        time.sleep(0.5)
        for r in replicas:
            wait_in_rotation(r.index)
        log(f"{REPLICAS} replicas in rotation behind HAProxy (HTTP :{LB_HTTP}, gRPC :{LB_GRPC})")

        stop = threading.Event()
        record = recorder()
        # perf_analyzer's runs during the SIGTERM rounds, then during the SIGKILL, apart.
        runs, kill_runs = [], []
        stop_term_runs, stop_kill_runs = threading.Event(), threading.Event()
        # Daemon threads: after a failure the script ends without waiting on the load loops.
        term_perf = threading.Thread(target=perf_analyzer_loop, args=(stop_term_runs, runs),
                                     daemon=True)
        term_perf.start()
        threads = []
        for k in range(2):
            threads.append(threading.Thread(target=client_loop, args=(
                f"grpc-{k}", lambda: grpcclient.InferenceServerClient(f"127.0.0.1:{LB_GRPC}"),
                checked_infer(grpcclient), stop, record), daemon=True))
        threads.append(threading.Thread(target=client_loop, args=(
            "http", lambda: httpclient.InferenceServerClient(f"127.0.0.1:{LB_HTTP}"),
            checked_infer(httpclient), stop, record), daemon=True))
        for t in threads:
            t.start()
        time.sleep(3)

        windows = []  # (start, end) of each restart
        bad_exits = []
        for round_number in range(ROUNDS):
            for r in replicas:
                began = time.monotonic()
                r.process.send_signal(signal.SIGTERM)
                code = r.process.wait(timeout=EXIT_DELAY_SECS + EXIT_TIMEOUT_SECS + 10)
                stopped = time.monotonic() - began
                if code != 0:
                    bad_exits.append((r.index, code))
                r.start()
                wait_in_rotation(r.index)
                windows.append((began, time.monotonic()))
                log(f"round {round_number + 1}: replica {r.index} SIGTERM, exit {code} after "
                    f"{stopped:.2f} s, back in rotation after {time.monotonic() - began:.2f} s")
                time.sleep(1)
        stop_term_runs.set()
        term_perf.join(timeout=120)  # the tritonclient threads keep the load on meanwhile

        kill_perf = threading.Thread(target=perf_analyzer_loop, args=(stop_kill_runs, kill_runs),
                                     daemon=True)
        kill_perf.start()
        time.sleep(3)
        retries_before = backend_counter("wretr")
        redispatches_before = backend_counter("wredis")
        killed = replicas[1]
        kill_began = time.monotonic()
        killed.process.send_signal(signal.SIGKILL)
        killed.process.wait()
        time.sleep(1)
        killed.start()
        wait_in_rotation(killed.index)
        log(f"replica {killed.index} SIGKILL, back in rotation after "
            f"{time.monotonic() - kill_began:.2f} s")
        time.sleep(2)
        stop_kill_runs.set()
        stop.set()
        for t in [*threads, kill_perf]:
            t.join(timeout=120)
        retries = backend_counter("wretr") - retries_before
        redispatches = backend_counter("wredis") - redispatches_before

        in_rotation = all(row["status"] == "UP" for (backend, name), row in
                          haproxy_servers().items() if name.startswith("r"))
        served = frontend_requests()
        samples = record.samples
        term_failures = [s for s in samples if s[3] and s[1] < kill_began]
        kill_failures = [s for s in samples if s[3] and s[1] >= kill_began]
        in_windows = [s[2] for s in samples if not s[3] and
                      any(begin <= s[1] <= end for begin, end in windows)]
        worst_ms = max(in_windows) * 1000 if in_windows else float("nan")
        outside = sorted(s[2] for s in samples if not s[3] and
                         not any(begin <= s[1] <= end for begin, end in windows))
        median_ms = outside[len(outside) // 2] * 1000 if outside else float("nan")
        perf_errors = [line for bad, _ in runs for line in bad]
        kill_perf_errors = [line for bad, _ in kill_runs for line in bad]
        for failure in (term_failures + kill_failures)[:10]:
            log(f"failed: {failure[0]}: {failure[3]}")
        for phase, phase_runs in (("SIGTERM", runs), ("SIGKILL", kill_runs)):
            for bad, throughput in phase_runs:
                log(f"perf_analyzer run ({phase} phase): {throughput}")
                for line in bad:
                    log(f"perf_analyzer ({phase} phase): {line}")
        passed = (not term_failures and not perf_errors and in_rotation and not bad_exits and
                  len(runs) > 0)
        restarts = ROUNDS * REPLICAS
        print(f"rollout-test: {'passed' if passed else 'FAILED'}: {served} requests through "
              f"HAProxy ({len(samples)} from tritonclient, {len(runs) + len(kill_runs)} perf_analyzer runs), "
              f"{restarts} SIGTERM restarts with {len(term_failures)} failed requests and "
              f"{len(perf_errors)} perf_analyzer errors, worst latency during a restart "
              f"{worst_ms:.1f} ms (median elsewhere {median_ms:.2f} ms), every replica "
              f"{'back in rotation' if in_rotation else 'NOT in rotation'}; SIGKILL: "
              f"{len(kill_failures)} failed requests seen by tritonclient, perf_analyzer "
              f"{'stopped by an error' if kill_perf_errors else 'without errors'}, {retries} "
              f"HAProxy retries, {redispatches} redispatches", flush=True)
        return 0 if passed else 1
    finally:
        if lb is not None:
            lb.terminate()
        for r in replicas:
            if r.process and r.process.poll() is None:
                r.process.kill()


if __name__ == "__main__":
    sys.exit(main())
