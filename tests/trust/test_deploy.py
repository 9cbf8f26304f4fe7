"""Deploying on the internet (issue 34): the compose `tls` profile, the Kubernetes manifests,
the Dockerfile, and the ``*_FILE`` settings the manifests read their secrets through.

The manifests are validated against the Kubernetes schemas that ``kubernetes-validate`` ships
(offline: nothing is downloaded); ``.ci/run`` also runs ``caddy validate`` on the Caddyfile and
``docker-compose config`` on the compose files where those binaries are installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from maxclaw.settings import SECRET_FILES, Settings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"


def manifests() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def of_kind(kind: str) -> dict[str, Any]:
    [found] = [d for d in manifests() if d["kind"] == kind]
    return found


def test_every_manifest_passes_the_schema_validator() -> None:
    docs = manifests()
    assert {d["kind"] for d in docs} >= {"Deployment", "Job", "PodDisruptionBudget", "Service",
                                        "ConfigMap", "Secret"}
    for doc in docs:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_the_validator_refuses_a_broken_manifest() -> None:
    """The control: a misspelt field fails, so the test above can fail."""
    broken = of_kind("Deployment")
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kubernetes_validate.latest_version(), strict=True)


def test_the_deployment_probes_gates_and_bounds_its_pods() -> None:
    pod = of_kind("Deployment")["spec"]["template"]["spec"]
    [api] = pod["containers"]
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["resources"]["requests"]["cpu"] and api["resources"]["requests"]["memory"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    [gate] = pod["initContainers"]
    assert "maxclaw migrate --check" in " ".join(gate["command"])
    job = of_kind("Job")["spec"]["template"]["spec"]["containers"][0]
    assert job["args"] == ["migrate"]
    assert of_kind("PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_every_secret_is_read_from_a_mounted_file() -> None:
    config = of_kind("ConfigMap")["data"]
    secret_keys = set(of_kind("Secret")["stringData"])
    job_env = {e["name"]: e["value"] for e in
               of_kind("Job")["spec"]["template"]["spec"]["containers"][0]["env"]}
    files = {k: v for k, v in {**config, **job_env}.items() if k.endswith("_FILE")}
    # no secret as a plain variable anywhere
    for name in (*SECRET_FILES, "secret_key"):
        assert f"MAXCLAW_{name.upper()}" not in config and f"MAXCLAW_{name.upper()}" not in job_env
    assert {Path(v).name for v in files.values()} <= secret_keys
    assert {"MAXCLAW_DATABASE_URL_FILE", "MAXCLAW_SECRET_KEY_FILE",
            "MAXCLAW_MIGRATE_DATABASE_URL_FILE", "MAXCLAW_APP_ROLE_PASSWORD_FILE"} <= set(files)


def test_file_settings_fill_each_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SECRET_FILES:
        (tmp_path / name).write_text(f"value-of-{name}\n")
        monkeypatch.setenv(f"MAXCLAW_{name.upper()}_FILE", str(tmp_path / name))
    settings = Settings()
    for name in SECRET_FILES:
        assert getattr(settings, name) == f"value-of-{name}"
    # the variable itself wins; a missing file is an error that names the variable
    monkeypatch.setenv("MAXCLAW_METRICS_TOKEN", "direct")
    assert Settings().metrics_token == "direct"
    monkeypatch.setenv("MAXCLAW_APP_ROLE_PASSWORD_FILE", str(tmp_path / "absent"))
    with pytest.raises(ValueError, match="MAXCLAW_APP_ROLE_PASSWORD_FILE"):
        Settings()


def test_the_tls_profile_puts_caddy_in_front_and_trusts_it_alone() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    caddy = compose["services"]["caddy"]
    assert caddy["profiles"] == ["tls"]
    assert "./deploy/caddy/Caddyfile:/etc/caddy/Caddyfile:ro" in caddy["volumes"]
    proxy_ip = caddy["networks"]["edge"]["ipv4_address"]
    trusted = compose["x-maxclaw-env"]["MAXCLAW_FORWARDED_ALLOW_IPS"]
    assert trusted == proxy_ip == "${MAXCLAW_PROXY_IP:-172.30.57.2}"
    assert all(p.startswith("${MAXCLAW_PUBLISH_HOST:-127.0.0.1}:")
               for p in compose["services"]["api"]["ports"])
    caddyfile = (ROOT / "deploy" / "caddy" / "Caddyfile").read_text()
    assert "Strict-Transport-Security" in caddyfile and "flush_interval -1" in caddyfile
    assert "respond /metrics 404" in caddyfile


def test_the_image_checks_its_health_and_runs_as_non_root() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    healthcheck = next(line for line in lines if line.startswith("HEALTHCHECK"))
    following = lines[lines.index(healthcheck) + 1]
    assert "/readyz" in healthcheck + following
