"""deploy/: the Dockerfile, compose.yaml and the Kubernetes manifests say what they must.

Kubernetes documents are validated strictly against the API schemas (kubernetes-validate ships
them: no cluster needed); then the properties the operations docs promise are checked.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from openrath_project.secretfiles import FILE_SUFFIX, SECRET_SETTINGS
from tests.support import REPO

DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
SECRETISH = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY|ACCESS_KEY")


def load_all(path: Path) -> list[dict[str, Any]]:
    with path.open() as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


def k8s_documents() -> list[dict[str, Any]]:
    return [
        doc
        for path in sorted(K8S.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in load_all(path)
    ]


def of_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in k8s_documents() if d["kind"] == kind}


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def secret_env_refs(workload: dict[str, Any]) -> set[str]:
    """Secrets a container takes into its environment (by value): there must be none."""
    refs = set()
    for container in pod_spec(workload)["containers"]:
        for source in container.get("envFrom", []):
            if "secretRef" in source:
                refs.add(source["secretRef"]["name"])
        for var in container.get("env", []):
            ref = var.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                refs.add(ref["name"])
    return refs


def secret_volumes(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pod's Secret volumes by volume name (each secret only as files)."""
    return {
        volume["name"]: volume["secret"]
        for volume in pod_spec(workload).get("volumes", [])
        if "secret" in volume
    }


def secret_refs(workload: dict[str, Any]) -> set[str]:
    """The secrets a workload is given at all (as mounted files)."""
    return {volume["secretName"] for volume in secret_volumes(workload).values()}


# --- Kubernetes -----------------------------------------------------------------------------------


def test_every_yaml_file_parses():
    files = sorted(DEPLOY.rglob("*.yaml"))
    assert {p.relative_to(DEPLOY).as_posix() for p in files} >= {
        "compose.yaml",
        "k8s/kustomization.yaml",
        "k8s/web.yaml",
        "k8s/worker.yaml",
        "k8s/beat.yaml",
        "k8s/migrate-job.yaml",
    }
    for path in files:
        assert load_all(path), path


API_OBJECT_FILES = sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


@pytest.mark.parametrize("path", API_OBJECT_FILES, ids=lambda p: p.name)
def test_kubernetes_documents_match_the_api_schemas(path):
    for doc in load_all(path):
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_kustomization_lists_every_manifest_but_the_opt_in_one():
    (kustomization,) = load_all(K8S / "kustomization.yaml")
    listed = set(kustomization["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert present - listed == {"networkpolicy-monitoring.yaml"}
    assert listed <= present


def test_every_document_is_in_the_namespace():
    for doc in k8s_documents():
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "openrath", doc["metadata"]["name"]


def workloads() -> dict[str, dict[str, Any]]:
    return {**of_kind("Deployment"), **of_kind("Job")}


def test_workloads_run_as_non_root_on_a_read_only_root_filesystem():
    found = workloads()
    assert set(found) == {"openrath-web", "openrath-worker", "openrath-beat", "openrath-migrate"}
    for name, workload in found.items():
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["runAsUser"] == 10001, name
        assert spec["automountServiceAccountToken"] is False, name
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert "/tmp" in mounts, name  # the one writable scratch path


def test_web_has_readiness_and_liveness_probes():
    (container,) = pod_spec(of_kind("Deployment")["openrath-web"])["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["args"] == ["web"]
    service = of_kind("Service")["openrath-web"]
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "openrath-web"}


def test_worker_and_beat_commands_and_beat_is_single():
    deployments = of_kind("Deployment")
    assert pod_spec(deployments["openrath-worker"])["containers"][0]["args"] == ["worker"]
    beat = deployments["openrath-beat"]
    assert pod_spec(beat)["containers"][0]["args"] == ["beat"]
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}


def test_the_migrate_job_has_its_own_secret_and_service_account():
    job = of_kind("Job")["openrath-migrate"]
    web = of_kind("Deployment")["openrath-web"]
    assert secret_refs(job) == {"openrath-migrate"}
    assert secret_refs(web) == {"openrath-runtime"}
    for name in ("openrath-worker", "openrath-beat"):
        assert secret_refs(of_kind("Deployment")[name]) == {"openrath-runtime"}
    assert pod_spec(job)["serviceAccountName"] == "openrath-migrate"
    assert pod_spec(web)["serviceAccountName"] == "openrath-web"
    assert "openrath-migrate" in of_kind("ServiceAccount")
    secrets = of_kind("Secret")
    assert "MIGRATION_DATABASE_URL" in secrets["openrath-migrate"]["stringData"]
    assert "MIGRATION_DATABASE_URL" not in secrets["openrath-runtime"]["stringData"]
    assert pod_spec(job)["containers"][0]["args"] == ["migrate"]


def test_no_container_gets_a_secret_by_value():
    """Secrets are files (a read-only Secret volume) named by ``<NAME>_FILE``; no container's
    environment holds a value of one: what runs in it (a tool command) cannot read it from
    /proc/<pid>/environ. Every ``_FILE`` variable names a key of the mounted secret, and every
    key of it is named."""
    secrets = of_kind("Secret")
    for name, workload in workloads().items():
        assert secret_env_refs(workload) == set(), name
        volumes = secret_volumes(workload)
        (volume_name,) = volumes
        volume = volumes[volume_name]
        assert volume["defaultMode"] == 0o440, name  # owner root, group = the pod's fsGroup
        assert "items" not in volume, name
        spec = pod_spec(workload)
        assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsGroup"], name
        keys = set(secrets[volume["secretName"]]["stringData"])
        (container,) = spec["containers"]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume_name]
        assert mount["readOnly"] is True, name
        assert mount["mountPath"] == "/run/secrets/openrath", name
        environment = {var["name"]: var for var in container.get("env", [])}
        for var in environment.values():
            assert "valueFrom" not in var, (name, var["name"])
            assert var["name"] not in SECRET_SETTINGS, (name, var["name"])
        named = {
            key.removesuffix(FILE_SUFFIX): var["value"]
            for key, var in environment.items()
            if key.endswith(FILE_SUFFIX)
        }
        assert named == {key: f"{mount['mountPath']}/{key}" for key in keys}, name
        assert set(named) <= set(SECRET_SETTINGS), name


