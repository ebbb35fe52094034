"""The deployment examples are valid for the tools that read them (docs/deployment.md).

- Every example dagster.yaml (the project's, examples/dagster-postgres.yaml, deploy/k8s/instance.yaml)
  passes Dagster's own instance schema, its classes import, and each class's config passes that
  class's schema (K8sRunLauncher's from dagster-k8s, Postgres storage's from dagster-postgres) with
  the environment variables it references set.
- deploy/k8s/values.yaml uses only keys of Dagster's Helm chart (1.13) for the parts it sets, points
  the code location at the project's definitions, keeps secrets out of plain env, and gives the
  instance deploy/k8s/instance.yaml says (the chart's rendering of runLauncher, postgresql,
  concurrency and the run coordinator, redone here for those keys).
- deploy/k8s/Dockerfile parses, starts from python:3.11-slim and installs the extras a run pod needs
  at the chart's Dagster version.

The chart (and its values.schema.json) is on no registry this project can reach, so the chart keys are
checked against the key sets below, written from the chart's schema models (helm/dagster/schema in
Dagster's repository) as far as they could be read - not from the 1.13.27 release itself; `helm
template` with the chart is the final check. Every check also rejects a deliberately broken copy.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster._config import process_config
from dagster._core.errors import DagsterInvalidConfigError
from dagster._core.instance.config import dagster_instance_config
from dagster._serdes.config_class import class_from_code_pointer
from dagster_shared.check import CheckError
from dockerfile_parse import DockerfileParser

from graphrag_pipeline.settings import PROJECT_ROOT, SETTINGS
from graphrag_pipeline.settings_check import check_settings

DEPLOY = PROJECT_ROOT / "deploy" / "k8s"
VALUES = DEPLOY / "values.yaml"
INSTANCE = DEPLOY / "instance.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
DOCS = PROJECT_ROOT / "docs" / "deployment.md"
INSTANCE_EXAMPLES = [PROJECT_ROOT / "dagster.yaml", PROJECT_ROOT / "examples" / "dagster-postgres.yaml", INSTANCE]

# what the examples' {env: ...} entries need (fake values: nothing connects)
PG_ENV = {
    "DAGSTER_PG_USERNAME": "dagster",
    "DAGSTER_PG_PASSWORD": "not-a-real-password",
    "DAGSTER_PG_HOST": "db.example.internal",
    "DAGSTER_PG_PORT": "5432",
    "DAGSTER_PG_DB": "dagster",
}
# settings the parts merged alongside this one add (i13-s3: the scratch; i13-cache: the cache store);
# accepted here until settings.py declares them
SECRET_NAMES = {n for n, s in SETTINGS.items() if s.kind == "secret"} | {
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_SESSION_TOKEN",
    "DAGSTER_PG_PASSWORD",
    "GRAPHRAG_CACHE_URL",  # a postgresql:// URL with its password
}

# The keys of Dagster's Helm chart 1.13 (its values.schema.json) for the parts values.yaml sets.
CHART_TOP = {
    "dagsterWebserver", "dagster-user-deployments", "postgresql", "generatePostgresqlPasswordSecret",
    "generateCeleryConfigSecret", "rabbitmq", "redis", "flower", "ingress", "imagePullSecrets",
    "computeLogManager", "scheduler", "runLauncher", "pythonLogs", "dagsterDaemon", "busybox", "migrate",
    "telemetry", "serviceAccount", "global", "retention", "additionalInstanceConfig", "concurrency",
    "nameOverride", "fullnameOverride", "rbacEnabled",
}  # fmt: skip
CHART_KEYS: dict[str, set[str]] = {
    "global": {"postgresqlSecretName", "dagsterHome", "serviceAccountName", "celeryConfigSecretName"},
    "postgresql": {
        "image", "enabled", "postgresqlHost", "postgresqlUsername", "postgresqlPassword", "postgresqlDatabase",
        "postgresqlParams", "postgresqlScheme", "service",
    },
    "dagster-user-deployments": {"enabled", "enableSubchart", "imagePullSecrets", "deployments"},
    "deployment": {
        "name", "image", "dagsterApiGrpcArgs", "codeServerArgs", "includeConfigInLaunchedRuns", "port", "env",
        "envConfigMaps", "envSecrets", "annotations", "nodeSelector", "affinity", "tolerations",
        "podSecurityContext", "securityContext", "resources", "livenessProbe", "readinessProbe", "startupProbe",
        "labels", "volumeMounts", "volumes", "schedulerName",
    },
    "runLauncher": {"type", "config"},
    "k8sRunLauncher": {
        "image", "imagePullPolicy", "jobNamespace", "loadInclusterConfig", "kubeconfigFile", "envConfigMaps",
        "envSecrets", "envVars", "volumeMounts", "volumes", "labels", "failPodOnRunFailure", "resources",
        "schedulerName", "securityContext", "runK8sConfig",
    },
    "dagsterDaemon": {
        "enabled", "image", "runCoordinator", "heartbeatTolerance", "env", "envConfigMaps", "envSecrets",
        "deploymentLabels", "labels", "nodeSelector", "affinity", "tolerations", "podSecurityContext",
        "securityContext", "resources", "livenessProbe", "readinessProbe", "startupProbe", "annotations",
        "runMonitoring", "runRetries", "sensors", "schedules", "schedulerName", "volumeMounts", "volumes",
    },
    "runCoordinator": {"enabled", "type", "config"},
    "queuedRunCoordinator": {
        "maxConcurrentRuns", "tagConcurrencyLimits", "dequeueIntervalSeconds", "dequeueNumWorkers",
        "dequeueUseThreads", "blockOpConcurrencyLimitedRuns",
    },
    "concurrency": {"enabled", "pools", "runs"},
    "pools": {"defaultLimit", "granularity", "opGranularityRunBuffer"},
    "runs": {"maxConcurrentRuns", "tagConcurrencyLimits"},
}  # fmt: skip
# the chart's K8sRunLauncher template: values key -> instance key (lists of {name: ...} become names)
LAUNCHER_KEYS = {
    "loadInclusterConfig": "load_incluster_config",
    "kubeconfigFile": "kubeconfig_file",
    "imagePullPolicy": "image_pull_policy",
    "envConfigMaps": "env_config_maps",
    "envSecrets": "env_secrets",
    "envVars": "env_vars",
    "volumeMounts": "volume_mounts",
    "volumes": "volumes",
    "labels": "labels",
    "resources": "resources",
    "failPodOnRunFailure": "fail_pod_on_run_failure",
    "schedulerName": "scheduler_name",
    "securityContext": "security_context",
}


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


# -- the instance (dagster.yaml) -------------------------------------------------------------------


def check_instance(text: str, env: Mapping[str, str], tmp_path: Path, monkeypatch) -> Mapping[str, Any]:
    """Validate a dagster.yaml the way Dagster loads it: the instance schema, then each configurable
    class imported and its config processed by its own schema (env references resolved). Raises on
    the first problem; returns the validated config."""
    folder = tmp_path / "instance"
    folder.mkdir(exist_ok=True)
    (folder / "dagster.yaml").write_text(text, encoding="utf-8")
    for name in PG_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config, _ = dagster_instance_config(str(folder))
    for section, value in config.items():
        if isinstance(value, Mapping) and "module" in value and "class" in value:
            cls = class_from_code_pointer(value["module"], value["class"])
            result = process_config(cls.config_type(), value.get("config") or {})
            if not result.success:
                raise DagsterInvalidConfigError(f"{section}: {value['class']} config", result.errors, value)
    if "storage" in config and "postgres" in config["storage"]:
        from dagster_postgres.utils import pg_config

        result = process_config(pg_config(), config["storage"]["postgres"])
        if not result.success:
            raise DagsterInvalidConfigError("storage: postgres", result.errors, config["storage"])
    return config


@pytest.mark.parametrize("path", INSTANCE_EXAMPLES, ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_example_instances_pass_dagsters_schemas(path: Path, tmp_path, monkeypatch):
    config = check_instance(path.read_text(encoding="utf-8"), PG_ENV, tmp_path, monkeypatch)
    assert config["concurrency"]["pools"]["default_limit"] >= 1  # the llm pool has a limit in every example
    assert config["telemetry"]["enabled"] is False


def test_kubernetes_instance_is_the_production_stack(tmp_path, monkeypatch):
    config = check_instance(INSTANCE.read_text(encoding="utf-8"), PG_ENV, tmp_path, monkeypatch)
    assert (config["run_launcher"]["module"], config["run_launcher"]["class"]) == ("dagster_k8s", "K8sRunLauncher")
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    for key in ("run_storage", "event_log_storage", "schedule_storage"):
        db = config[key]["config"]["postgres_db"]
        assert db["scheme"] == "postgresql+psycopg2"
        assert db["password"] == {"env": "DAGSTER_PG_PASSWORD"}  # never the password itself


BROKEN_INSTANCES = {
    "unknown top-level key": lambda c: c.update(run_luncher=c.pop("run_launcher")),
    "pool limit not a number": lambda c: c["concurrency"]["pools"].update(default_limit="two"),
    "launcher key misspelt": lambda c: c["run_launcher"]["config"].update(job_namspace="graphrag"),
    "launcher value of the wrong type": lambda c: c["run_launcher"]["config"].update(load_incluster_config="yes"),
    "run coordinator module gone": lambda c: c["run_coordinator"].update(module="dagster.core.run_coordinator"),
    "max runs set twice": lambda c: c["run_coordinator"].update(config={"max_concurrent_runs": 4}),
    "storage key misspelt": lambda c: c["run_storage"]["config"]["postgres_db"].update(hostnme="db"),
}


@pytest.mark.parametrize("breakage", list(BROKEN_INSTANCES))
def test_broken_instance_is_rejected(breakage, tmp_path, monkeypatch):
    config = _yaml(INSTANCE)
    BROKEN_INSTANCES[breakage](config)
    with pytest.raises((DagsterInvalidConfigError, CheckError)):  # a schema error, or a class that does not load
        check_instance(yaml.safe_dump(config), PG_ENV, tmp_path, monkeypatch)


def test_instance_needs_the_environment_it_references(tmp_path, monkeypatch):
    text = (PROJECT_ROOT / "examples" / "dagster-postgres.yaml").read_text(encoding="utf-8")
    env = {k: v for k, v in PG_ENV.items() if k != "DAGSTER_PG_PASSWORD"}
    with pytest.raises(DagsterInvalidConfigError, match="DAGSTER_PG_PASSWORD"):
        check_instance(text, env, tmp_path, monkeypatch)


# -- the Helm values -------------------------------------------------------------------------------


def chart_key_problems(values: Mapping[str, Any]) -> list[str]:
    """Keys values.yaml sets that the chart does not have (a typo is otherwise ignored by templates)."""
    problems = [f"unknown top-level key {k}" for k in values if k not in CHART_TOP]

    def check(section: str, mapping: Any, where: str) -> None:
        if not isinstance(mapping, Mapping):
            problems.append(f"{where}: not a mapping")
            return
        problems.extend(f"{where}: unknown key {k}" for k in mapping if k not in CHART_KEYS[section])

    for section in ("global", "postgresql", "dagster-user-deployments", "runLauncher", "dagsterDaemon"):
        if section in values:
            check(section, values[section], section)
    for i, deployment in enumerate(values.get("dagster-user-deployments", {}).get("deployments", [])):
        check("deployment", deployment, f"deployments[{i}]")
    launcher = values.get("runLauncher", {})
    if launcher.get("type") not in ("K8sRunLauncher", "CeleryK8sRunLauncher", "CustomRunLauncher"):
        problems.append(f"runLauncher.type {launcher.get('type')!r} is not one of the chart's")
    if "k8sRunLauncher" in launcher.get("config", {}):
        check("k8sRunLauncher", launcher["config"]["k8sRunLauncher"], "runLauncher.config.k8sRunLauncher")
    coordinator = values.get("dagsterDaemon", {}).get("runCoordinator", {})
    check("runCoordinator", coordinator, "dagsterDaemon.runCoordinator")
    queued = coordinator.get("config", {}).get("queuedRunCoordinator") or {}
    check("queuedRunCoordinator", queued, "queuedRunCoordinator")
    if "concurrency" in values:
        check("concurrency", values["concurrency"], "concurrency")
        check("pools", values["concurrency"].get("pools", {}), "concurrency.pools")
        check("runs", values["concurrency"].get("runs", {}), "concurrency.runs")
        if queued.get("maxConcurrentRuns") is not None and values["concurrency"].get("runs", {}).get(
            "maxConcurrentRuns"
        ):
            problems.append("maxConcurrentRuns set both in concurrency.runs and queuedRunCoordinator (the chart fails)")
    return problems


def render_instance_parts(values: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of the instance the chart renders from the keys values.yaml sets (its templates
    configmap-instance, _run-launcher, _postgresql, _run-coordinator, _concurrency), for comparison."""
    pg = values["postgresql"]
    postgres_db = {
        "username": pg["postgresqlUsername"],
        "password": {"env": "DAGSTER_PG_PASSWORD"},
        "hostname": pg["postgresqlHost"],
        "db_name": pg["postgresqlDatabase"],
        "port": pg["service"]["port"],
    }
    if pg.get("postgresqlScheme"):
        postgres_db["scheme"] = pg["postgresqlScheme"]
    k8s = values["runLauncher"]["config"]["k8sRunLauncher"]
    launcher: dict[str, Any] = {}
    for key, instance_key in LAUNCHER_KEYS.items():
        value = k8s.get(key)
        if value in (None, [], {}, False) and key != "loadInclusterConfig":
            continue
        if key in ("envConfigMaps", "envSecrets"):
            value = [item["name"] for item in value]
        launcher[instance_key] = value
    daemon = values["dagsterDaemon"]
    concurrency = values.get("concurrency", {})
    parts: dict[str, Any] = {
        "postgres_db": postgres_db,
        "run_launcher": launcher,
        "run_coordinator": daemon["runCoordinator"]["type"] if daemon["enabled"] else None,
        "run_monitoring": bool(daemon["enabled"] and daemon.get("runMonitoring", {}).get("enabled")),
        "telemetry": values["telemetry"]["enabled"],
    }
    if concurrency.get("enabled"):
        parts["concurrency"] = {
            "pools": {"default_limit": concurrency["pools"]["defaultLimit"]},
            "runs": {"max_concurrent_runs": concurrency["runs"]["maxConcurrentRuns"]},
        }
    return parts


