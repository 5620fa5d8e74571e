"""The deployment files' fields that matter, read as YAML (no cluster or container runtime
runs here: kubernetes-validate checks the core kinds' schemas in scripts/check-deploy;
KEDA's kinds have no schema there, so their fields are checked here)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from egress._version import __version__
from egress.cli import main
from egress.config import WorkerSettings
from egress.store.schema import DELIVERY_STATES, TASK_STATES, deliveries, tasks

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def _kind(kind: str) -> dict[str, Any]:
    found = [d for f in K8S.glob("*.yaml") for d in _docs(f.name) if d.get("kind") == kind]
    assert len(found) == 1, (kind, found)
    return found[0]


def _worker_deployment() -> dict[str, Any]:
    [worker] = [d for d in _docs("worker.yaml") if d["kind"] == "Deployment"]
    return worker


def _pods() -> dict[str, dict[str, Any]]:
    """name → pod spec of every Deployment and Job of the base."""
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"]
            for f in K8S.glob("*.yaml") for d in _docs(f.name)
            if d.get("kind") in ("Deployment", "Job")}


def _port(container: dict[str, Any], port: int | str) -> int:
    """A probe's port, a number or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    [number] = [p["containerPort"] for p in container["ports"] if p["name"] == port]
    return int(number)


def _config_toml() -> dict[str, Any]:
    return tomllib.loads(_kind("ConfigMap")["data"]["egress.toml"])


def test_the_kustomization_lists_every_manifest_and_only_those() -> None:
    [kustomization] = _docs("kustomization.yaml")
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed))
    assert all((K8S / name).is_file() for name in listed)
    assert set(listed) == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    # overlays replace the image by the name the manifests use; the tag is this release
    [image] = kustomization["images"]
    assert image == {"name": "egress", "newTag": __version__}
    for pod in _pods().values():
        assert {c["image"] for c in pod["containers"]} == {"egress"}


def test_keda_scales_the_workers_to_zero_on_the_work_in_the_store() -> None:
    scaled = _kind("ScaledObject")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    spec = scaled["spec"]
    assert spec["scaleTargetRef"]["name"] == _worker_deployment()["metadata"]["name"]
    assert spec["minReplicaCount"] == 0 and spec["maxReplicaCount"] >= 1
    [trigger] = spec["triggers"]
    assert trigger["type"] == "postgresql"
    meta = trigger["metadata"]
    # one replica per worker.concurrency tasks: the concurrency the pods are given
    concurrency = _config_toml().get("worker", {}).get("concurrency",
                                                        WorkerSettings().concurrency)
    assert int(meta["targetQueryValue"]) == concurrency
    assert meta["activationTargetQueryValue"] == "0"
    query = " ".join(meta["query"].split())
    # ready tasks as the claim reads them (store/claim.py): queued and due on the
    # store's clock (epoch seconds); then the running and submitted ones, due deliveries
    assert "FROM tasks WHERE (state = 'queued' AND run_after <= extract(epoch FROM now()))" \
        in query
    assert "OR state IN ('running', 'submitted')" in query
    assert "FROM deliveries WHERE state = 'pending' AND next_attempt_at <= " in query
    # the states it names are the store's own, and so are the columns
    named = set(re.findall(r"'([a-z]+)'", query))
    assert named == {"queued", "running", "submitted", "pending"}
    assert {"queued", "running", "submitted"} <= set(TASK_STATES)
    assert "pending" in DELIVERY_STATES
    assert {"state", "run_after"} <= set(tasks.c.keys())
    assert {"state", "next_attempt_at"} <= set(deliveries.c.keys())
    # (tests/integration/store/test_keda_query.py runs it on a real PostgreSQL store)
    auth = _kind("TriggerAuthentication")
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    [ref] = auth["spec"]["secretTargetRef"]
    secret = _kind("Secret")
    assert ref["parameter"] == "connection" and ref["name"] == secret["metadata"]["name"]
    assert ref["key"] in secret["stringData"]


def test_workers_have_probes_a_grace_longer_than_a_slice_and_run_as_non_root() -> None:
    pod = _worker_deployment()["spec"]["template"]["spec"]
    defaults = WorkerSettings()
    assert pod["terminationGracePeriodSeconds"] > defaults.slice_seconds + defaults.grace_seconds
    [container] = pod["containers"]
    args = container["args"]
    assert args[0] == "worker"
    assert args[args.index("--metrics-port") + 1] == str(defaults.metrics_port) == "9464"
    # the kubelet reaches the probes from outside the container: not on loopback
    assert args[args.index("--metrics-host") + 1] == "0.0.0.0"
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert (get["path"], _port(container, get["port"])) == (path, 9464), probe
    assert {p["containerPort"] for p in container["ports"]} == {9464}
    assert "limits" in container["resources"] and "requests" in container["resources"]
    assert "replicas" not in _worker_deployment()["spec"]  # KEDA sets them


def test_the_api_probes_its_health_routes_and_its_service_selects_its_pods() -> None:
    [deployment, service] = _docs("api.yaml")
    assert (deployment["kind"], service["kind"]) == ("Deployment", "Service")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[0] == "serve" and "--no-worker" in args
    assert args[args.index("--host") + 1] == "0.0.0.0"
    assert args[args.index("--port") + 1] == "8080"
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert (get["path"], _port(container, get["port"])) == (path, 8080), probe
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    [port] = service["spec"]["ports"]
    assert _port(container, port["targetPort"]) == 8080
    assert "resources" in container


