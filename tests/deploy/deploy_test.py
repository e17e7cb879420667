#!/usr/bin/env python3
"""The deployment artefacts in deploy/, checked offline.

- Every *.yaml/*.yml there is a core Kubernetes object, valid (strict: no unknown field) against
  kubernetes-validate's default Kubernetes version, or a KServe object that loads into the KServe
  Python SDK's typed models with no unknown field and every required one.
- deploy/Containerfile passes hadolint, has pinned bases, runs as a non-root user, holds no
  secrets, and exposes the ports its command's flags name.
- What they say of oip-serve holds: each flag is one oip-serve takes, probes and ports and
  Prometheus annotations name the ports of the flags, the grace period covers the exit delay and
  timeout, the autoscaler's metric is one oip exports, an InferenceService names the runtime and a
  format and protocol it offers.
- Each check refuses a broken artefact (so that none passes vacuously).

Usage: deploy_test.py REPOSITORY_ROOT PATH/TO/oip-serve PATH/TO/hadolint
"""

import copy
import pathlib
import re
import subprocess
import sys
import tempfile

import kserve
import kubernetes.client
import kubernetes_validate
import yaml

ROOT = pathlib.Path(sys.argv[1])
OIP_SERVE = sys.argv[2]
HADOLINT = sys.argv[3]
DEPLOY = ROOT / "deploy"
KSERVE_GROUP = "serving.kserve.io/"
FLAG_PORTS = ("--http-port", "--grpc-port", "--metrics-port")

failures = []


def fail(message):
    failures.append(message)
    print("FAILED:", message)


# --- KServe's typed models ---------------------------------------------------------------------

def model_class(name):
    for module in (kserve, kubernetes.client):
        if hasattr(module, name):
            return getattr(module, name)
    raise LookupError(f"no model class {name}")


def build(value, type_name, where):
    """`value` as an instance of the OpenAPI type `type_name`: an unknown field or a missing
    required one (the models' own client-side validation) raises ValueError naming `where`."""
    # The generators write list[T] and dict(str, T) (KServe) or List[T] and Dict[str, T].
    if re.match(r"(list|List)\[", type_name):
        if not isinstance(value, list):
            raise ValueError(f"{where}: a list expected")
        return [build(v, type_name[5:-1], f"{where}[{i}]") for i, v in enumerate(value)]
    if re.match(r"(dict\(|Dict\[)", type_name):
        if not isinstance(value, dict):
            raise ValueError(f"{where}: a map expected")
        inner = type_name[type_name.index(",") + 1:-1].strip()
        return {k: build(v, inner, f"{where}.{k}") for k, v in value.items()}
    scalars = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}
    if type_name in scalars:
        if not isinstance(value, scalars[type_name]) or (type_name == "int" and
                                                         isinstance(value, bool)):
            raise ValueError(f"{where}: {type_name} expected, got {value!r}")
        return value
    cls = model_class(type_name)
    if not isinstance(value, dict):
        raise ValueError(f"{where}: an object ({type_name}) expected")
    by_json_name = {json: attr for attr, json in cls.attribute_map.items()}
    unknown = sorted(set(value) - set(by_json_name))
    if unknown:
        raise ValueError(f"{where}: {type_name} has no field {', '.join(unknown)}")
    arguments = {by_json_name[k]: build(v, cls.openapi_types[by_json_name[k]], f"{where}.{k}")
                 for k, v in value.items()}
    try:
        return cls(**arguments)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: {type_name}: {e}") from e


def load_kserve(document, where):
    kind = document.get("kind", "")
    version = document.get("apiVersion", "").split("/")[-1]
    return build(document, f"{version.capitalize()}{kind}", where)


def kserve_problem(document, where):
    try:
        load_kserve(document, where)
        return None
    except (ValueError, LookupError) as e:
        return str(e)


def kubernetes_problem(document):
    try:
        kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)
        return None
    except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError,
            kubernetes_validate.InvalidSchemaError) as e:
        return str(e).splitlines()[0]


# --- the manifests -----------------------------------------------------------------------------

def documents():
    """(path, document) of every YAML document in deploy/."""
    paths = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])
    if not paths:
        fail("deploy/ has no manifests")
    for path in paths:
        for document in yaml.safe_load_all(path.read_text()):
            if document is not None:
                yield path.relative_to(ROOT), document


def oip_serve_flags():
    usage = subprocess.run([OIP_SERVE, "--help"], capture_output=True, text=True, check=True)
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", usage.stdout))


def flag_values(args):
    """{--name: value} of args written --name=value."""
    values = {}
    for arg in args:
        name, _, value = arg.partition("=")
        values[name] = value
    return values