def instance_parts(instance: Mapping[str, Any]) -> dict[str, Any]:
    db = instance["run_storage"]["config"]["postgres_db"]
    launcher = instance["run_launcher"]["config"]
    chart_set = {"job_namespace", "service_account_name", "dagster_home", "instance_config_map"}
    chart_set |= {"postgres_password_secret"}  # from the release, not from values
    parts: dict[str, Any] = {
        "postgres_db": {k: v for k, v in db.items() if k != "params"},
        "run_launcher": {k: v for k, v in launcher.items() if k not in chart_set},
        "run_coordinator": instance.get("run_coordinator", {}).get("class"),
        "run_monitoring": instance.get("run_monitoring", {}).get("enabled", False),
        "telemetry": instance["telemetry"]["enabled"],
    }
    if "concurrency" in instance:
        parts["concurrency"] = instance["concurrency"]
    return parts


def test_helm_values_use_the_charts_keys():
    assert chart_key_problems(_yaml(VALUES)) == []


@pytest.mark.parametrize(
    "breakage",
    [
        lambda v: v["runLauncher"]["config"]["k8sRunLauncher"].update(envSecret=[{"name": "x"}]),
        lambda v: v["dagster-user-deployments"]["deployments"][0].update(dagsterApiGrpcArg=["-m", "x"]),
        lambda v: v["concurrency"]["pools"].update(default_limit=2),
        lambda v: v["runLauncher"].update(type="K8sLauncher"),
        lambda v: v.update(dagsterDaemons={"enabled": True}),
        lambda v: v["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"].update(maxConcurrentRuns=4),
    ],
    ids=["launcher", "deployment", "pools", "launcher-type", "top-level", "max-runs-twice"],
)
def test_helm_values_with_a_wrong_key_are_rejected(breakage):
    values = _yaml(VALUES)
    breakage(values)
    assert chart_key_problems(values)


