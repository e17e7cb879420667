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
- Each check refuses a broken copy of an artefact (so that none passes vacuously).

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


GRACE_MARGIN_SECS = 5  # between the exit timeout and Kubernetes' SIGKILL


def container_problems(container, pod_annotations, grace, known_flags):
    """What a container's args, ports, probes and annotations get wrong about oip-serve; `grace`
    is the pod's terminationGracePeriodSeconds (None: KServe's default, 30 s)."""
    problems = []
    args = container.get("args", [])
    for arg in args:
        if arg.split("=")[0] not in known_flags:
            problems.append(f"oip-serve has no flag {arg}")
    values = flag_values(args)
    flag_ports = {int(values[f]) for f in FLAG_PORTS if f in values}
    named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    declared = set(named.values())
    if declared and not declared <= flag_ports:
        problems.append(f"container ports {sorted(declared)} are not the flags' "
                        f"{sorted(flag_ports)}")
    for probe, port in probe_ports(container):
        number = named.get(port, port) if isinstance(port, str) else port
        if number not in flag_ports:
            problems.append(f"the {probe} probes port {port}, where oip-serve does not listen")
        if probe == "livenessProbe" and "grpc" in container[probe]:
            problems.append("a gRPC liveness probe answers readiness and would restart a drain")
    for key in ("prometheus.io/port", "prometheus.kserve.io/port"):
        if key in pod_annotations and int(pod_annotations[key]) != int(values["--metrics-port"]):
            problems.append(f"{key} is not --metrics-port")
    delay = int(values.get("--exit-delay-secs", 0))
    timeout = int(values.get("--exit-timeout-secs", 30))
    if (grace if grace is not None else 30) < delay + timeout + GRACE_MARGIN_SECS:
        problems.append(f"a grace period of {grace if grace is not None else 'the default 30'} s "
                        f"leaves no {GRACE_MARGIN_SECS} s margin after exit delay {delay} + "
                        f"timeout {timeout}")
    return problems


def exported_metrics():
    source = (ROOT / "src" / "serving" / "metrics.cpp").read_text()
    return set(re.findall(r'"(nv_[a-z_]+)"', source))


def inference_service_problems(service, runtimes):
    """What an InferenceService gets wrong about its runtime (`runtimes`: name -> spec)."""
    model = service["spec"]["predictor"]["model"]
    runtime = runtimes.get(model.get("runtime"))
    if runtime is None:
        return [f"no runtime {model.get('runtime')} in deploy/"]
    problems = []
    formats = {(f["name"], f.get("version")) for f in runtime["supportedModelFormats"]}
    wanted = (model["modelFormat"]["name"], model["modelFormat"].get("version"))
    if wanted not in formats:
        problems.append(f"model format {wanted} is not the runtime's")
    if model.get("protocolVersion", "v1") not in runtime["protocolVersions"]:
        problems.append(f"protocol {model.get('protocolVersion')} is not the runtime's")
    runtime_container = runtime["containers"][0]
    values = flag_values(runtime_container["args"])
    for port in model.get("ports", []):
        if str(port["containerPort"]) != values["--grpc-port"] or port["name"] != "h2c":
            problems.append("gRPC goes to the port named h2c, the runtime's --grpc-port")
    # The predictor's probes and ports go into the runtime's container.
    merged = dict(runtime_container, ports=model.get("ports", []))
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        if probe in model:
            merged[probe] = model[probe]
    problems += container_problems(merged, {}, None, set(values))
    annotations = service["metadata"].get("annotations", {})
    if annotations.get("serving.kserve.io/enable-prometheus-scraping") != "true":
        problems.append("without serving.kserve.io/enable-prometheus-scraping no one scrapes it")
    return problems


def deployment_problems(deployment, known_flags):
    pod = deployment["spec"]["template"]
    grace = pod["spec"].get("terminationGracePeriodSeconds")
    problems = []
    for container in pod["spec"]["containers"]:
        problems += container_problems(container, pod["metadata"].get("annotations", {}), grace,
                                       known_flags)
    return problems


def hpa_problems(hpa, deployments, metrics):
    problems = []
    target = hpa["spec"]["scaleTargetRef"]
    if target["kind"] != "Deployment" or target["name"] not in deployments:
        problems.append(f"it scales {target['kind']}/{target['name']}, which deploy/ lacks")
    for metric in hpa["spec"].get("metrics", []):
        if metric["type"] == "Pods" and metric["pods"]["metric"]["name"] not in metrics:
            problems.append(f"oip exports no metric {metric['pods']['metric']['name']}")
    return problems