def test_only_the_migrate_job_gets_the_owner_role():
    for name, workload in workloads().items():
        (container,) = pod_spec(workload)["containers"]
        names = {var["name"] for var in container.get("env", [])}
        owner = "MIGRATION_DATABASE_URL_FILE" in names
        assert owner is (name == "openrath-migrate"), name


def test_secrets_hold_placeholders_only():
    for name, secret in of_kind("Secret").items():
        for key, value in secret["stringData"].items():
            assert value == "" or "CHANGE-ME" in value or "@" in value, (name, key)
            if "://" in value and "@" in value:
                userinfo = value.split("://", 1)[1].split("@", 1)[0]
                assert ":" not in userinfo or userinfo.endswith(":CHANGE-ME"), (name, key)


def test_the_configmap_holds_no_secrets():
    (config,) = of_kind("ConfigMap").values()
    for key in config["data"]:
        assert not SECRETISH.search(key), key
    assert config["data"]["OPENRATH_PROFILE"] == "production"


def test_disruption_budgets_select_deployments():
    labels = {
        name: d["spec"]["template"]["metadata"]["labels"]
        for name, d in of_kind("Deployment").items()
    }
    budgets = of_kind("PodDisruptionBudget")
    assert set(budgets) == {"openrath-web", "openrath-worker", "openrath-beat"}
    for name, budget in budgets.items():
        selector = budget["spec"]["selector"]["matchLabels"]
        assert selector.items() <= labels[name].items(), name


def _selects(policy: dict[str, Any], app: str) -> bool:
    selector = policy["spec"]["podSelector"]
    if not selector:
        return True
    if "matchLabels" in selector:
        return selector["matchLabels"].get("app.kubernetes.io/name") == app
    return any(
        e["key"] == "app.kubernetes.io/name" and e["operator"] == "In" and app in e["values"]
        for e in selector["matchExpressions"]
    )


def test_network_policies():
    base = {
        d["metadata"]["name"]: d
        for d in load_all(K8S / "networkpolicies.yaml")
        if d["kind"] == "NetworkPolicy"
    }
    deny = base["openrath-default-deny"]["spec"]
    assert (deny["podSelector"], deny["policyTypes"]) == ({}, ["Ingress", "Egress"])
    assert "ingress" not in deny
    assert "egress" not in deny

    def ingress_rules(app: str) -> list[dict[str, Any]]:
        return [
            rule
            for policy in base.values()
            if _selects(policy, app)
            for rule in policy["spec"].get("ingress", [])
        ]

    (web_rule,) = ingress_rules("openrath-web")
    (source,) = web_rule["from"]
    assert source["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "ingress-nginx"
    }
    assert web_rule["ports"] == [{"protocol": "TCP", "port": 8000}]
    for app in ("openrath-worker", "openrath-beat", "openrath-migrate"):
        assert ingress_rules(app) == [], app

    allowed_ports = {53, 5432, 6379, 8333}
    for policy in base.values():
        for rule in policy["spec"].get("egress", []):
            assert {p["port"] for p in rule["ports"]} <= allowed_ports
            assert all("ipBlock" not in peer for peer in rule["to"])
    migrate_ports = {
        p["port"]
        for rule in base["openrath-migrate-egress"]["spec"]["egress"]
        for p in rule["ports"]
    }
    assert migrate_ports == {53, 5432}


