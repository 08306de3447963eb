"""The deployment files: Kubernetes manifests valid offline, and the rules that make them a fleet.

The manifests are validated with kubernetes-validate, which ships the API's JSON
schemas, in strict mode (an unknown field is an error, as ``kubectl apply
--validate=strict`` would say). The ConfigMap is the one kustomization.yaml
generates from ``deploy/k8s/config.yaml``; ``kubectl kustomize`` renders it too
where kubectl is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from botgateway.config import parse_config
from botgateway.config.section import is_secret_bearing
from tests.paths import REPO

DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
CONFIG_FILE = K8S / "config.yaml"
SECRET_TEMPLATE = K8S / "secret.example.yaml"
SECRET_NAME = "botgateway"
CONFIG_PATH = "/etc/botgateway/config.yaml"

# The oldest Kubernetes the manifests are meant for (they use nothing newer), and the newest the package knows.
KUBERNETES_VERSIONS = ("1.28", kubernetes_validate.latest_version())

_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}")
"""A ``${VAR}`` or ``${VAR:-default}`` reference, as botgateway.config substitutes them."""


# --- reading the files ----------------------------------------------------------------------


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


@cache
def _kustomization() -> dict[str, Any]:
    return _documents(K8S / "kustomization.yaml")[0]


def _generated_config_maps() -> list[dict[str, Any]]:
    """The ConfigMaps of the kustomization's configMapGenerator, as kustomize builds them (less the name's hash)."""
    maps = []
    for generator in _kustomization().get("configMapGenerator", []):
        data = {Path(file).name: (K8S / file).read_text(encoding="utf-8") for file in generator["files"]}
        maps.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": generator["name"]}, "data": data})
    return maps


@cache
def _applied() -> tuple[tuple[str, dict[str, Any]], ...]:
    """What ``kubectl apply -k deploy/k8s`` applies: (file, manifest) pairs."""
    listed = [(name, doc) for name in _kustomization()["resources"] for doc in _documents(K8S / name)]
    generated = [("configMapGenerator", doc) for doc in _generated_config_maps()]
    return tuple(listed + generated)


def _every_manifest() -> list[tuple[str, dict[str, Any]]]:
    """Everything applied, plus the Secret template (applied by people, filled in)."""
    return [*_applied(), *((SECRET_TEMPLATE.name, doc) for doc in _documents(SECRET_TEMPLATE))]


def _one(kind: str, name: str) -> dict[str, Any]:
    found = [doc for _, doc in _applied() if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def _deployment() -> dict[str, Any]:
    return _one("Deployment", "botgateway")


def _gateway_container() -> dict[str, Any]:
    return _deployment()["spec"]["template"]["spec"]["containers"][0]


@cache
def _fleet_config() -> dict[str, Any]:
    """The ConfigMap's config.yaml as YAML (the keys the config schema may not know yet included)."""
    return yaml.safe_load(CONFIG_FILE.read_text(encoding="utf-8"))


def _strings(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """(key, string) for every string of a parsed YAML value, under the key that holds it."""
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for inner_key, inner in value.items():
            yield from _strings(inner, str(inner_key))
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner, key)


def _references() -> dict[str, bool]:
    """Every variable the config reads, and whether it is required (no ``:-default``)."""
    required: dict[str, bool] = {}
    for _, text in _strings(_fleet_config()):
        for name, default in _REFERENCE.findall(text):
            required[name] = required.get(name, False) or not default
    return required


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in container.get("env", [])}