def probe_ports(container):
    ports = []
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        spec = container.get(probe)
        if spec:
            action = spec.get("httpGet") or spec.get("grpc") or spec.get("tcpSocket")
            ports.append((probe, action["port"]))
    return ports


def check_container(where, container, pod_annotations, grace, known_flags):
    args = container.get("args", [])
    for arg in args:
        if arg.split("=")[0] not in known_flags:
            fail(f"{where}: oip-serve has no flag {arg}")
    values = flag_values(args)
    flag_ports = {int(values[f]) for f in FLAG_PORTS if f in values}
    named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    declared = set(named.values())
    if declared and not declared <= flag_ports:
        fail(f"{where}: container ports {sorted(declared)} are not the flags' {sorted(flag_ports)}")
    for probe, port in probe_ports(container):
        number = named.get(port, port) if isinstance(port, str) else port
        if number not in flag_ports:
            fail(f"{where}: the {probe} probes port {port}, which oip-serve does not listen on")
        if probe == "livenessProbe" and "grpc" in container[probe]:
            fail(f"{where}: a gRPC liveness probe answers readiness and would restart a drain")
    for key in ("prometheus.io/port", "prometheus.kserve.io/port"):
        if key in pod_annotations and int(pod_annotations[key]) != int(values["--metrics-port"]):
            fail(f"{where}: {key} is not --metrics-port")
    delay = int(values.get("--exit-delay-secs", 0))
    timeout = int(values.get("--exit-timeout-secs", 30))
    if grace is not None and grace < delay + timeout:
        fail(f"{where}: terminationGracePeriodSeconds {grace} < exit delay {delay} + timeout "
             f"{timeout}")
    if grace is None and delay + timeout > 30:  # Kubernetes' and KServe's default grace
        fail(f"{where}: exit delay {delay} + timeout {timeout} exceed the default 30 s grace")


def exported_metrics():
    source = (ROOT / "src" / "serving" / "metrics.cpp").read_text()
    return set(re.findall(r'"(nv_[a-z_]+)"', source))


def check_manifests():
    known_flags = oip_serve_flags()
    objects = {}
    for path, document in documents():
        kind, api = document.get("kind"), document.get("apiVersion", "")
        where = f"{path} {kind}/{document.get('metadata', {}).get('name')}"
        problem = kserve_problem(document, where) if api.startswith(KSERVE_GROUP) else \
            kubernetes_problem(document)
        if problem:
            fail(f"{where}: {problem}")
            continue
        print(f"ok: {where} ({api})")
        objects.setdefault(kind, []).append((where, document))

    for where, deployment in objects.get("Deployment", []):
        pod = deployment["spec"]["template"]
        grace = pod["spec"].get("terminationGracePeriodSeconds")
        for container in pod["spec"]["containers"]:
            check_container(where, container, pod["metadata"].get("annotations", {}), grace,
                            known_flags)
    runtimes = {}
    for where, runtime in objects.get("ClusterServingRuntime", []):
        runtimes[runtime["metadata"]["name"]] = runtime["spec"]
        for container in runtime["spec"]["containers"]:
            check_container(where, container, runtime["spec"].get("annotations", {}), None,
                            known_flags)
        if set(runtime["spec"]["protocolVersions"]) != {"v2", "grpc-v2"}:
            fail(f"{where}: protocolVersions should be v2 and grpc-v2")
    for where, service in objects.get("InferenceService", []):
        model = service["spec"]["predictor"]["model"]
        runtime = runtimes.get(model.get("runtime"))
        if runtime is None:
            fail(f"{where}: no runtime {model.get('runtime')} in deploy/")
            continue
        formats = {(f["name"], f.get("version")) for f in runtime["supportedModelFormats"]}
        wanted = (model["modelFormat"]["name"], model["modelFormat"].get("version"))
        if wanted not in formats:
            fail(f"{where}: model format {wanted} is not the runtime's")
        if model.get("protocolVersion", "v1") not in runtime["protocolVersions"]:
            fail(f"{where}: protocol {model.get('protocolVersion')} is not the runtime's")
        ports = flag_values(runtime["containers"][0]["args"])
        for port in model.get("ports", []):
            if str(port["containerPort"]) != ports["--grpc-port"] or port["name"] != "h2c":
                fail(f"{where}: gRPC goes to the port named h2c, the runtime's --grpc-port")
    metrics = exported_metrics()
    for where, hpa in objects.get("HorizontalPodAutoscaler", []):
        for metric in hpa["spec"].get("metrics", []):
            if metric["type"] == "Pods" and metric["pods"]["metric"]["name"] not in metrics:
                fail(f"{where}: oip exports no metric {metric['pods']['metric']['name']}")
    for kind in ("Deployment", "Service", "ClusterServingRuntime", "InferenceService",
                 "HorizontalPodAutoscaler"):
        if kind not in objects:
            fail(f"deploy/ has no {kind}")
    return objects