def test_every_config_map_and_secret_a_pod_names_is_in_the_base() -> None:
    config_map, secret = _kind("ConfigMap"), _kind("Secret")
    for name, pod in _pods().items():
        volumes = {v["name"]: v for v in pod["volumes"]}
        for c in pod["containers"]:
            assert [e["secretRef"]["name"] for e in c["envFrom"]] == \
                [secret["metadata"]["name"]], name
            [config] = [m for m in c["volumeMounts"] if m["mountPath"] == "/etc/egress"]
            assert config["readOnly"] is True
            source = volumes[config["name"]]["configMap"]
            assert source["name"] == config_map["metadata"]["name"], name
            assert "egress.toml" in config_map["data"]


def test_the_example_secret_holds_placeholders_only() -> None:
    secret = _kind("Secret")
    assert _docs("secret.example.yaml") == [secret]  # named as the example it is
    for key, value in secret["stringData"].items():
        assert "CHANGE-ME" in value, key
    assert {"EGRESS_STORE_URL", "KEDA_STORE_CONNECTION"} <= set(secret["stringData"])


def test_every_pod_runs_as_non_root_with_a_read_only_root() -> None:
    pods = _pods()
    assert set(pods) == {"egress-api", "egress-worker", "egress-migrate"}
    jobs = [d for f in K8S.glob("*.yaml") for d in _docs(f.name) if d.get("kind") == "Job"]
    assert [j["spec"]["template"]["spec"]["containers"][0]["args"] for j in jobs] == \
        [["migrate"]]
    for pod in pods.values():
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 10001  # the image's user
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
            assert sc["capabilities"]["drop"] == ["ALL"]
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            # EGRESS_HOME (the image's /var/lib/egress): writable, not the image
            home = {v["name"]: v for v in pod["volumes"]}[mounts["/var/lib/egress"]]
            assert home["emptyDir"] == {}
            assert {"name": "EGRESS_CONFIG", "value": "/etc/egress/egress.toml"} in c["env"]


def test_the_configuration_files_shipped_are_valid(tmp_path: Path) -> None:
    config = _kind("ConfigMap")["data"]["egress.toml"]
    for text in (config, (ROOT / "deploy" / "egress.toml").read_text()):
        path = tmp_path / "egress.toml"
        path.write_text(text)
        result = CliRunner().invoke(main, ["config", "check", str(path)],
                                    env={"EGRESS_HOME": str(tmp_path)})
        assert result.exit_code == 0, result.output


def test_compose_runs_store_s3_migrate_api_and_two_workers_with_healthchecks() -> None:
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    services = compose["services"]
    assert {"postgres", "s3", "migrate", "api", "worker"} <= set(services)
    assert services["worker"]["deploy"]["replicas"] == 2
    for name in ("postgres", "s3", "api", "worker"):
        assert services[name]["healthcheck"]["test"], name
    assert "8080/readyz" in " ".join(services["api"]["healthcheck"]["test"])
    assert "9464/healthz" in " ".join(services["worker"]["healthcheck"]["test"])
    assert services["migrate"]["command"] == ["migrate"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("api", "worker"):
        assert services[name]["depends_on"]["migrate"]["condition"] == \
            "service_completed_successfully", name
        env = services[name]["environment"]
        assert {"EGRESS_STORE_URL", "EGRESS_CONFIG"} <= set(env), name
    assert services["api"]["command"] == ["serve", "--host", "0.0.0.0", "--no-worker"]
    assert services["worker"]["command"][0] == "worker"
    grace = services["worker"]["stop_grace_period"]
    assert grace.endswith("s") and int(grace[:-1]) > WorkerSettings().grace_seconds
    text = (ROOT / "deploy" / "compose.yaml").read_text()
    assert "change-me" not in text.lower()  # the passwords come from deploy/.env


def test_the_image_is_multi_stage_pinned_and_runs_as_non_root() -> None:
    lines = [ln.strip() for ln in (ROOT / "Dockerfile").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    froms = [ln for ln in lines if ln.startswith("FROM ")]
    assert len(froms) == 2 and all(re.match(r"FROM python:3\.11\.\d+-slim-bookworm", f)
                                   for f in froms)
    assert froms[0].split()[1] == froms[1].split()[1]  # the same pinned base
    final = lines[lines.index(froms[1]):]
    user = next(ln for ln in final if ln.startswith("USER "))
    assert user.split()[1].split(":")[0] not in ("0", "root")
    assert user.split()[1].split(":")[0] == "10001"  # the manifests' runAsUser
    assert 'ENTRYPOINT ["egress"]' in final
    assert final[-1].startswith('CMD ["serve"')
    assert "EXPOSE 8080 9464" in final
    assert any("EGRESS_HOME=/var/lib/egress" in ln for ln in final)
    assert any("COPY --from=" in ln for ln in final)  # only the built environment
    assert not any("pip install" in ln or ("build" in ln.lower() and "RUN" in ln)
                   for ln in final)  # nothing is built in the final stage