def _validation_failures(version: str, manifests: list[tuple[str, dict[str, Any]]]) -> list[str]:
    failures = []
    for source, doc in manifests:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(part) for part in exc.path)
            failures.append(f"{source}: {doc['kind']}/{doc['metadata']['name']}: {where}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            failures.append(f"{source}: {exc.message}")
    return failures


# --- valid Kubernetes, offline -------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_is_valid_kubernetes(version: str) -> None:
    manifests = _every_manifest()
    kinds = {doc["kind"] for _, doc in manifests}
    assert {"Deployment", "ConfigMap", "Secret", "PodDisruptionBudget", "StatefulSet", "Service"} <= kinds
    assert _validation_failures(version, manifests) == []


def test_the_validation_is_strict() -> None:
    deployment = _deployment()
    misspelled = {**deployment, "spec": {**deployment["spec"], "terminationGracePeriod": 45}}
    wrong_type = {**deployment, "spec": {**deployment["spec"], "replicas": "two"}}
    failures = _validation_failures(KUBERNETES_VERSIONS[0], [("misspelled", misspelled), ("wrong type", wrong_type)])
    assert len(failures) == 2, failures


def test_the_validation_needs_no_network() -> None:
    # A child process refuses to create any socket (an audit hook cannot be removed,
    # so not in this process): the schemas must come from the package itself.
    script = textwrap.dedent(
        """
        import sys, yaml, kubernetes_validate

        def no_sockets(event, args):
            if event.startswith("socket."):
                raise OSError(f"no network in this test: {event}")

        sys.addaudithook(no_sockets)
        for doc in yaml.safe_load_all(open(sys.argv[1], encoding="utf-8")):
            kubernetes_validate.validate(doc, sys.argv[2], strict=True)
        print("validated")
        """
    )
    for version in KUBERNETES_VERSIONS:
        result = subprocess.run(
            [sys.executable, "-c", script, str(K8S / "botgateway.yaml"), version],
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert result.returncode == 0 and result.stdout.strip() == "validated", result.stderr[-2000:]


def test_the_kustomization_applies_every_manifest_but_the_secret_template() -> None:
    kustomization = _kustomization()
    generated = {file for generator in kustomization["configMapGenerator"] for file in generator["files"]}
    accounted = set(kustomization["resources"]) | generated | {"kustomization.yaml", SECRET_TEMPLATE.name}
    assert {path.name for path in K8S.glob("*.yaml")} == accounted
    # Applied as it is, the template would replace the real tokens with empty ones.
    assert SECRET_TEMPLATE.name not in kustomization["resources"]
    assert all((K8S / name).is_file() for name in kustomization["resources"])


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its kustomize) is not installed")
def test_kubectl_kustomize_renders_what_the_test_validates() -> None:
    command = ["kubectl", "kustomize", str(K8S)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    rendered = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    assert _validation_failures(KUBERNETES_VERSIONS[0], [("kustomize", doc) for doc in rendered]) == []
    config_maps = [doc for doc in rendered if doc["kind"] == "ConfigMap"]
    assert [doc["data"] for doc in config_maps] == [doc["data"] for doc in _generated_config_maps()]
    # The generated name carries a hash of the content, and the Deployment follows it: a config change rolls the pods.
    generated_name = config_maps[0]["metadata"]["name"]
    assert generated_name.startswith("botgateway-config-")
    deployment = next(doc for doc in rendered if doc["kind"] == "Deployment")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert [volume["configMap"]["name"] for volume in volumes if "configMap" in volume] == [generated_name]


# --- what makes it a fleet -----------------------------------------------------------------


def test_the_fleet_outlives_a_disruption() -> None:
    spec = _deployment()["spec"]
    assert spec["replicas"] >= 2
    assert spec["strategy"]["type"] == "RollingUpdate" and spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    budget = _one("PodDisruptionBudget", "botgateway")["spec"]
    assert budget["minAvailable"] == 1 and budget["selector"] == spec["selector"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    # Each process's share of the rate budget while Redis is unreachable is computed from it.
    assert _fleet_config()["gateway"]["replicas"] == spec["replicas"]


def test_the_container_runs_the_config_of_the_config_map() -> None:
    container = _gateway_container()
    assert container["args"] == ["run", "-c", CONFIG_PATH]
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in _deployment()["spec"]["template"]["spec"]["volumes"]}
    config_volume = next(name for name, volume in volumes.items() if "configMap" in volume)
    assert mounts[config_volume] == str(Path(CONFIG_PATH).parent)
    assert volumes[config_volume]["configMap"]["name"] == _kustomization()["configMapGenerator"][0]["name"]
    assert _fleet_config()["memory"]["store"] == "redis"  # more than one process needs Redis


def test_the_probes_ask_the_http_port_for_healthz_and_readyz() -> None:
    http = _fleet_config()["http"]
    assert http["enabled"] is True
    container = _gateway_container()
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}

    def probed(probe: str) -> tuple[str, int]:
        get = container[probe]["httpGet"]
        return get["path"], ports.get(get["port"], get["port"])

    assert probed("readinessProbe") == ("/readyz", http["port"])
    assert probed("livenessProbe") == ("/healthz", http["port"])
    assert probed("startupProbe") == ("/healthz", http["port"])
    annotations = _deployment()["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics"
    assert annotations["prometheus.io/port"] == str(http["port"])
    assert _fleet_config()["metrics"]["enabled"] is True


def test_the_grace_period_outlasts_the_drain() -> None:
    drain_s = _fleet_config()["gateway"]["drain_s"]
    assert _deployment()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > drain_s
    for name, service in _gateway_services().items():
        assert _seconds(service["stop_grace_period"]) > drain_s, name


def test_the_instance_id_comes_from_the_pod_name() -> None:
    pod_name = _env(_gateway_container())["POD_NAME"]
    assert pod_name["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert "instance_id" not in _fleet_config()["gateway"]  # derived from POD_NAME, per pod


# --- secrets -------------------------------------------------------------------------------


def test_every_variable_of_the_config_comes_from_the_secret() -> None:
    references = _references()
    assert {"LLM_API_KEY", "REDIS_URL", "SLACK_BOT_TOKEN", "DINGTALK_CLIENT_SECRET"} <= references.keys()
    env = _env(_gateway_container())
    for name, required in references.items():
        assert name in env, f"${{{name}}} of config.yaml has no env entry in the Deployment"
        source = env[name].get("valueFrom", {}).get("secretKeyRef")
        assert source is not None and source["name"] == SECRET_NAME and source["key"] == name, env[name]
        # A required variable's absence must stop the pod at the Secret, not start it half-configured.
        assert not (required and source.get("optional")), f"{name} is required by config.yaml but optional"


def test_the_config_map_holds_no_secret() -> None:
    for key, text in _strings(_fleet_config()):
        if is_secret_bearing(key) and text:
            assert _REFERENCE.fullmatch(text), f"{key}: {text!r} is written in the ConfigMap; use ${{VAR}}"


def test_the_secret_template_has_every_key_the_manifests_read() -> None:
    template = _documents(SECRET_TEMPLATE)[0]
    assert template["metadata"]["name"] == SECRET_NAME
    assert all(value == "" for value in template["stringData"].values())  # a template: no value, real or fake
    read = set()
    for _, doc in _applied():
        for container in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            for entry in container.get("env", []):
                source = entry.get("valueFrom", {}).get("secretKeyRef")
                if source and source["name"] == SECRET_NAME:
                    read.add(source["key"])
    assert set(template["stringData"]) == read
    # The documented REDIS_URL points at the bundled Redis's Service.
    service = _one("Service", "botgateway-redis")
    assert f"@{service['metadata']['name']}:{service['spec']['ports'][0]['port']}/" in SECRET_TEMPLATE.read_text()


# --- the config itself ---------------------------------------------------------------------


def _dummy_env() -> dict[str, str]:
    """A value for every variable of the config (both platforms' tokens, so both adapters are checked)."""
    env = {name: f"dummy-{name.lower()}" for name in _references()}
    env["REDIS_URL"] = "redis://:dummy@botgateway-redis:6379/0"
    return env


def test_the_config_map_loads_with_the_project_loader() -> None:
    env = _dummy_env()
    config = parse_config(_fleet_config(), env, str(CONFIG_FILE))
    assert config.memory.store == "redis"
    assert config.memory.redis_url.get_secret_value() == env["REDIS_URL"]
    assert config.gateway.replicas == _deployment()["spec"]["replicas"]
    assert config.gateway.workers >= 2 and config.gateway.drain_s == _fleet_config()["gateway"]["drain_s"]
    assert config.http.enabled and config.http.port == _gateway_container()["ports"][0]["containerPort"]
    assert config.adapters.slack.active and config.adapters.dingtalk.active
    # check-config adds what the schema cannot see: workers on a shared store, the fleet's Slack connections, the tools.
    result = subprocess.run(
        [sys.executable, "-m", "botgateway.cli", "check-config", "-c", str(CONFIG_FILE)],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO, env={**os.environ, **env},
    )
    assert (result.returncode, result.stdout.strip()) == (0, "OK"), result.stderr
    # The one warning left is the default access policy's, which a deployment narrows to its own channels.
    warnings = [line for line in result.stderr.splitlines() if "warning:" in line and "warning: access:" not in line]
    assert warnings == []


# --- the bundled Redis ---------------------------------------------------------------------


def test_redis_keeps_its_data_on_a_volume_and_evicts_nothing() -> None:
    redis = _one("StatefulSet", "botgateway-redis")["spec"]
    container = redis["template"]["spec"]["containers"][0]
    claims = {claim["metadata"]["name"] for claim in redis["volumeClaimTemplates"]}
    assert {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]} == {"data": "/data"}
    assert claims == {"data"}
    args = " ".join(container["args"])
    assert "--appendonly yes" in args and "--maxmemory-policy noeviction" in args
    assert "--requirepass $(REDIS_PASSWORD)" in args
    service = _one("Service", "botgateway-redis")["spec"]
    assert service["selector"].items() <= redis["template"]["metadata"]["labels"].items()
    assert redis["serviceName"] == "botgateway-redis"


# --- compose -------------------------------------------------------------------------------


@cache
def _compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))