def test_helm_values_give_the_documented_instance(tmp_path, monkeypatch):
    values, instance = _yaml(VALUES), _yaml(INSTANCE)
    assert render_instance_parts(values) == instance_parts(instance)
    # and the instance the values give passes Dagster's schemas (checked above for instance.yaml)
    check_instance(INSTANCE.read_text(encoding="utf-8"), PG_ENV, tmp_path, monkeypatch)


@pytest.mark.parametrize(
    "breakage",
    [
        lambda v: v["concurrency"]["pools"].update(defaultLimit=5),
        lambda v: v["postgresql"].update(postgresqlScheme="postgresql"),
        lambda v: v["runLauncher"]["config"]["k8sRunLauncher"]["resources"]["requests"].update(cpu="4"),
        lambda v: v["concurrency"].update(enabled=False),
    ],
    ids=["pool-limit", "scheme", "run-pod-cpu", "concurrency-off"],
)
def test_helm_values_that_disagree_with_the_instance_are_caught(breakage):
    values = _yaml(VALUES)
    breakage(values)
    assert render_instance_parts(values) != instance_parts(_yaml(INSTANCE))


def deployment_problems(values: Mapping[str, Any]) -> list[str]:
    """What the code location needs: the project's definitions, valid settings, no plain secrets,
    the corpus and the scratch on mounted volumes, the Secret named."""
    problems: list[str] = []
    pyproject = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    module = pyproject["tool"]["dagster"]["module_name"]
    for d in values["dagster-user-deployments"]["deployments"]:
        name = d["name"]
        if d.get("dagsterApiGrpcArgs") != ["-m", module]:
            problems.append(f"{name}: dagsterApiGrpcArgs should be ['-m', '{module}']")
        if importlib.util.find_spec(module) is None:
            problems.append(f"{name}: {module} does not import")
        env = d.get("env") or {}
        if not isinstance(env, Mapping):
            env = {e["name"]: e.get("value", "") for e in env}
        for var in env:
            if var in SECRET_NAMES:
                problems.append(f"{name}: {var} is a secret: put it in a Secret (envSecrets), not in env")
            elif var.startswith("GRAPHRAG_") and var not in SETTINGS:
                problems.append(f"{name}: {var} is not a setting of graphrag-pipeline")
        problems.extend(f"{name}: {p}" for p in check_settings({k: str(v) for k, v in env.items()}, check_paths=False))
        if not env.get("GRAPHRAG_KB"):
            problems.append(f"{name}: GRAPHRAG_KB must be set (names on the shared instance, the ES alias)")
        if not str(env.get("GRAPHRAG_HOME", "")).startswith("s3://"):
            problems.append(f"{name}: GRAPHRAG_HOME must be on object storage (pods share no disk)")
        if not d.get("envSecrets"):
            problems.append(f"{name}: no envSecrets (OPENAI_API_KEY, AWS_*)")
        if not (d.get("includeConfigInLaunchedRuns") or {}).get("enabled", True):
            problems.append(f"{name}: run pods would not get the location's env, secrets and volumes")
        volumes = {v["name"] for v in d.get("volumes") or []}
        mounts = {m["mountPath"]: m["name"] for m in d.get("volumeMounts") or []}
        problems.extend(f"{name}: mount of unknown volume {v}" for v in mounts.values() if v not in volumes)
        for var in ("GRAPHRAG_CORPUS", "GRAPHRAG_SCRATCH"):
            path = env.get(var)
            if path and not any(Path(path).is_relative_to(m) for m in mounts):
                problems.append(f"{name}: {var}={path} is on no mounted volume")
    return problems