def service_problems(service, deployments):
    """A Service's target ports must be ports its selected pods name."""
    selector = service["spec"]["selector"]
    pods = [d["spec"]["template"] for d in deployments.values()
            if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()]
    if not pods:
        return ["it selects no pod of deploy/"]
    problems = []
    for pod in pods:
        names = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        for port in service["spec"]["ports"]:
            if isinstance(port["targetPort"], str) and port["targetPort"] not in names:
                problems.append(f"targetPort {port['targetPort']} is no port of its pods")
    return problems


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
    for kind in ("Deployment", "Service", "ClusterServingRuntime", "InferenceService",
                 "HorizontalPodAutoscaler"):
        if kind not in objects:
            fail(f"deploy/ has no {kind}")
            return objects

    deployments = {d["metadata"]["name"]: d for _, d in objects["Deployment"]}
    runtimes = {r["metadata"]["name"]: r["spec"] for _, r in objects["ClusterServingRuntime"]}
    metrics = exported_metrics()
    found = []
    for where, deployment in objects["Deployment"]:
        found += [(where, p) for p in deployment_problems(deployment, known_flags)]
    for where, runtime in objects["ClusterServingRuntime"]:
        for container in runtime["spec"]["containers"]:
            found += [(where, p) for p in container_problems(
                container, runtime["spec"].get("annotations", {}), None, known_flags)]
        if set(runtime["spec"]["protocolVersions"]) != {"v2", "grpc-v2"}:
            found.append((where, "protocolVersions should be v2 and grpc-v2"))
    for where, service in objects["InferenceService"]:
        found += [(where, p) for p in inference_service_problems(service, runtimes)]
    for where, hpa in objects["HorizontalPodAutoscaler"]:
        found += [(where, p) for p in hpa_problems(hpa, deployments, metrics)]
    for where, service in objects["Service"]:
        found += [(where, p) for p in service_problems(service, deployments)]
    for where, problem in found:
        fail(f"{where}: {problem}")
    if not found:
        print("ok: the manifests agree with oip-serve's flags, ports, metrics and shutdown")
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

def broken_copy(document, change):
    broken = copy.deepcopy(document)
    change(broken)
    return broken


def check_refusals(objects, recipe):
    deployment = objects["Deployment"][0][1]
    known_flags = oip_serve_flags()

    def first_container(d):
        return d["spec"]["template"]["spec"]["containers"][0]
    if kubernetes_problem(broken_copy(
            deployment, lambda d: first_container(d).update(readinesProbe={}))) is None:
        fail("kubernetes-validate took a Deployment with an unknown field")
    for what, change in (
            ("a grace period without margin", lambda d: d["spec"]["template"]["spec"].update(
                terminationGracePeriodSeconds=40)),
            ("a probe on a port oip-serve does not listen on", lambda d: first_container(d)[
                "readinessProbe"]["httpGet"].update(port=9999)),
            ("a flag oip-serve lacks", lambda d: first_container(d)["args"].append("--nope=1")),
            ("a gRPC liveness probe", lambda d: first_container(d).update(
                livenessProbe={"grpc": {"port": 8001}}))):
        if not deployment_problems(broken_copy(deployment, change), known_flags):
            fail(f"the Deployment check took {what}")
    hpa = objects["HorizontalPodAutoscaler"][0][1]
    deployments = {d["metadata"]["name"]: d for _, d in objects["Deployment"]}
    if not hpa_problems(broken_copy(hpa, lambda h: h["spec"]["metrics"][0]["pods"]["metric"]
                                    .update(name="nv_nope")), deployments, exported_metrics()):
        fail("the HPA check took a metric oip does not export")
    service = objects["Service"][0][1]
    if not service_problems(broken_copy(service, lambda s: s["spec"]["ports"][0].update(
            targetPort="nope")), deployments):
        fail("the Service check took a target port its pods do not name")
    runtimes = {r["metadata"]["name"]: r["spec"] for _, r in objects["ClusterServingRuntime"]}
    inference = objects["InferenceService"][0][1]
    for what, change in (
            ("a probe on a port the runtime does not listen on", lambda i: i["spec"]["predictor"][
                "model"]["livenessProbe"]["httpGet"].update(port=9999)),
            ("a model format the runtime does not offer", lambda i: i["spec"]["predictor"][
                "model"]["modelFormat"].update(name="onnx")),
            ("no scraping annotation", lambda i: i["metadata"]["annotations"].pop(
                "serving.kserve.io/enable-prometheus-scraping"))):
        if not inference_service_problems(broken_copy(inference, change), runtimes):
            fail(f"the InferenceService check took {what}")
    runtime = copy.deepcopy(objects["ClusterServingRuntime"][0][1])
    runtime["spec"]["protocolVersion"] = ["v2"]
    if kserve_problem(runtime, "runtime") is None:
        fail("the KServe check took a ClusterServingRuntime with an unknown field")
    service = broken_copy(inference, lambda i: i["spec"]["predictor"]["model"].pop("modelFormat"))
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