# --- the container recipe ----------------------------------------------------------------------

def containerfile_problems(text):
    """Our checks of a container recipe: pinned bases, a non-root user, no secrets, EXPOSE as the
    command's port flags."""
    problems = []
    lines = [line.strip() for line in re.sub(r"\\\n", " ", text).splitlines()]
    arguments = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
    stages = set()
    for line in lines:
        if line.startswith("FROM "):
            words = line.split()
            image = re.sub(r"\$\{(\w+)\}", lambda m: arguments.get(m.group(1), ""), words[1])
            if "as" in (w.lower() for w in words):
                stages.add(words[-1])
            if image in stages:
                continue
            if not (re.search(r"@sha256:[0-9a-f]{64}$", image) or
                    re.search(r":[0-9]+(\.[0-9]+)+[-\w.]*$", image)):
                problems.append(f"base {image} is not pinned to a release or a digest")
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        problems.append("the image runs as root")
    for line in lines:
        if re.match(r"^(ENV|ARG)\s", line) and re.search(r"(PASSWORD|SECRET|TOKEN|API_?KEY)", line,
                                                         re.I):
            problems.append(f"a secret in the recipe: {line}")
        if re.match(r"^(COPY|ADD)\s", line) and re.search(r"\.(pem|key|p12)\b|id_rsa", line):
            problems.append(f"a key copied into the image: {line}")
    exposed = {int(p.split("/")[0]) for line in lines if line.startswith("EXPOSE ")
               for p in line.split()[1:]}
    commands = [line for line in lines if line.startswith("CMD ") or line.startswith("ENTRYPOINT ")]
    flags = {}
    for command in commands:
        flags.update(flag_values(re.findall(r'"([^"]+)"', command)))
    named = {int(flags[f]) for f in FLAG_PORTS if f in flags}
    if not exposed or exposed != named:
        problems.append(f"EXPOSE {sorted(exposed)} is not the port flags' {sorted(named)}")
    return problems


def check_containerfile(known_flags):
    recipe = DEPLOY / "Containerfile"
    lint = subprocess.run([HADOLINT, str(recipe)], capture_output=True, text=True)
    if lint.returncode != 0:
        fail(f"hadolint deploy/Containerfile:\n{lint.stdout}{lint.stderr}")
    else:
        print("ok: hadolint deploy/Containerfile")
    text = recipe.read_text()
    for problem in containerfile_problems(text):
        fail(f"deploy/Containerfile: {problem}")
    for command in re.findall(r"^(?:CMD|ENTRYPOINT) (.*)$", text, re.M):
        for arg in re.findall(r'"(--[^"=]+)', command):
            if arg not in known_flags:
                fail(f"deploy/Containerfile: oip-serve has no flag {arg}")
    return text


# --- each check refuses what it should ---------------------------------------------------------

def check_refusals(objects, recipe):
    deployment = copy.deepcopy(objects["Deployment"][0][1])
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    if kubernetes_problem(deployment) is None:
        fail("kubernetes-validate took a Deployment with an unknown field")
    runtime = copy.deepcopy(objects["ClusterServingRuntime"][0][1])
    runtime["spec"]["protocolVersion"] = ["v2"]
    if kserve_problem(runtime, "runtime") is None:
        fail("the KServe check took a ClusterServingRuntime with an unknown field")
    service = copy.deepcopy(objects["InferenceService"][0][1])
    del service["spec"]["predictor"]["model"]["modelFormat"]
    if kserve_problem(service, "service") is None:
        fail("the KServe check took an InferenceService without its (required) model format")
    for broken in (recipe.replace("debian:12.11-slim", "debian:latest"),
                   recipe.replace("USER 10001:10001", "USER root"),
                   recipe.replace("EXPOSE 8000 8001 8002", "EXPOSE 8000 8001"),
                   recipe.replace("ARG DEBIAN_IMAGE", "ENV API_KEY=abc\nARG DEBIAN_IMAGE")):
        if broken == recipe or not containerfile_problems(broken):
            fail("the Containerfile checks took a broken recipe")
    with tempfile.NamedTemporaryFile("w", suffix="Containerfile") as bad:
        bad.write(recipe.replace("apt-get install -y", "apt-get install"))
        bad.flush()
        if subprocess.run([HADOLINT, bad.name], capture_output=True).returncode == 0:
            fail("hadolint took apt-get install without -y")
    print("ok: each check refuses a broken artefact")


def main():
    objects = check_manifests()
    recipe = check_containerfile(oip_serve_flags())
    if not failures:
        check_refusals(objects, recipe)
    if failures:
        print(f"deploy: {len(failures)} failed")
        sys.exit(1)
    print("deploy: all passed")


if __name__ == "__main__":
    main()