def test_helm_values_give_a_working_code_location():
    assert deployment_problems(_yaml(VALUES)) == []


@pytest.mark.parametrize(
    "breakage",
    [
        lambda d: d.update(dagsterApiGrpcArgs=["-m", "graphrag_pipeline.defs"]),
        lambda d: d["env"].update(OPENAI_API_KEY="sk-test"),
        lambda d: d["env"].update(GRAPHRAG_MEHTOD="light"),
        lambda d: d["env"].update(GRAPHRAG_METHOD="fastest"),
        lambda d: d["env"].pop("GRAPHRAG_KB"),
        lambda d: d["env"].update(GRAPHRAG_HOME="/data/home"),
        lambda d: d.update(envSecrets=[]),
        lambda d: d["env"].update(GRAPHRAG_CORPUS="/mnt/corpus"),
        lambda d: d["volumeMounts"].append({"name": "cache", "mountPath": "/cache"}),
        lambda d: d.update(includeConfigInLaunchedRuns={"enabled": False}),
    ],
    ids=[
        "module", "plain-secret", "unknown-setting", "bad-method", "no-kb", "local-home", "no-secret",
        "corpus-unmounted", "unknown-volume", "runs-without-config",
    ],
)  # fmt: skip
def test_broken_code_location_is_rejected(breakage):
    values = _yaml(VALUES)
    breakage(values["dagster-user-deployments"]["deployments"][0])
    assert deployment_problems(values)