def _gateway_services() -> dict[str, dict[str, Any]]:
    return {name: service for name, service in _compose()["services"].items() if "run" in service.get("command", [])}


def _seconds(duration: str) -> float:
    """A compose duration (``45s``, ``1m30s``) in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts and "".join(number + unit for number, unit in parts) == duration, duration
    return sum(float(number) * units[unit] for number, unit in parts)


def test_compose_runs_two_replicas_with_redis() -> None:
    services = _compose()["services"]
    gateways = _gateway_services()
    assert len(gateways) == _fleet_config()["gateway"]["replicas"] >= 2
    assert "redis" in services and services["redis"]["image"].startswith("redis:")
    # Distinct host names, so distinct instance ids (derived from HOSTNAME with Redis) that survive a restart.
    assert len({service["hostname"] for service in gateways.values()}) == len(gateways)
    for name, service in gateways.items():
        assert service["command"] == ["run", "-c", CONFIG_PATH], name
        assert f"./k8s/{CONFIG_FILE.name}:{CONFIG_PATH}:ro" in service["volumes"], name
        assert service["depends_on"]["redis"]["condition"] == "service_healthy", name
        assert "@redis:6379/" in service["environment"]["REDIS_URL"], name
        assert service["env_file"] == [".env"], name
        probe = " ".join(service["healthcheck"]["test"])
        assert f"127.0.0.1:{_fleet_config()['http']['port']}/readyz" in probe, name


def test_the_env_example_names_every_secret_compose_needs() -> None:
    lines = (DEPLOY / ".env.example").read_text(encoding="utf-8").splitlines()
    defined = {line.split("=", 1)[0] for line in lines if line and not line.startswith("#")}
    set_by_compose = {name for service in _gateway_services().values() for name in service["environment"]}
    assert defined | set_by_compose >= _references().keys()
    assert "REDIS_PASSWORD" in defined
    assert all(line.endswith("=") for line in lines if line and not line.startswith("#"))  # no value, real or fake
    assert (DEPLOY / ".gitignore").read_text(encoding="utf-8").splitlines().count(".env") == 1


# --- the image -----------------------------------------------------------------------------


def _dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of each line that starts an instruction."""
    lines = (DEPLOY / "Dockerfile").read_text(encoding="utf-8").splitlines()
    starts = [line for line in lines if line and not line.startswith((" ", "#"))]
    return [(line.partition(" ")[0], line.partition(" ")[2]) for line in starts]


def test_the_image_runs_the_gateway_as_the_pods_user() -> None:
    instructions = dict(_dockerfile())
    assert instructions["FROM"] == "python:3.11-slim"
    pod_user = _deployment()["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    assert instructions["USER"].split(":")[0] == str(pod_user)  # numeric, so runAsNonRoot can be checked
    assert str(_fleet_config()["http"]["port"]) in instructions["EXPOSE"].split()
    assert instructions["STOPSIGNAL"] == "SIGTERM"
    assert yaml.safe_load(instructions["ENTRYPOINT"]) == ["botgateway"]
    assert yaml.safe_load(instructions["CMD"]) == ["run", "-c", CONFIG_PATH]


def test_the_build_context_holds_what_the_image_copies_and_nothing_else() -> None:
    patterns = [line for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
                if line and not line.startswith("#")]
    assert patterns[0] == "*"  # everything out (deploy/.env, data/, .venv, .git), then back in only what is copied
    allowed = {pattern[1:].rstrip("/") for pattern in patterns if pattern.startswith("!")}
    copied = {source for word, rest in _dockerfile() if word == "COPY" for source in rest.split()[:-1]}
    assert allowed == copied