def test_the_monitoring_policy_opens_metrics_ports_to_monitoring_only():
    (policy,) = load_all(K8S / "networkpolicy-monitoring.yaml")
    (rule,) = policy["spec"]["ingress"]
    assert {p["port"] for p in rule["ports"]} == {8000, 9100}
    (peer,) = rule["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}


def test_configured_settings_are_documented():
    (config,) = of_kind("ConfigMap").values()
    documented = (REPO / "docs" / "operations.md").read_text()
    for key in config["data"]:
        assert f"`{key}`" in documented, key


# --- Compose --------------------------------------------------------------------------------------

APP_SERVICES = ("s3-bucket", "migrate", "web", "worker", "beat")


def compose() -> dict[str, Any]:
    (document,) = load_all(DEPLOY / "compose.yaml")
    return document


def test_compose_app_services_are_read_only_and_non_root():
    services = compose()["services"]
    assert set(services) == {"postgres", "redis", "seaweedfs", *APP_SERVICES}
    for name in APP_SERVICES:
        service = services[name]
        assert service["read_only"] is True, name
        assert service["tmpfs"] == ["/tmp"], name
        assert service["user"] == "10001:10001", name
        assert service["cap_drop"] == ["ALL"], name


def test_compose_order_migrate_first_as_the_owner():
    services = compose()["services"]
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert services["migrate"]["command"] == ["migrate"]
    for name in ("web", "worker", "beat"):
        depends = services[name]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}, name
        assert depends["s3-bucket"] == {"condition": "service_completed_successfully"}, name
        assert services[name]["command"] == [name]
        environment = services[name]["environment"]
        assert "MIGRATION_DATABASE_URL_FILE" not in environment, name
        assert "migration_database_url" not in services[name]["secrets"], name
        assert environment["DATABASE_URL_FILE"] == "/run/secrets/database_url", name
        assert environment["OPENRATH_PROFILE"] == "production", name
    migrate = services["migrate"]
    assert migrate["secrets"] == ["migration_database_url"]
    assert migrate["environment"]["MIGRATION_DATABASE_URL_FILE"] == (
        "/run/secrets/migration_database_url"
    )
    # The role to grant, without a password: the runtime role's password is not migrate's.
    assert (
        migrate["environment"]["DATABASE_URL"] == "postgres://openrath_app@postgres:5432/openrath"
    )
    owners = [
        n for n, service in services.items() if "owner_password" in service.get("secrets", [])
    ]
    assert owners == ["postgres"]


def test_compose_gives_secrets_as_files_only():
    """No service's environment holds a secret's value: each secret is a compose secret (a file
    at /run/secrets/<name>) named by a ``<NAME>_FILE`` variable, and a service is given exactly
    the secrets its variables name."""
    document = compose()
    declared = document["secrets"]
    for name, source in declared.items():
        assert source == {"file": f"./secrets/{name}"}, name
    for name, service in document["services"].items():
        environment = service.get("environment", {})
        for key, value in environment.items():
            if key in SECRET_SETTINGS:
                # The one exception: the role the migrate service grants, named without a password.
                assert (name, key) == ("migrate", "DATABASE_URL"), (name, key)
                assert value.split("://", 1)[1].split("@", 1)[0] == "openrath_app"
                continue
            assert not SECRETISH.search(key) or key.endswith(FILE_SUFFIX), (name, key)
            assert "@" not in str(value), (name, key)
        named = {
            value.removeprefix("/run/secrets/")
            for key, value in environment.items()
            if key.endswith(FILE_SUFFIX)
        }
        assert named == set(service.get("secrets", [])), name
        assert named <= set(declared), name
    runtime = {f"{key}_FILE" for key in SECRET_SETTINGS} - {"MIGRATION_DATABASE_URL_FILE"}
    for name in ("web", "worker", "beat"):
        assert runtime <= set(document["services"][name]["environment"]), name