def test_runs_use_the_multiprocess_executor_in_their_pod():
    """docs/deployment.md: one pod per run (K8sRunLauncher), steps as processes in it (the jobs keep
    Dagster's default executor), not a pod per step (k8s_job_executor)."""
    from graphrag_pipeline.definitions import defs

    for job in ("corpus_job", "publish_job", "documents_job", "graph_job", "reports_job", "index_job"):
        assert defs.resolve_job_def(job).executor_def is dg.multi_or_in_process_executor, job


def docs_yaml_blocks(text: str) -> list[Any]:
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, flags=re.S)]


def step_pods_problems(text: str) -> list[str]:
    """The `k8s_job_executor` run config docs/deployment.md shows, against the executor's schema."""
    from dagster_k8s import k8s_job_executor

    blocks = [b for b in docs_yaml_blocks(text) if isinstance(b, dict) and "execution" in b]
    if len(blocks) != 1:
        return [f"{len(blocks)} run config blocks with `execution:` in the docs, expected 1"]
    result = process_config(k8s_job_executor.config_schema.config_type, blocks[0]["execution"]["config"])
    return [str(e.message) for e in result.errors or []]


def test_docs_pod_per_step_config_passes_k8s_job_executor_schema():
    assert step_pods_problems(DOCS.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "old, new",
    [
        ("max_concurrent: 4", "max_concurrency: 4"),
        ("container_config:\n        resources", "container:\n        resources"),
    ],
    ids=["top-key", "k8s-key"],
)
def test_broken_pod_per_step_config_is_rejected(old, new):
    text = DOCS.read_text(encoding="utf-8")
    assert old in text
    assert step_pods_problems(text.replace(old, new))


