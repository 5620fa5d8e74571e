"""The deployment files' fields that matter, read as YAML (no cluster or container runtime
runs here: kubernetes-validate checks the core kinds' schemas in scripts/check-deploy;
KEDA's kinds have no schema there, so their fields are checked here)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from egress.cli import main
from egress.config import WorkerSettings
from egress.store.schema import DELIVERY_STATES, TASK_STATES

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


def test_the_kustomization_lists_every_manifest_and_only_those() -> None:
    [kustomization] = _docs("kustomization.yaml")
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert {i["name"] for i in kustomization["images"]} == {"egress"}


def test_keda_scales_the_workers_to_zero_on_the_work_in_the_store() -> None:
    scaled = _kind("ScaledObject")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    spec = scaled["spec"]
    assert spec["scaleTargetRef"]["name"] == _worker_deployment()["metadata"]["name"]
    assert spec["minReplicaCount"] == 0 and spec["maxReplicaCount"] >= 1
    [trigger] = spec["triggers"]
    assert trigger["type"] == "postgresql"
    meta = trigger["metadata"]
    assert int(meta["targetQueryValue"]) == WorkerSettings().concurrency
    assert meta["activationTargetQueryValue"] == "0"
    query = meta["query"]
    # the states it names are the store's own
    named = set(re.findall(r"'([a-z]+)'", query))
    assert named == {"queued", "running", "submitted", "pending"}
    assert named <= set(TASK_STATES) | set(DELIVERY_STATES)
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
    assert container["args"][0] == "worker"
    assert container["args"][container["args"].index("--metrics-port") + 1] == "9464"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {p["containerPort"] for p in container["ports"]} == {9464}
    assert "limits" in container["resources"] and "requests" in container["resources"]


def test_every_pod_runs_as_non_root_with_a_read_only_root() -> None:
    pods = [d["spec"]["template"]["spec"] for f in K8S.glob("*.yaml") for d in _docs(f.name)
            if d.get("kind") in ("Deployment", "Job")]
    assert len(pods) == 3
    for pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
            assert sc["capabilities"]["drop"] == ["ALL"]
            mounts = {m["mountPath"] for m in c["volumeMounts"]}
            assert "/var/lib/egress" in mounts  # EGRESS_HOME: writable, not the image
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
    assert "9464/healthz" in " ".join(services["worker"]["healthcheck"]["test"])
    assert services["api"]["depends_on"]["migrate"]["condition"] == \
        "service_completed_successfully"
    text = (ROOT / "deploy" / "compose.yaml").read_text()
    assert "change-me" not in text.lower()  # the passwords come from deploy/.env


def test_the_image_is_multi_stage_pinned_and_runs_as_non_root() -> None:
    lines = [ln.strip() for ln in (ROOT / "Dockerfile").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    froms = [ln for ln in lines if ln.startswith("FROM ")]
    assert len(froms) == 2 and all(re.match(r"FROM python:3\.11\.\d+-slim-bookworm", f)
                                   for f in froms)
    final = lines[lines.index(froms[1]):]
    user = next(ln for ln in final if ln.startswith("USER "))
    assert user.split()[1].split(":")[0] not in ("0", "root")
    assert 'ENTRYPOINT ["egress"]' in final
    assert not any("pip install" in ln or ("build" in ln.lower() and "RUN" in ln)
                   for ln in final)  # nothing is built in the final stage