def test_init_secrets_writes_every_compose_secret(tmp_path):
    target = tmp_path / "secrets"
    script = DEPLOY / "compose" / "init-secrets.sh"
    made = subprocess.run(
        ["sh", str(script), str(target)], capture_output=True, text=True, timeout=30, check=True
    )
    assert made.stdout.strip().splitlines()[-1] == f"secrets: {target}"
    assert target.stat().st_mode & 0o777 == 0o700
    files = {p.name: p for p in target.iterdir() if p.name != ".gitignore"}
    assert set(files) == set(compose()["secrets"])
    assert (target / ".gitignore").read_text() == "*\n"
    values = {name: path.read_text().rstrip("\n") for name, path in files.items()}
    assert values["database_url"] == (
        f"postgres://openrath_app:{values['app_password']}@postgres:5432/openrath"
    )
    assert values["migration_database_url"] == (
        f"postgres://openrath_owner:{values['owner_password']}@postgres:5432/openrath"
    )
    assert len(values["secret_key"]) >= 50
    assert values["openai_api_key"] == ""
    assert len({values[n] for n in ("postgres_password", "owner_password", "app_password")}) == 3
    # Again: nothing changes (existing secrets are kept).
    again = subprocess.run(
        ["sh", str(script), str(target)], capture_output=True, text=True, timeout=30, check=True
    )
    assert again.stdout.strip().splitlines() == [f"secrets: {target}"]
    assert {n: p.read_text().rstrip("\n") for n, p in files.items()} == values


def test_compose_postgres_init_creates_both_roles():
    volumes = compose()["services"]["postgres"]["volumes"]
    assert (
        "./compose/postgres-init.sh:/docker-entrypoint-initdb.d/10-openrath-roles.sh:ro" in volumes
    )
    script = (DEPLOY / "compose" / "postgres-init.sh").read_text()
    assert "CREATE ROLE openrath_owner LOGIN PASSWORD :'owner_password';" in script
    assert "CREATE ROLE openrath_app LOGIN PASSWORD :'app_password';" in script
    assert "CREATE DATABASE openrath OWNER openrath_owner;" in script
    assert "REVOKE CREATE ON SCHEMA public FROM PUBLIC;" in script


def test_env_example_defines_every_variable_and_no_secret():
    text = (DEPLOY / "compose.yaml").read_text()
    used = set(re.findall(r"\$\{([A-Z0-9_]+)", text))
    example: dict[str, str] = {}
    for line in (DEPLOY / ".env.example").read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            example[key] = value
    assert used <= set(example), used - set(example)
    assert [key for key in example if SECRETISH.search(key)] == []


# --- Image and scripts ----------------------------------------------------------------------------


def test_production_local_knows_every_secret_setting():
    """The script's list of secret settings (each passed to its processes as a file) is the
    product's own."""
    text = (DEPLOY / "bin" / "production-local").read_text()
    (listed,) = re.findall(r"^SECRET_SETTINGS=\(([^)]*)\)", text, flags=re.M)
    assert tuple(listed.split()) == SECRET_SETTINGS


def test_dockerfile():
    text = (DEPLOY / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)", text, flags=re.M)
    assert stages[-1] == "python:3.11-slim"
    assert re.search(r"^USER 10001:10001$", text, flags=re.M)
    assert "manage.py collectstatic --noinput" in text
    assert 'ENTRYPOINT ["/usr/local/bin/openrath-entrypoint"]' in text
    assert "OPENRATH_DATA_DIR=/data" in text
    runtime = text[text.rindex("\nFROM ") :]  # the image's own stage
    (env,) = re.findall(r"^ENV (.*?)(?<!\\)$", runtime, flags=re.M | re.S)
    names = {item.split("=", 1)[0] for item in env.replace("\\\n", " ").split()}
    assert "OPENRATH_PROFILE" in names
    assert {n for n in names if n in SECRET_SETTINGS or SECRETISH.search(n)} == set()
    entrypoint = (DEPLOY / "docker-entrypoint.sh").read_text()
    for needle in (
        "uvicorn openrath_project.asgi:application",
        "celery -A openrath_project worker",
        "celery -A openrath_project beat",
        "exec openrath-migrate",
        "--schedule /tmp/celerybeat-schedule",  # the only writable path besides /data
    ):
        assert needle in entrypoint, needle


@pytest.mark.parametrize(
    ("shell", "script"),
    [
        ("sh", "deploy/docker-entrypoint.sh"),
        ("sh", "deploy/compose/postgres-init.sh"),
        ("sh", "deploy/compose/seaweedfs-entrypoint.sh"),
        ("sh", "deploy/compose/init-secrets.sh"),
        ("bash", "deploy/bin/production-local"),
    ],
)
def test_scripts_parse(shell, script):
    result = subprocess.run([shell, "-n", str(REPO / script)], capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (0, "")