def test_docs_install_the_chart_version_of_the_values():
    versions = set(re.findall(r"--version (\d+\.\d+\.\d+)", DOCS.read_text(encoding="utf-8")))
    assert versions == set(re.findall(r"--version (\d+\.\d+\.\d+)", VALUES.read_text(encoding="utf-8")))
    assert len(versions) == 1
    # instance.yaml names what the chart derives from the release and namespace of that command
    release, namespace = re.search(
        r"helm upgrade --install (\S+) dagster/dagster .*-n (\S+)", DOCS.read_text()
    ).groups()
    launcher = _yaml(INSTANCE)["run_launcher"]["config"]
    assert (launcher["instance_config_map"], launcher["job_namespace"]) == (f"{release}-instance", namespace)


# -- the Dockerfile --------------------------------------------------------------------------------


def dockerfile_problems(text: str, tmp_path: Path) -> list[str]:
    """The image: python 3.11 slim, the project installed with the extras a run pod needs, Dagster at
    the chart's version (the same minor as the one installed here)."""
    problems: list[str] = []
    path = tmp_path / "Dockerfile"
    path.write_text(text, encoding="utf-8")
    parser = DockerfileParser(path=str(path))
    if parser.baseimage != "python:3.11-slim":
        problems.append(f"base image {parser.baseimage!r}, not python:3.11-slim")
    args = {}
    for instruction in parser.structure:
        if instruction["instruction"] == "ARG" and "=" in instruction["value"]:
            key, value = instruction["value"].split("=", 1)
            args[key.strip()] = value.strip()
        if instruction["instruction"] == "COPY":
            for source in instruction["value"].split()[:-1]:
                if not (PROJECT_ROOT / source).exists():
                    problems.append(f"COPY {source}: no such file in the checkout")
    runs = " ".join(i["value"] for i in parser.structure if i["instruction"] == "RUN")
    install = re.search(r'pip install "?\.\[([a-z0-9_,-]+)\]', runs)
    if not install:
        problems.append("no `pip install .[extras]` of the project")
    else:
        extras = set(install.group(1).split(","))
        declared = set(tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
        problems.extend(f"extra {e} is not in pyproject.toml" for e in extras - declared)
        problems.extend(f"extra {e} is not installed" for e in {"postgres", "k8s", "s3"} - extras)
    version = args.get("DAGSTER_VERSION")
    chart = re.search(r"--version (\d+\.\d+\.\d+)", VALUES.read_text(encoding="utf-8"))
    if not version or f"dagster=={'${DAGSTER_VERSION}'}" not in runs.replace('"', ""):
        problems.append("Dagster is not pinned to ARG DAGSTER_VERSION")
    elif not chart or chart.group(1) != version:
        problems.append(f"Dagster {version} is not the chart version of values.yaml")
    elif version.split(".")[:2] != dg.__version__.split(".")[:2]:
        problems.append(f"Dagster {version} is not the {dg.__version__} minor release this project is tested with")
    return problems


def test_dockerfile_builds_the_run_worker_image(tmp_path):
    assert dockerfile_problems(DOCKERFILE.read_text(encoding="utf-8"), tmp_path) == []


@pytest.mark.parametrize(
    "old, new",
    [
        ("FROM python:3.11-slim", "FROM python:3.12-slim"),
        (".[s3,postgres,k8s]", ".[s3,postgres]"),
        (".[s3,postgres,k8s]", ".[s3,postgres,k8s,kubernetes]"),
        ("ARG DAGSTER_VERSION=1.13.27", "ARG DAGSTER_VERSION=1.12.0"),
        ('"dagster==${DAGSTER_VERSION}"', "dagster"),
        ("COPY graphrag_pipeline ./graphrag_pipeline", "COPY graphrag ./graphrag"),
    ],
    ids=["python", "missing-extra", "unknown-extra", "version", "unpinned", "copy"],
)
def test_broken_dockerfile_is_rejected(old, new, tmp_path):
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert old in text
    assert dockerfile_problems(text.replace(old, new), tmp_path)
