"""`graphrag-pipeline`: build the index through Dagster, inspect it, query it, export the graph."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from pathlib import Path

from graphrag_pipeline import interrupts, progress
from graphrag_pipeline.settings import METHODS, PROJECT_ROOT, default_home
from graphrag_pipeline.storage.layout import Paths

_REMOTE: dict = {}  # a home on object storage: "sync" (its RemoteHome), "ephemeral" (a scratch to remove at the end)


def _home_of(args: argparse.Namespace) -> Path | str:
    """`--home`, else GRAPHRAG_HOME: a folder, or the URL of a home on object storage."""
    from graphrag_pipeline.storage.remote import is_remote, normalize_url

    given = getattr(args, "home", None)
    if not given:
        return default_home()
    if is_remote(given):
        try:
            return normalize_url(given)
        except ValueError as exc:
            raise SystemExit(f"error: --home {given}: {exc}") from None
    return Path(given).expanduser().resolve()


def _local_home(home: Path | str) -> Path:
    """The folder the commands work on: the home, or a remote home's working copy (GRAPHRAG_SCRATCH),
    whose RemoteHome this process keeps in _REMOTE for its pulls and pushes."""
    if isinstance(home, Path):
        _REMOTE.clear()
        return home
    from graphrag_pipeline.settings import EPHEMERAL, setting
    from graphrag_pipeline.storage.remote import RemoteHome, ephemeral_scratch

    sync = _REMOTE.get("sync")
    if sync is not None and sync.url == home:
        return sync.scratch
    scratch = setting("GRAPHRAG_SCRATCH")
    _REMOTE.clear()
    if scratch == EPHEMERAL:
        scratch = _REMOTE["ephemeral"] = ephemeral_scratch()
    _REMOTE["sync"] = RemoteHome(home, scratch)
    return scratch


def _remote_pull(only: tuple[str, ...] | None = None, quiet: bool = False) -> None:
    sync = _REMOTE.get("sync")
    if sync is not None:
        if not quiet:
            print(f"home {sync.url} (working copy {sync.scratch})", file=sys.stderr)
        sync.pull(only)


def _remote_push() -> None:
    sync = _REMOTE.get("sync")
    if sync is not None:
        sync.push()


def _prepare_environment(args: argparse.Namespace) -> Paths:
    """Settle GRAPHRAG_HOME and the Dagster instance (DAGSTER_HOME) before Dagster loads."""
    home_setting = _home_of(args)
    os.environ["GRAPHRAG_HOME"] = str(home_setting)
    home = _local_home(home_setting)
    if getattr(args, "corpus", None):
        corpus = Path(args.corpus).expanduser().resolve()
        if not corpus.is_dir():
            raise SystemExit(f"error: corpus directory not found: {corpus}")
        os.environ["GRAPHRAG_CORPUS"] = str(corpus)
    if getattr(args, "method", None):
        os.environ["GRAPHRAG_METHOD"] = args.method
    paths = Paths(home).ensure()
    try:
        prepare_dagster_home(paths)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    return paths


PRIVATE_INSTANCE = "private"  # the source of a home's own instance, $GRAPHRAG_HOME/dagster
_CHOSEN_INSTANCE: dict[str, str] = {}  # the instance folder this process chose last ("path"), and why ("source")


def resolve_dagster_home(paths: Paths, env: dict | None = None) -> tuple[Path, str]:
    """The Dagster instance folder a build of ``paths`` uses, and which setting chose it:

    1. GRAPHRAG_DAGSTER_HOME, the setting of this project (wins: it is never set by accident);
    2. an exported DAGSTER_HOME (the instance the user's daemon and UI already use); one this
       process set itself for an earlier home does not count;
    3. ``$GRAPHRAG_HOME/dagster``, a private SQLite instance of the home (the default).
    """
    from graphrag_pipeline.settings import raw, setting

    env = os.environ if env is None else env
    if raw("GRAPHRAG_DAGSTER_HOME", env):
        return setting("GRAPHRAG_DAGSTER_HOME", env), "GRAPHRAG_DAGSTER_HOME"
    exported = (env.get("DAGSTER_HOME") or "").strip()
    set_here = _CHOSEN_INSTANCE.get("source") == PRIVATE_INSTANCE and exported == _CHOSEN_INSTANCE.get("path")
    if exported and not set_here:
        return Path(exported).expanduser().resolve(), "DAGSTER_HOME"
    return paths.dagster_home, PRIVATE_INSTANCE


def prepare_dagster_home(paths: Paths) -> tuple[Path, str]:
    """Make the chosen instance folder DAGSTER_HOME of this process; return it and its source.

    Only the home's private instance gets the project's dagster.yaml (copied again when it
    changed); an instance the user chose is used as it is and its dagster.yaml is never written
    (without one Dagster uses SQLite files in that folder)."""
    dagster_home, source = resolve_dagster_home(paths)
    if source == PRIVATE_INSTANCE:
        dagster_home.mkdir(parents=True, exist_ok=True)
        project_yaml = PROJECT_ROOT / "dagster.yaml"
        target = dagster_home / "dagster.yaml"
        if project_yaml.exists() and (not target.exists() or target.read_bytes() != project_yaml.read_bytes()):
            shutil.copyfile(project_yaml, target)
        elif not target.exists():
            target.write_text("telemetry:\n  enabled: false\n")
    elif not dagster_home.is_dir():
        raise ValueError(f"{source}={dagster_home} is not a folder (a Dagster instance folder, with its dagster.yaml)")
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    _CHOSEN_INSTANCE.update(path=str(dagster_home), source=source)
    return dagster_home, source


def describe_instance(instance) -> str:
    """Which instance this process uses, for the first lines of a build (no credentials: the
    storage's kind, never its URL)."""
    source = _CHOSEN_INSTANCE.get("source", "DAGSTER_HOME")
    where = "the home's private instance" if source == PRIVATE_INSTANCE else f"from {source}"
    kind = type(instance.run_storage).__name__.removesuffix("RunStorage") or "unknown"
    return f"Dagster instance {instance.root_directory} ({where}; {kind} storage)"


def _say(msg: str) -> None:
    print(msg, flush=True)


# -- build ----------------------------------------------------------------------------------------
EXIT_BUSY = 75  # EX_TEMPFAIL: another build holds the home
_DAGSTER_LOG_LEVEL = {"level": "WARNING"}  # `build -v`: INFO, Dagster's log lines of every step


class EndpointDown(Exception):
    """The LLM endpoint stopped answering (its circuit breaker opened): the build stops there."""


class BudgetExceeded(Exception):
    """The next LLM call could pass GRAPHRAG_MAX_COST_USD: the build stops there."""


# the estimate made when this build started, as tags of each of its runs (the UI shows them)
_ESTIMATE_TAGS: dict[str, str] = {}


class _SaidByTheCli(logging.Filter):
    """Dagster's console lines that a build without -v leaves out: a failed step's or run's error
    with its stack trace (printed for the step, then again for the run; for the run also when a
    signal stopped it) and the steps skipped after it. `_run_job` names each failed step with its
    error in one line; the trace stays in the run's event log (the Dagster UI) and `build -v`
    prints it. Also the chunks step's warnings about skipped or cut documents: `_run_job` prints
    them from the step's notices, once each (a range's run has them on every partition)."""

    def filter(self, record: logging.LogRecord) -> bool:
        meta = getattr(record, "dagster_meta", None)
        event = meta.get("dagster_event") if isinstance(meta, dict) else None
        kind = getattr(event, "event_type_value", None)
        if kind == "STEP_FAILURE" or (kind == "PIPELINE_FAILURE" and _failed_by_a_step(event)):
            return False
        if kind == "PIPELINE_FAILURE" and interrupts.requested():
            return False  # stopped by a signal: the build says so in one line ("build stopped by SIGINT")
        step = (meta.get("step_key") if isinstance(meta, dict) else None) or ""
        if record.levelno == logging.WARNING and step.endswith("chunks") and event is None:
            return False  # a skipped or cut document: `_run_job` prints the chunks' notices, once each
        return not (record.levelno >= logging.ERROR and str(record.msg).endswith("Not executing."))


def _failed_by_a_step(run_failure) -> bool:
    """Whether a run's failure event (PIPELINE_FAILURE) was caused by a failed step (which the CLI
    names itself), not by the run (an exception outside the steps, a worker lost...)."""
    reason = getattr(getattr(run_failure, "event_specific_data", None), "failure_reason", None)
    return getattr(reason, "value", None) == "STEP_FAILURE"


@contextmanager
def _console_without_failure_traces():
    """Dagster makes its console logger of the current logging class when a run starts: during the
    run, that class carries `_SaidByTheCli` (nothing else is filtered)."""
    base = logging.getLoggerClass()

    class _Console(base):  # type: ignore[misc, valid-type]
        def __init__(self, name, level=logging.NOTSET):
            super().__init__(name, level)
            self.addFilter(_SaidByTheCli())

    logging.setLoggerClass(_Console)
    try:
        yield
    finally:
        logging.setLoggerClass(base)


_CACHE_EARLY_WRITE = 200  # entries new to the plan cache above which it is also written before the runs

_DAGSTER_WRAPPERS = {"DagsterExecutionStepExecutionError", "DagsterUserCodeExecutionError"}


def _run_job(
    defs, instance, name: str, tags: dict | None = None, ops: dict | None = None, started: set | None = None
) -> tuple[bool, list]:
    """Run a job in this process; False when any step or any asset check failed. A stop asked for
    during the run (SIGINT/SIGTERM) marks it canceled and raises interrupts.Stop. `started`, when
    given, receives the keys of the steps that started (a step skipped after a failure upstream did not)."""
    import dagster as dg

    from graphrag_pipeline.defs.instance_ops import cli_run_tags
    from graphrag_pipeline.defs.partitions import listing_memo

    job = defs.resolve_job_def(name)
    run_config = {"loggers": {"console": {"config": {"log_level": _DAGSTER_LOG_LEVEL["level"]}}}}
    if ops:
        run_config["ops"] = ops
    _remote_push()  # what the steps read (state files, the home record) is in the bucket before they start
    quiet = _DAGSTER_LOG_LEVEL["level"] != "INFO"
    with _console_without_failure_traces() if quiet else nullcontext(), listing_memo(instance):
        result = job.execute_in_process(
            instance=instance,
            tags={**(tags or {}), **cli_run_tags(), **_ESTIMATE_TAGS},
            raise_on_error=False,
            run_config=run_config,
        )
    if _REMOTE:
        _remote_pull(quiet=True)  # what the steps wrote, wherever they ran
    signo = interrupts.requested()
    if signo:
        from graphrag_pipeline.llm.client import cancel_all_clients

        cancel_all_clients()
        run = instance.get_run_by_id(result.run_id)
        if run is not None:
            instance.report_run_canceled(run, message=f"Stopped by {signal.Signals(signo).name}.")
            instance.event_log_storage.free_concurrency_slots_for_run(result.run_id)
        raise interrupts.Stop(signo)
    ok = result.success
    if started is not None:
        started.update(ev.step_key for ev in result.all_events if ev.event_type == dg.DagsterEventType.STEP_START)
    events = result.get_asset_materialization_events()
    _tag_usage(instance, result.run_id, events)
    # a run over a range of partitions records its notices on each partition's materialization: once each
    notices = list(
        {
            (n["document"], n["note"]): n
            for ev in events
            if "notices" in ev.event_specific_data.materialization.metadata
            for n in ev.event_specific_data.materialization.metadata["notices"].value
        }.values()
    )
    from graphrag_pipeline.ingest.document_chunks import document_note

    for n in notices[:20]:
        _say(f"  warning: {document_note(n['document'], n['note'])}")
    if len(notices) > 20:
        _say(f"  warning: ... and {len(notices) - 20} more skipped or truncated documents (see the chunks metadata)")
    causes: dict[str, str] = {}
    for ev in result.all_events:
        if ev.event_type in (dg.DagsterEventType.STEP_UP_FOR_RETRY, dg.DagsterEventType.STEP_FAILURE):
            err = getattr(ev.event_specific_data, "error", None)
            # to the error the step raised: below a retry's wrapper, and below Dagster's "Error
            # occurred while executing op" (a dg.Failure has none: its message is the user's)
            while err is not None and err.cause is not None and "max_retries" not in (err.cause.message or ""):
                if ev.event_type == dg.DagsterEventType.STEP_UP_FOR_RETRY or err.cls_name in _DAGSTER_WRAPPERS:
                    err = err.cause
                else:
                    break
            message = (err.message or "").strip() if err else ""
            if message and "Exceeded max_retries" not in message:
                causes[ev.step_key] = message
    failures = result.get_step_failure_events()
    for step in failures:
        err = step.event_specific_data.error
        message = _plain_error(causes.get(step.step_key) or (err.message.strip() if err else "unknown error"))
        _say(f"  FAILED {step.step_key}: {message}")
        if quiet and step is failures[-1]:
            _say(f"  (stack traces: run {result.run_id} in the Dagster UI, or `graphrag-pipeline build -v`)")
        failure = getattr(step.event_specific_data, "user_failure_data", None)
        if failure is not None and (failure.metadata or {}).get("budget_exceeded"):
            raise BudgetExceeded(message)
        if failure is not None and (failure.metadata or {}).get("endpoint_down"):
            raise EndpointDown(message)
    if not result.success and not failures:
        # the run itself failed (not one of its steps): its error is said here, Dagster's line kept
        for ev in result.all_events:
            if ev.event_type == dg.DagsterEventType.RUN_FAILURE and not _failed_by_a_step(ev):
                err = getattr(ev.event_specific_data, "error", None)
                reason = (err.message.strip() if err and err.message else "") or ev.message or "unknown error"
                _say(f"  FAILED run {result.run_id}: {_plain_error(reason)}")
    passed = []
    for ev in result.all_events:
        if ev.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
            data = ev.event_specific_data
            if data.passed:
                passed.append(data.check_name)
            else:
                ok = False
                _say(
                    f"  check FAILED: {data.check_name} on {data.asset_key.to_user_string()}: "
                    + ", ".join(f"{k}={v.value}" for k, v in data.metadata.items())
                )
    if passed:
        _say(f"  checks passed: {', '.join(passed)}")
    return ok, events


def _tag_usage(instance, run_id: str, events: list) -> None:
    """The run's LLM usage as run tags (the UI's run list shows them)."""
    from graphrag_pipeline.defs.llm_step import tag_run_with_usage

    tag_run_with_usage(instance, run_id, [ev.event_specific_data.materialization for ev in events])


def _plain_error(message: str) -> str:
    """A step's error as a person should read it: a full disk or a read-only folder said as such."""
    from graphrag_pipeline.settings import raw

    # a step's own failure (dg.Failure) says what happened; the class's module path adds nothing
    message = re.sub(r"^dagster\.[\w.]*\.Failure: ", "", message)
    low = message.lower()
    home = raw("GRAPHRAG_HOME") or "the home"
    if "no space left" in low or "disk is full" in low:
        return f"disk full (no space left on the device of {home}): {message}"
    if "disk i/o error" in low:
        return f"the disk of {home} failed a write (most often: it is full): {message}"
    if "read-only file system" in low or "permission denied" in low:
        return f"cannot write to {home} (read-only or not permitted): {message}"
    return message


# what the progress line of a run that merges, resolves and clusters shows
_GRAPH_SHOWN = ("entities", "relations", "merged_pairs", "communities", "communities_changed", "llm_truncated_answers")
_INDEX_SHOWN = ("entities", "relations", "community_reports", "chunks", "es_written", "es_deleted")  # of a publish


def _outcome(success: bool, events: list, keys: tuple[str, ...]) -> str:
    """A run's summary line: what it materialized; after a failure (named on the lines above) what
    finished before it, never read as the list of what failed."""
    described = _describe(events, keys)
    if success:
        return f"  done: {described}"
    return (
        f"  FAILED (finished before the failure: {described})"
        if described
        else "  FAILED (no step finished; what a failed step finished is stored)"
    )


def _describe(events: list, keys: tuple[str, ...]) -> str:
    seen = {}
    for ev in events:
        mat = ev.event_specific_data.materialization
        name = mat.asset_key.to_user_string()
        if name in seen:
            continue
        bits = [f"{k}={mat.metadata[k].value}" for k in keys if k in mat.metadata]
        seen[name] = f"{name}" + (f" ({', '.join(bits)})" if bits else "")
    return "; ".join(seen.values())


def _latest_timestamp(instance, asset: str) -> float | None:
    import dagster as dg

    ev = instance.get_latest_materialization_event(dg.AssetKey.from_user_string(asset))
    return ev.timestamp if ev else None


def downstream_lineage(defs) -> dict[str, list[str]]:
    """The unpartitioned assets downstream of the document partitions, in dependency order, each
    with its parents: read from the asset graph of the Definitions. Elasticsearch is left out: it is
    compared with the cluster itself (_elasticsearch_stale)."""
    from graphrag_pipeline.defs.partitions import documents_partitions

    graph = defs.resolve_asset_graph()
    below, todo = (
        set(),
        [k for k in graph.materializable_asset_keys if graph.get(k).partitions_def == documents_partitions],
    )
    while todo:
        for child in graph.get(todo.pop()).child_keys:
            if child not in below:
                below.add(child)
                todo.append(child)
    return {
        key.to_user_string(): sorted(p.to_user_string() for p in graph.get(key).parent_keys)
        for key in graph.toposorted_asset_keys
        if key in below and graph.get(key).partitions_def is None and key.path[-1] != "elasticsearch_index"
    }


def _downstream_stale(instance, defs) -> bool:
    for asset, parents in downstream_lineage(defs).items():
        ts = _latest_timestamp(instance, asset)
        if ts is None:
            return True
        for parent in parents:
            pts = _latest_timestamp(instance, parent)
            if pts is not None and pts > ts:
                return True
    return False


def _downstream_settings_changed(instance, defs) -> list[str]:
    """The unpartitioned assets downstream of the documents whose last materialization was written
    under another code version (their settings: the maximum cluster size, a summary, resolution or
    embedding model), as `asset (written -> now)`. Their next run would apply the new settings
    anyway, at the next change of any document: a build applies them now instead."""
    import dagster as dg
    from dagster._core.definitions.data_version import CODE_VERSION_TAG

    graph = defs.resolve_asset_graph()
    out = []
    for asset in downstream_lineage(defs):
        key = dg.AssetKey.from_user_string(asset)
        ev = instance.get_latest_materialization_event(key)
        written = (ev.asset_materialization.tags or {}).get(CODE_VERSION_TAG) if ev else None
        now = graph.get(key).code_version
        if written and now and written != now:
            out.append(f"{key.path[-1]} ({written} -> {now})")
    return out


def _reports_of_another_method(paths: Paths, store, method: str, keys: list[str], todo: list[str]) -> list[str]:
    """`todo` and the report partitions whose stored report another kind of writer wrote
    (extractive vs LLM), when the home's method changed (`--switch-method`): a community whose
    content survived the switch kept its report, so a home switched from `fast` kept extractive
    reports for good. Looked at only while the method differs from the one recorded when no report
    outside `todo` was of the other kind (`state/reports-method.json`): turning
    GRAPHRAG_LLM_REPORTS on or off under the same method, or a new model, rewrites nothing by
    itself (paid calls: the UI's decision, as for stale partitions)."""
    from graphrag_pipeline.settings import setting
    from graphrag_pipeline.storage.files import read_json, write_json

    marker = paths.state_dir / "reports-method.json"
    if read_json(marker, {}).get("method") == method:
        return todo
    kind = "llm" if method != "fast" and setting("GRAPHRAG_LLM_REPORTS") else "extractive"
    pending = set(todo)
    # an LLM report that fell back to the extractive text ("extractive-fallback") is of the LLM's kind
    other = [
        k
        for k in keys
        if k not in pending
        and (r := store.read_report(k)) is not None
        and ("extractive" if r.generator == "extractive" else "llm") != kind
    ]
    if other:
        _say(f"method {method}: {len(other)} reports written by another kind of writer are written again ({kind})")
        marker.unlink(missing_ok=True)  # looked at again by the next build (this one may not finish)
    else:  # (the partitions in `todo` are written by this method's writer, or kept only if written that way)
        write_json({"method": method}, marker)
    pending.update(other)
    return [k for k in keys if k in pending]


def _elasticsearch_stale(paths: Paths, instance, defs) -> bool:
    """With GRAPHRAG_ES_URL set: is Elasticsearch behind its inputs? (It has no index, a sync of it
    was interrupted, it was not configured when last built, or an input changed since.)"""
    from graphrag_pipeline.index.es_writer import EsConfig

    cfg = EsConfig.from_env(paths.home)
    if cfg is None or not paths.index_file.exists():
        return False
    try:
        from graphrag_pipeline.index.es_reader import EsIndex

        with EsIndex(cfg) as remote:
            if not remote.meta.get("es_state_id"):
                return True
    except (FileNotFoundError, RuntimeError):
        return True
    graph = defs.resolve_asset_graph()
    key = next(k for k in graph.materializable_asset_keys if k.path[-1] == "elasticsearch_index")
    ev = instance.get_latest_materialization_event(key)
    if ev is None or "skipped" in ev.asset_materialization.metadata:
        return True
    # an input written after Elasticsearch's last sync (any partition of a partitioned one)
    return any(
        (latest := instance.get_latest_materialization_event(parent)) is not None and latest.timestamp > ev.timestamp
        for parent in graph.get(key).parent_keys
    )


def _code_version_stale(args: argparse.Namespace, paths: Paths, instance, defs, plan) -> None:
    """Documents built under other settings (their code version changed: model, prompts, chunking)
    are never processed again by themselves: a new model or prompt means paid LLM calls. Say so
    once, with how to refresh them; with `--refresh stale`, add them to the plan's work.

    Asking the instance reads the latest materialization of every document (a second at 50,000):
    when the last check found none stale under the same code versions, every materialization since
    was written under them too, and the check is skipped (`state/code-versions-checked.json`)."""
    from graphrag_pipeline.defs.partitions import documents_partitions
    from graphrag_pipeline.defs.staleness import document_code_versions, stale_by_code_version
    from graphrag_pipeline.storage.files import read_json, write_json

    marker = paths.state_dir / "code-versions-checked.json"
    versions = document_code_versions(defs)
    refresh = getattr(args, "refresh", None) == "stale"
    if not refresh and read_json(marker, {}).get("none_stale_under") == versions:
        return
    keys = instance.get_dynamic_partitions(documents_partitions.name)
    by_asset = stale_by_code_version(instance, defs, keys)
    stale = sorted({k for partitions in by_asset.values() for k in partitions} - set(plan.stale))
    if not stale:
        if not any(by_asset.values()):
            write_json({"none_stale_under": versions}, marker)
        return
    marker.unlink(missing_ok=True)
    assets = ", ".join(f"{name} {len(partitions)}" for name, partitions in by_asset.items() if partitions)
    if refresh:
        wanted = set(plan.stale) | set(stale)
        plan.stale = [k for k in plan.order if k in wanted]
        _say(f"refresh: {len(stale)} documents built under other settings are processed again ({assets})")
        return
    _say(
        f"note: {len(stale)} documents were built under other settings (code version changed: {assets} "
        "partitions; a new model, prompt or chunking); they are kept as they are. "
        "`graphrag-pipeline build --refresh stale` processes them again (new LLM calls are paid), "
        "or backfill the stale partitions from the Dagster UI."
    )


_FAILED_CHUNKS = "failed-chunks.json"  # under state/


_FALLBACK_REPORTS = "fallback-reports.json"


def _memo_by_signature(marker: Path, field: str, signatures: dict[str, str], read_one) -> dict:
    """Per key, `read_one(key)` (kept when not empty), remembered in `marker` (under `field`) with the
    key's file signature when it was read: only keys whose files changed since are read again."""
    from graphrag_pipeline.storage.files import read_json, write_json

    try:
        known = read_json(marker, None)
    except (OSError, ValueError):  # DamagedFileError is both
        known = None
    known = known if isinstance(known, dict) else {}
    seen = known.get("signatures") if isinstance(known.get("signatures"), dict) else {}
    before = known.get(field) if isinstance(known.get(field), dict) else {}
    out = {}
    for key, signature in signatures.items():
        value = before.get(key) if seen.get(key) == signature else read_one(key)
        if value:
            out[key] = value
    state = {"signatures": signatures, field: out}
    if state != known:
        write_json(state, marker, compact=True)
    return out


def _chunk_problems(store, keys: list[str]) -> dict[str, dict]:
    """Documents with chunks whose answer could not be used (unparsable after its retries) or was
    cut at the endpoint's output limit -> {"failed": how many, "cut": the cache keys of the cut
    answers}. Kept in state/failed-chunks.json with the signature of each document's subgraph
    files when its record was read: only documents whose files changed since (extracted by a
    build, the sensors' runs or a backfill from the UI) are read again; a record that cannot be
    read counts none (the build repairs the document)."""

    def problems(key: str) -> dict:
        try:
            info = store.subgraph_info(key) or {}
        except (OSError, ValueError):
            return {}
        # (what a damaged or hand-edited record holds in place of lists and strings is left out)
        info = info if isinstance(info, dict) else {}
        records = info.get("failed_chunks") if isinstance(info.get("failed_chunks"), list) else []
        ids = sorted({c["chunk_id"] for c in records if isinstance(c, dict) and isinstance(c.get("chunk_id"), str)})
        cut = [
            a
            for c in (info.get("cut_chunks") if isinstance(info.get("cut_chunks"), list) else [])
            if isinstance(c, dict) and isinstance(c.get("answers"), list)
            for a in c["answers"]
            if isinstance(a, str) and a
        ]
        return {"failed": len(records), "failed_ids": ids, "cut": cut} if records or cut else {}

    marker = store.paths.state_dir / _FAILED_CHUNKS
    found = _memo_by_signature(marker, "chunk_problems", store.subgraph_signatures(keys), problems)
    # (the entries remembered in the marker are read as they are: a damaged one is left out the same way)
    return {k: clean for k, v in found.items() if (clean := _sane_problems(v))}


def _sane_problems(v: object) -> dict:
    """A document's entry of _chunk_problems with anything but a count, strings and lists of them left out."""
    if not isinstance(v, dict):
        return {}
    failed = v.get("failed")
    failed = failed if isinstance(failed, int) and not isinstance(failed, bool) and failed > 0 else 0
    ids = v.get("failed_ids")
    ids = sorted({x for x in ids if isinstance(x, str)}) if isinstance(ids, list) else []
    cut = [a for a in v["cut"] if isinstance(a, str) and a] if isinstance(v.get("cut"), list) else []
    return {"failed": failed, "failed_ids": ids, "cut": cut} if failed or cut else {}


def _unique_failed(found: dict[str, dict], keys) -> int:
    """How many chunks failed among documents `keys`: a chunk two documents have (extracted once for
    both, recorded by each) once. A record without the chunks' ids (kept by an older version in
    state/failed-chunks.json) counts its documents' failures as they are."""
    ids: set[str] = set()
    unnamed = 0
    for key in keys:
        v = found.get(key) or {}
        named = v.get("failed_ids")
        if isinstance(named, list) and len(named) == (v.get("failed") or 0) and all(isinstance(x, str) for x in named):
            ids.update(named)
        else:
            unnamed += v.get("failed") or 0
    return len(ids) + unnamed


def _count(n: int, noun: str) -> str:
    """ "1 document", "2 documents"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _record_own_publish(paths, build_record: dict) -> None:
    """When this build ran a job that publishes the index and the index is newer than the build's start,
    say when it was published in state/last-build.json before the work
    that follows them (the corpus cache, the failed chunks' census): `verify` then tells a build
    stopped in between from one superseded by a later index (storage.verify.currency_problems)."""
    from graphrag_pipeline.index.duckdb_writer import read_meta
    from graphrag_pipeline.storage.files import write_json
    from graphrag_pipeline.storage.verify import LAST_BUILD

    try:
        published = (read_meta(paths.index_file) or {}).get("built_at")
    except interrupts.Stop:
        raise  # (a second Ctrl-C)
    except Exception:  # noqa: BLE001 - an unreadable index is verify's to say; the record stays as it was
        return
    if isinstance(published, (int, float)) and published >= build_record["started_at"]:
        build_record["published_at"] = published
        try:
            write_json(build_record, paths.state_dir / LAST_BUILD)
        except OSError:  # (called also on the way out of a stop or an error: that one is said, not this)
            pass


def _refresh_failed(args: argparse.Namespace, store, plan) -> None:
    """`--refresh failed`: the documents with failed chunks, or with chunks read from answers cut at
    the endpoint's output limit, are extracted again. The answers kept in the LLM cache are read
    first (a failed one that a newer parser reads costs no call); the cut ones are retired from it
    first, so they are asked again (with the endpoint's limit raised, they come back whole). Without
    it none is asked again by itself (every later build would pay for the same failing prompts):
    the end of each build says how many there are (_say_failed_chunks)."""
    if getattr(args, "refresh", None) != "failed":
        return
    found = _chunk_problems(store, plan.order)
    # every document with problems, also one already to be extracted again (edited): its unchanged
    # chunks would read their cut answers from the cache again
    mine = [k for k in plan.order if k in found]
    if not mine:
        _say("refresh: no document has failed chunks or cut answers")
        return
    cut = [a for k in mine for a in found[k].get("cut") or [] if a]
    if cut:
        from graphrag_pipeline.llm.cache import open_cache

        # an entry without text is a miss for the client (and for the cost estimate): asked again
        open_cache(store.paths, "llm").put_many(dict.fromkeys(cut, {"retired": "cut at the endpoint's output limit"}))
    wanted = set(plan.stale) | set(mine)
    plan.stale = [k for k in plan.order if k in wanted]
    failed = _unique_failed(found, mine)
    cut_answers = len(set(cut))  # (an answer shared by documents, for a chunk they both have, once)
    what = [_count(n, noun) for n, noun in ((failed, "failed chunk"), (cut_answers, "cut answer")) if n]
    _say(f"refresh: {_count(len(mine), 'document')} with {' and '.join(what)} extracted again")


def _fallback_reports(store, keys: list[str]) -> list[str]:
    """The report partitions whose report is the extractive text written because the model's answer
    was unusable (empty, unparsable) - not asked again by themselves, as failed chunks are not.
    Kept in state/fallback-reports.json with each report file's size and mtime when it was read:
    only reports written since are read again."""

    def fallback(key: str) -> bool:
        try:
            report = store.read_report(key)
        except Exception:  # noqa: BLE001 - a damaged report is repaired by the build (downstream_problems)
            return False
        return report is not None and report.generator == "extractive-fallback"

    signatures = {}
    for key in keys:
        try:
            st = os.stat(store.paths.reports_dir / f"{key}.json")
        except OSError:
            continue  # missing: written by the build (or repaired)
        signatures[key] = f"{st.st_size}:{st.st_mtime_ns}"
    marker = store.paths.state_dir / _FALLBACK_REPORTS
    return list(_memo_by_signature(marker, "fallback", signatures, fallback))


def _say_fallback_reports(store, keys: list[str]) -> None:
    fallback = _fallback_reports(store, keys)
    if fallback:
        _say(
            f"note: {_count(len(fallback), 'community report')} of {len(keys)} written without the model (its answers "
            f"were unusable; e.g. {fallback[0]}): `graphrag-pipeline build --refresh failed` asks again"
        )


def _nothing_extracted(store, keys: list[str], failed: dict[str, int]) -> bool:
    """True when every chunk of every document failed (the model answered nothing usable to any
    extraction prompt): the graph is empty for want of a working model, not of content."""
    if not keys or len(failed) < len(keys):
        return False
    for key in keys:
        try:
            chunks = (store.chunk_info(key) or {}).get("chunks")
        except (OSError, ValueError):
            return False
        if not isinstance(chunks, int) or failed.get(key, 0) < chunks:
            return False
    return True


def _say_failed_chunks(store, plan) -> bool:
    """The end-of-build notes on failed chunks and on answers cut at the endpoint's output limit;
    False (the build fails) when no chunk at all could be extracted."""
    found = _chunk_problems(store, plan.order)
    failed = {k: v["failed"] for k, v in found.items() if v.get("failed")}
    chunks = _count(_unique_failed(found, failed), "chunk")  # (one that documents share once)
    cut = {k: len(v["cut"]) for k, v in found.items() if v.get("cut")}
    answers = len({a for v in found.values() for a in v.get("cut") or []})  # (one shared by documents once)
    if cut:
        _say(
            f"note: {_count(answers, 'answer')} to the extraction prompts of {_count(len(cut), 'document')} "
            f"{'was' if answers == 1 else 'were'} cut at the endpoint's output limit (finish_reason=length; "
            f"e.g. {min(cut)}) and read as far as they go: raise the server's maximum output tokens, then "
            "`graphrag-pipeline build --refresh failed` asks them again"
        )
    if not failed:
        return True
    if _nothing_extracted(store, plan.order, failed):
        print(
            f"error: no extraction at all: the model's answers to all {chunks} of "
            f"{_count(len(failed), 'document')} could not be used (empty or unparsable; e.g. {min(failed)}), so the "
            "graph is empty. Check the model (GRAPHRAG_LLM_MODEL) and the endpoint (OPENAI_BASE_URL), then "
            "`graphrag-pipeline build --refresh failed`",
            file=sys.stderr,
        )
        return False
    _say(
        f"note: no extraction for {chunks} of {_count(len(failed), 'document')}: "
        f"the model's answers could not be parsed (e.g. {min(failed)}); "
        "`graphrag-pipeline build --refresh failed` asks again"
    )
    return True


def _settings_problems() -> list[str]:
    from graphrag_pipeline.settings_check import check_settings

    return check_settings(os.environ)


def _refuse_bad_settings() -> bool:
    """Print every settings problem (`error: ...`); True when there was one (the command exits 2)."""
    problems = _settings_problems()
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    return bool(problems)


def cmd_build(args: argparse.Namespace) -> int:
    if args.estimate:
        return cmd_estimate(args)
    paths = _prepare_environment(args)
    if _refuse_bad_settings():
        return 2
    if _REMOTE:
        _say(f"home {_REMOTE['sync'].url} on object storage; working copy {paths.home}")
        if _CHOSEN_INSTANCE.get("source") == PRIVATE_INSTANCE and "ephemeral" in _REMOTE:
            _say(
                "note: GRAPHRAG_SCRATCH=ephemeral with the home's private Dagster instance: the instance is removed "
                "with the working copy when the build ends; export DAGSTER_HOME (e.g. a Postgres instance) to keep it"
            )
        _remote_pull(quiet=True)
    from graphrag_pipeline.storage.home import BuildLock, HomeBusy

    lock = BuildLock(paths.home)
    try:
        lock.acquire(
            wait=args.wait,
            on_wait=lambda h: _say(f"waiting for the build running on this home (pid {h.get('pid')}) to finish ..."),
        )
    except HomeBusy as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BUSY
    prefetch = None
    try:
        prefetch = _start_survey(args, paths)  # beside the imports and the instance's set-up below
        interrupts.install()
        from graphrag_pipeline.defs.instance_ops import install_sleeping_slot_wait

        install_sleeping_slot_wait(say=_say)  # a step waiting for a pool slot sleeps and can be stopped
        _DAGSTER_LOG_LEVEL["level"] = "INFO" if args.verbose else "WARNING"
        from graphrag_pipeline.cli_progress import BuildProgress
        from graphrag_pipeline.settings import setting
        from graphrag_pipeline.storage.files import freeing_replaced_files_later, remembering
        from graphrag_pipeline.storage.store import sharing_doc_stats

        try:
            # the runs execute in this process: a stage reads the graph an earlier stage wrote from memory,
            # the merge uses the plan's stats of the documents' files (and the search index a publish
            # replaced is removed while the build goes on)
            with (
                BuildProgress(interval_s=setting("GRAPHRAG_PROGRESS_INTERVAL")),
                remembering(),
                sharing_doc_stats(),
                freeing_replaced_files_later(),
            ):
                return _build(args, paths, prefetch)
        finally:
            _remote_push()  # the CLI's own files (state, the home record): also after a failed build
    except interrupts.Stop as exc:
        from graphrag_pipeline.llm.client import cancel_all_clients

        cancel_all_clients()
        _cancel_own_runs(f"Stopped by {exc}.")
        print(
            f"build stopped by {exc}: what was finished is stored and the published index is unchanged or complete; "
            "run `graphrag-pipeline build` again to continue",
            file=sys.stderr,
            flush=True,
        )
        return 128 + exc.signo
    except BudgetExceeded:
        _budget_stop_message(args, paths)
        return 1
    except EndpointDown as exc:
        # an endpoint refusing the key answers, but no call can succeed: the user must act on the key
        refused = re.search(r"HTTP (401|403)\b", str(exc))
        what = (
            f"the LLM endpoint refused the API key (HTTP {refused.group(1)}: check OPENAI_API_KEY)"
            if refused
            else "the LLM endpoint is failing (no usable answer after its retries)"
        )
        print(
            f"build stopped: {what} (see above). What was finished is stored; the "
            "published index is unchanged. Run `graphrag-pipeline build` again when the endpoint works: it "
            "continues with what is left.",
            file=sys.stderr,
            flush=True,
        )
        return 1
    except OSError as exc:
        from graphrag_pipeline.storage.files import describe_os_error

        print(f"error: {describe_os_error(exc, getattr(exc, 'filename', None) or paths.home)}", file=sys.stderr)
        return 1
    finally:
        interrupts.uninstall()
        if prefetch is not None:
            _close_survey(prefetch, paths)
        lock.release()


def _cancel_own_runs(reason: str) -> None:
    """The runs this build left in progress when a signal stopped it, marked canceled (best effort:
    the next build recovers any that is left)."""
    try:
        import dagster as dg

        from graphrag_pipeline.defs.instance_ops import cancel_own_runs

        cancel_own_runs(dg.DagsterInstance.get(), reason)
    except Exception:  # noqa: BLE001 - the stop is said and the exit code given whatever happens here
        pass


def _start_survey(args: argparse.Namespace, paths: Paths):
    """The corpus survey of this build started in a second process (ingest.plan_prefetch), when the
    home's plan cache says the corpus is large enough for it to matter; None: _build surveys itself."""
    if _REMOTE:
        return None
    from graphrag_pipeline.ingest.plan_prefetch import PREFETCH_MIN_CACHE_BYTES, Prefetch, corpus_cache_path
    from graphrag_pipeline.storage.home import read_home_record

    try:
        if corpus_cache_path(paths.home).stat().st_size < PREFETCH_MIN_CACHE_BYTES:
            return None
        chosen = _chosen_settings(args, read_home_record(paths.home))
    except Exception:  # noqa: BLE001 - SettingsConflict, a bad setting, an unreadable home: _build says what is wrong
        return None
    if not chosen.corpus.is_dir():
        return None
    return Prefetch(chosen.corpus, paths.home, chosen.method, _use_plan_cache(args))  # (never raises)


def _close_survey(prefetch, paths: Paths) -> None:
    """Stop the survey's process if it still runs; a build that ended before it took the survey
    (an error, a stop) removes the temporary files of interrupted writes as it would have at its start."""
    prefetch.close()
    if not prefetch.temps_handled:
        from graphrag_pipeline.storage.files import clean_temp_files

        try:
            _say_removed(clean_temp_files(paths.home))
        except OSError:
            pass  # the next build tries again


def _say_removed(leftovers: list) -> None:
    for leftover in leftovers:
        _say(f"removed a temporary file left by an interrupted build: {leftover}")


def _chosen_settings(args: argparse.Namespace, record):
    """The corpus and method this build uses (storage.home.reconcile_settings; raises SettingsConflict)."""
    from graphrag_pipeline.settings import default_corpus, default_method
    from graphrag_pipeline.storage.home import reconcile_settings

    return reconcile_settings(
        record,
        default_corpus(),
        bool(args.corpus),
        args.method or default_method(),
        bool(args.method),
        switch_corpus=args.switch_corpus,
        switch_method=args.switch_method,
    )


def _use_plan_cache(args: argparse.Namespace) -> bool:
    return not (args.recluster or args.switch_method)


def _build(args: argparse.Namespace, paths: Paths, prefetch=None) -> int:
    from contextlib import ExitStack

    with ExitStack() as held:  # (what the build holds until it returns: the listing of its documents)
        return _build_holding(args, paths, prefetch, held)


def _build_holding(args: argparse.Namespace, paths: Paths, prefetch, held) -> int:
    import dagster as dg

    from graphrag_pipeline.definitions import current_defs
    from graphrag_pipeline.defs.instance_ops import alone_since, recover_dead_runs, wait_for_pool
    from graphrag_pipeline.defs.partitions import (
        asset_key,
        change_partitions,
        community_partitions,
        documents_partitions,
        list_partition_keys_quickly,
        listing_memo,
        loaded_for_current_kb,
        op_name,
    )
    from graphrag_pipeline.graph.mentions import prefetch_graph, prefetch_paths
    from graphrag_pipeline.ingest.corpus_sync import (
        contiguous_batches,
        range_tags,
        refresh_cache,
        remember_output_stats,
        with_partitions,
    )
    from graphrag_pipeline.ingest.plan_prefetch import corpus_cache_path, survey_home
    from graphrag_pipeline.llm.client import forget_endpoint_health
    from graphrag_pipeline.settings import (
        DEFAULT_KB,
        OFFLINE_EMBEDDER,
        knowledge_base,
        setting,
    )
    from graphrag_pipeline.storage.files import TABLES, clean_temp_files, remove_temp_files, write_json
    from graphrag_pipeline.storage.home import SettingsConflict, read_home_record, write_home_record
    from graphrag_pipeline.storage.store import DOC_STATS, Store
    from graphrag_pipeline.storage.verify import LAST_BUILD, downstream_problems, working_file_problems

    forget_endpoint_health()  # an earlier build in this process says nothing about the endpoint now
    started = time.perf_counter()
    args.cost_since = time.time()  # the ledger's rows from here on are this build's
    if prefetch is None:  # (else the second process lists them beside its survey)
        _say_removed(clean_temp_files(paths.home))
    record = read_home_record(paths.home)
    try:
        chosen = _chosen_settings(args, record)
    except SettingsConflict as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    corpus, method = chosen.corpus, chosen.method
    if not corpus.is_dir():
        print(f"error: corpus directory not found: {corpus}", file=sys.stderr)
        return 2
    os.environ["GRAPHRAG_CORPUS"], os.environ["GRAPHRAG_METHOD"] = str(corpus), method  # what the runs read
    problem = loaded_for_current_kb()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    instance = dg.DagsterInstance.get()
    list_partition_keys_quickly(instance)  # the runs in this process list 50,000 documents some 15 times
    _say(f"graphrag-pipeline build: corpus {corpus}, method {method}, home {paths.home}")
    _say(describe_instance(instance) + f"; knowledge base {knowledge_base()}")
    if _CHOSEN_INSTANCE.get("source") != PRIVATE_INSTANCE and knowledge_base() == DEFAULT_KB:
        _say(
            f"note: GRAPHRAG_KB is not set: this home uses the instance's unscoped partition sets "
            f"'{documents_partitions.name}' and '{community_partitions.name}'; give every home that shares this "
            "instance its own GRAPHRAG_KB"
        )
    for note in chosen.notes:
        _say(f"note: {note}")
    for message in recover_dead_runs(instance):
        _say(f"recovered: {message}")

    if not _REMOTE:  # (a remote home's steps pull files into the working copy themselves)
        # the stages use the plan's stats of the documents' files while no other run can have written them
        # (counted from when the survey, in the second process, began its stats)
        since = prefetch.started if prefetch is not None else time.time()
        DOC_STATS.alone = alone_since(instance, datetime.fromtimestamp(since, UTC) - timedelta(seconds=1))
    # the documents listed for the plan are the runs' (listed again after the plan's adds and deletes;
    # another process's changes show with the next build, as they would had it begun a moment earlier)
    held.enter_context(listing_memo(instance))
    existing = instance.get_dynamic_partitions(documents_partitions.name)
    corpus_cache = corpus_cache_path(paths.home)
    store = Store(paths)
    use_cache = _use_plan_cache(args)
    # the whole-corpus outputs are checked (and repaired below) while the survey's process finishes:
    # it reads the corpus and the documents' outputs, these read the graph, index and reports
    repairs = downstream_problems(paths, store, instance.get_dynamic_partitions(community_partitions.name))
    damaged_files = working_file_problems(paths)
    # so is what the instance says of the settings, when the home's record already names this method
    # (the code versions read it: after a switch they are known once the record is written)
    early = None
    if record is not None and record.method == method:
        early_defs = current_defs()
        early = (early_defs, _downstream_settings_changed(instance, early_defs))
    surveyed = prefetch.take(corpus, paths.home, method, use_cache) if prefetch is not None else None
    if surveyed is not None:
        _say_removed(remove_temp_files(surveyed.temps))
        remember_output_stats(store, surveyed.plan.cache, method)  # the stats the second process took
    else:
        if prefetch is not None:
            _say_removed(clean_temp_files(paths.home))
        surveyed = survey_home(corpus, paths.home, method, use_cache)
    if prefetch is not None:
        prefetch.temps_handled = True
    plan = with_partitions(surveyed.plan, existing)
    for err in plan.errors.values():
        _say(f"  warning: cannot read {err}")
    if not plan.states and existing and not args.allow_empty:
        print(
            f"error: the corpus {corpus} has no documents; building would remove all {len(existing)} documents of "
            "this knowledge base. Check the path (an unmounted drive?), or pass --allow-empty to empty it.",
            file=sys.stderr,
        )
        return 2
    model = setting("GRAPHRAG_LLM_MODEL") if method != "fast" else None
    problem = _start_budget(args, paths, corpus, method, plan)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    write_home_record(paths.home, str(corpus), method, model)
    defs = current_defs()  # code versions of these settings and this record (method, model, prompts, chunking)
    change_partitions(instance, documents_partitions, plan.to_add, plan.to_delete)
    # the plan's cache is written once, after the runs (with what the processed documents' outputs
    # say then); before them too when many of its entries are new (many files hashed), so that a
    # build stopped half-way does not hash them again (at 50,000 documents a write is 0.4 s)
    cache_changed = surveyed.cache_changed
    # entries whose file was hashed (or whose outputs were read) this time: what a stop would lose
    if surveyed.fresh > _CACHE_EARLY_WRITE:
        write_json({"corpus": str(corpus), "files": plan.cache}, corpus_cache, compact=True)
    _say(
        f"corpus: {_count(len(plan.states), 'document')}; {len(plan.to_add)} new, {len(plan.to_delete)} removed, "
        f"{len(plan.stale)} to process"
    )
    _code_version_stale(args, paths, instance, defs, plan)
    if method != "fast":
        _refresh_failed(args, store, plan)
    if plan.stale:  # chunking counts tokens: cl100k (0.3 s to load) is read beside the runs' set-up
        import threading

        from graphrag_pipeline.ingest.tokens import encoding

        threading.Thread(target=encoding, name="load-cl100k", daemon=True).start()

    ok = True
    batches = plan.batches(args.batch_size)
    recluster = {op_name("communities"): {"config": {"full_recluster": True}}} if args.recluster else None
    for damaged, problem in damaged_files:
        damaged.unlink(missing_ok=True)  # the graph job's stages rebuild it
        repairs.append(problem)
    for problem in repairs:
        _say(f"repairing: {problem}")
    resettled = early[1] if early is not None and early[0] is defs else _downstream_settings_changed(instance, defs)
    # applied now when that costs no LLM call (fast, offline embedder) or when asked for; otherwise
    # said (a new model means paid calls), and applied with the next change of any document
    free = method == "fast" and setting("GRAPHRAG_EMBEDDING_MODEL") == OFFLINE_EMBEDDER
    apply = bool(resettled) and (free or getattr(args, "refresh", None) == "stale")
    if apply:
        _say(f"settings changed since the last build: {'; '.join(resettled)}: merging, clustering and publishing again")
    elif resettled:
        _say(
            f"note: built under other settings: {'; '.join(resettled)}; `graphrag-pipeline build --refresh stale` "
            "applies them now (new LLM calls may be paid), else the next change of a document does"
        )
    redo_reports = (
        _fallback_reports(store, instance.get_dynamic_partitions(community_partitions.name))
        if method != "fast" and getattr(args, "refresh", None) == "failed"
        else []
    )
    if redo_reports:
        _say(f"refresh: {_count(len(redo_reports), 'community report')} written without the model asked again")
    downstream = (
        plan.changed
        or args.recluster
        or bool(repairs)
        or apply
        or bool(redo_reports)
        or _downstream_stale(instance, defs)
    )
    graph_done = False
    graph_tried = False  # the merge ran in a documents run (and whatever failed after it would fail again)

    def prefetch() -> None:
        """The last build's merged graph and chunk shards, decoded beside the set-up of the run that
        merges (TableMemo.prefetch); not for a scratch home whose steps each pull their own copy."""
        if downstream and "ephemeral" not in _REMOTE:
            prefetch_graph(paths.graph_dir)
            TABLES.prefetch(prefetch_paths(paths.graph_dir))

    # `verify` tells a home whose last build did not finish or failed (storage.verify.currency_problems)
    build_record = {"started_at": time.time()}
    write_json(build_record, paths.state_dir / LAST_BUILD)
    # when this build's runs published the index, said also when a stop or an error ends the build
    # after them (only a run that publishes counts: another process may publish meanwhile)
    publishing = False
    try:
        progress.start("documents", len(plan.stale), "documents", "documents")  # extraction counts them
        for i, batch in enumerate(batches, 1):
            last = i == len(batches)
            job = "corpus_job" if last else "documents_job"  # the last batch also merges, resolves, clusters
            _say(
                f"[documents {i}/{len(batches)}] {_count(len(batch), 'document')}: {batch[0]}"
                + (f" .. {batch[-1]}" if len(batch) > 1 else "")
                + (" (then merge, resolve, cluster)" if last else "")
            )
            wait_for_pool(instance, say=_say, timeout_s=args.wait_timeout)
            if last:
                prefetch()
            ran: set[str] = set()
            success, events = _run_job(defs, instance, job, range_tags(batch), recluster if last else None, ran)
            ok &= success
            graph_done = last and success
            graph_tried = last and op_name("knowledge_graph") in ran
            _say(
                _outcome(
                    success, events, ("documents", "chunks", "skipped", "entity_mentions", "cache_hits", *_GRAPH_SHOWN)
                )
            )
        progress.finish("documents")

        if downstream or not ok:
            # the graph stages run on their own when a failed document kept them from running after the
            # documents (the other documents' work is merged); when they ran and failed, running them
            # again would send the same requests and fail the same way
            if not graph_done and not graph_tried:
                _say("[graph] merging, resolving and clustering")
                prefetch()
                success, events = _run_job(defs, instance, "graph_job", ops=recluster)
                ok &= success
                graph_done = success
                _say(_outcome(success, events, _GRAPH_SHOWN))
            if graph_done:
                all_keys = instance.get_dynamic_partitions(community_partitions.name)
                done = instance.get_materialized_partitions(asset_key("community_reports"))
                present = store.stored_report_ids()
                todo = [k for k in all_keys if k not in done or k not in present]
                todo = _reports_of_another_method(paths, store, method, all_keys, todo)
                if redo_reports:  # `--refresh failed`: rewritten by the model (a fallback is not reused)
                    wanted = set(todo) | set(redo_reports)
                    todo = [k for k in all_keys if k in wanted]
                report_batches = contiguous_batches(all_keys, todo, args.batch_size)
                # after an interrupted run, partitions not marked materialized may have their report stored
                stored = sum(1 for k in todo if k in present)
                kept = f" ({stored} already stored, kept if written the same way)" if stored else ""
                _say(
                    f"[reports + index] {len(todo)} of {len(all_keys)} community reports to write{kept}, "
                    "then publish the index"
                )
                for i, batch in enumerate(report_batches, 1):
                    job = "publish_job" if i == len(report_batches) else "reports_job"
                    wait_for_pool(instance, say=_say, timeout_s=args.wait_timeout)
                    publishing |= job == "publish_job"
                    success, events = _run_job(defs, instance, job, range_tags(batch))
                    ok &= success
                    _say(_outcome(success, events, ("reports", "llm_calls", "llm_truncated_answers", *_INDEX_SHOWN)))
                if not report_batches:
                    publishing = True
                    success, events = _run_job(defs, instance, "index_job")
                    ok &= success
                    _say(_outcome(success, events, (*_INDEX_SHOWN, "es_unchanged", "skipped")))
        elif _elasticsearch_stale(paths, instance, defs):
            _say("[index] Elasticsearch is behind its inputs: syncing it")
            publishing = True
            success, events = _run_job(defs, instance, "index_job")
            ok &= success
            _say(_outcome(success, events, ("es_written", "es_deleted", "es_unchanged")))
        else:
            _say("everything is up to date")
    finally:
        if publishing:
            _record_own_publish(paths, build_record)
    if plan.stale:  # what the processed documents' outputs say now: the next plan need not read them
        write_json({"corpus": str(corpus), "files": refresh_cache(plan, store, method)}, corpus_cache, compact=True)
    elif cache_changed:
        write_json({"corpus": str(corpus), "files": plan.cache}, corpus_cache, compact=True)
    if method != "fast":
        ok &= _say_failed_chunks(store, plan)
        _say_fallback_reports(store, instance.get_dynamic_partitions(community_partitions.name))
    write_json({**build_record, "finished_at": time.time(), "ok": bool(ok)}, paths.state_dir / LAST_BUILD)
    _say(f"build {'finished' if ok else 'FAILED'} in {time.perf_counter() - started:.1f}s" + _build_cost(args, paths))
    return 0 if ok else 1


# -- cost: estimate, budget, what a build spent ---------------------------------------------------------
def cmd_estimate(args: argparse.Namespace) -> int:
    """`build --estimate`: what the build would send to the LLM and cost; no call, nothing written."""
    from graphrag_pipeline.llm.estimate import estimate_home
    from graphrag_pipeline.settings import default_corpus, default_method
    from graphrag_pipeline.storage.home import read_home_record

    paths = _reading_paths(args)
    if _refuse_bad_settings():
        return 2
    record = read_home_record(paths.home) if paths.home.is_dir() else None
    corpus = Path(args.corpus).expanduser().resolve() if args.corpus else None
    if corpus is None:
        corpus = Path(record.corpus) if record else default_corpus()
    method = args.method or (record.method if record and not args.switch_method else None) or default_method()
    if not corpus.is_dir():
        print(f"error: corpus directory not found: {corpus}", file=sys.stderr)
        return 2
    estimate = estimate_home(paths, corpus, method)
    if args.json:
        print(json.dumps(estimate.to_dict()))
    else:
        for line in estimate.lines():
            _say(line)
    return 0


def _start_budget(args, paths: Paths, corpus: Path, method: str, plan) -> str:
    """Start this build's spending account; a problem (a budget at an unknown price) or ""."""
    from graphrag_pipeline.llm import budget
    from graphrag_pipeline.llm.estimate import estimate_home
    from graphrag_pipeline.llm.pg_store import CacheStoreError, cache_target
    from graphrag_pipeline.llm.pricing import configured_pricing
    from graphrag_pipeline.llm.usage import open_ledger
    from graphrag_pipeline.settings import knowledge_base, setting

    limit = setting("GRAPHRAG_MAX_COST_USD")
    try:
        target = cache_target(paths)
        if target is not None:  # reachable before anything runs; the caches' tables exist from here on
            open_ledger(paths)
            _say(
                f"caches and LLM ledger: {target.describe()} (from {target.source}); knowledge base {knowledge_base()}"
            )
        budget.start_build(limit, paths)
    except (CacheStoreError, ValueError) as exc:
        return str(exc)
    args.cost_estimate = None
    _ESTIMATE_TAGS.clear()
    if method == "fast":
        return ""
    pricing = configured_pricing()
    if limit is not None and pricing.price is None:
        return f"GRAPHRAG_MAX_COST_USD={limit:g} is set, but the cost of calls is unknown: {pricing.unknown_reason}"
    # the dry run costs about three times the offline extraction of what is processed, plus reading and
    # clustering every document kept: asked for, not made before every update (the budget needs none)
    if plan.stale and setting("GRAPHRAG_ESTIMATE_ON_BUILD"):
        try:
            estimate = estimate_home(paths, corpus, method, stale=plan.stale, files=plan.files, remember=True)
        except Exception as exc:  # noqa: BLE001 - the estimate informs; it must not stop the build
            _say(f"estimate: not available ({type(exc).__name__}: {exc}); the build goes on")
            return ""
        args.cost_estimate = estimate
        total = estimate.total()
        cost = estimate.cost_usd
        _ESTIMATE_TAGS["graphrag/estimated_llm_calls"] = str(total.calls)
        if cost is not None:
            _ESTIMATE_TAGS["graphrag/estimated_cost_usd"] = f"{cost:.6f}"
        _say(
            f"estimate: {total.calls} LLM calls, {total.prompt_tokens} prompt tokens, "
            + ("cost unknown" if cost is None else f"about ${cost:.4f}")
            + (f" (budget ${limit:g})" if limit is not None else "")
            + f" (dry run {estimate.seconds:.1f}s) - `build --estimate` shows how"
        )
    return ""


def _build_usage(args, paths: Paths) -> dict:
    from graphrag_pipeline.llm.usage import open_ledger

    since = getattr(args, "cost_since", None)
    return open_ledger(paths).by_step_since(since) if since is not None else {}


def _build_cost(args, paths: Paths) -> str:
    """`; LLM: N calls, P + C tokens, $X` for the final line (empty without LLM work); the ratios
    this build measured are kept for the next estimate."""
    from graphrag_pipeline.llm.estimate import profile_entry, write_profile
    from graphrag_pipeline.llm.usage import LLMUsage

    steps = _build_usage(args, paths)
    total = LLMUsage()
    for u in steps.values():
        total.add(u)
    estimate = getattr(args, "cost_estimate", None)
    entry = profile_entry(estimate, steps) if estimate is not None else None
    if entry is not None:
        from graphrag_pipeline.settings import setting

        write_profile(paths.state_dir, os.environ.get("GRAPHRAG_METHOD") or setting("GRAPHRAG_METHOD"), entry)
    if not (total.calls or total.cache_hits):
        return ""
    return (
        f"; LLM: {total.calls} calls ({total.cache_hits} cached), {total.prompt_tokens} prompt + "
        f"{total.completion_tokens} completion tokens, {total.describe_cost()}"
    )


def _budget_stop_message(args, paths: Paths) -> None:
    """The budget stopped the build: say the budget, what was spent and what is left to do."""
    from graphrag_pipeline.llm import budget
    from graphrag_pipeline.llm.estimate import estimate_home
    from graphrag_pipeline.llm.usage import LLMUsage
    from graphrag_pipeline.settings import setting

    spent = LLMUsage()
    for u in _build_usage(args, paths).values():
        spent.add(u)
    limit = budget.current().limit_usd
    left = ""
    try:
        method = os.environ.get("GRAPHRAG_METHOD") or setting("GRAPHRAG_METHOD")
        rest = estimate_home(paths, Path(os.environ["GRAPHRAG_CORPUS"]), method)
        cost = rest.cost_usd
        left = (
            f" Left to do: {rest.documents} documents to process ({rest.base.to_extract} chunks to extract)"
            + (
                ", then the graph, the community reports and the index"
                if rest.documents
                else ", the community reports and the index"
            )
            + (f", about ${cost:.4f} more by the estimate" if cost else "")
            + "."
        )
    except Exception:  # noqa: BLE001 - the stop message must not fail on the estimate
        pass
    print(
        f"build stopped: the LLM budget GRAPHRAG_MAX_COST_USD=${limit:g} would be exceeded; this build spent "
        f"{spent.describe_cost()} on {spent.calls} calls.{left} What was finished is stored and the published "
        "index is unchanged. Run `graphrag-pipeline build` again with a larger budget: it continues with what is "
        "left and pays for nothing twice.",
        file=sys.stderr,
        flush=True,
    )


# -- stats / query / export -----------------------------------------------------------------------
def _reading_paths(args: argparse.Namespace, only: tuple[str, ...] | None = None) -> Paths:
    """The home to read, for `stats` and `query`: nothing is created, copied or opened for writing
    (they work on a read-only home); only this process's environment is set. A home on object
    storage: its working copy, after pulling what the command reads (``only``: these folders)."""
    home = _home_of(args)
    os.environ["GRAPHRAG_HOME"] = str(home)
    local = _local_home(home)
    _remote_pull(only)
    return Paths(local)


def cmd_stats(args: argparse.Namespace) -> int:
    paths = _reading_paths(args, ("index/",))
    from graphrag_pipeline.llm.pg_store import CacheStoreError
    from graphrag_pipeline.llm.usage import read_ledger_totals
    from graphrag_pipeline.query import IndexNotFoundError, IndexUnreadableError, open_index

    stats: dict = {"documents": 0, "chunks": 0, "entities": 0, "relations": 0, "communities": 0, "community_reports": 0}
    try:
        with open_index(paths.home) as index:
            counts = index.counts()
            stats.update(
                {
                    "documents": int(index.meta.get("documents", 0)),
                    "chunks": counts.get("chunks", 0),
                    "entities": counts.get("entities", 0),
                    "relations": counts.get("relations", 0),
                    "communities": int(index.meta.get("communities", 0)),
                    "community_reports": counts.get("community_reports", 0),
                }
            )
    except IndexNotFoundError as exc:
        built = (paths.graph_dir / "communities.parquet").exists()
        if isinstance(exc, IndexUnreadableError) or built:
            # a built home whose index is damaged or gone: the zeros are not its counts
            problem = str(exc) if isinstance(exc, IndexUnreadableError) else f"{exc} (the home has a built graph)"
            stats["error"] = problem
            print(f"error: {problem}; `graphrag-pipeline build` repairs it", file=sys.stderr, flush=True)
        elif not args.json:
            _say(str(exc))
        elif not paths.home.exists():  # a mistyped --home: the zeros below are not this home's
            print(f"warning: no home at {paths.home}: no index to count", file=sys.stderr, flush=True)
    try:
        stats["llm"] = read_ledger_totals(paths).to_dict()
    except (CacheStoreError, ValueError) as exc:  # the message names the database (never the password)
        stats["llm"] = f"unavailable ({exc})"
    except Exception as exc:  # noqa: BLE001 - a damaged or unreadable ledger never fails stats
        stats["llm"] = f"unavailable ({paths.cache_db}: {exc})"
    if args.json:
        print(json.dumps(stats))
    else:
        for k, v in stats.items():
            _say(f"{k:>18}: {_usage_line(v) if isinstance(v, dict) else v}")
    return 1 if "error" in stats else 0


def _usage_line(llm: dict) -> str:
    """The ledger's totals as a line: `12 calls (30 from the cache), 4,500 prompt + 900 completion
    tokens, $0.0123` (with the calls made at an unknown price, or "cost unknown" when all were)."""
    from graphrag_pipeline.llm.usage import LLMUsage

    usage = LLMUsage(**{k: v for k, v in llm.items() if k in LLMUsage.__dataclass_fields__})
    return (
        f"{usage.calls:,} call{'' if usage.calls == 1 else 's'} ({usage.cache_hits:,} from the cache), "
        f"{usage.prompt_tokens:,} prompt + {usage.completion_tokens:,} completion tokens, {usage.describe_cost()}"
    )


def cmd_query(args: argparse.Namespace) -> int:
    paths = _reading_paths(args, ("index/",))
    from graphrag_pipeline.llm.cache import open_cache_read_only
    from graphrag_pipeline.llm.client import LLMClient, LLMError
    from graphrag_pipeline.query import IndexNotFoundError, SearchParams, open_index, query

    params = SearchParams(
        **{f.name: getattr(args, f.name) for f in fields(SearchParams) if getattr(args, f.name, None) is not None}
    )
    try:
        client = LLMClient.from_env()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if client is not None:
        client.resume_hint = "ask again once the endpoint works"
        # answers cached by builds are used when the cache can be read; nothing is written to it
        client.cache, problem = open_cache_read_only(paths, "llm")
        if problem:
            print(f"warning: the LLM cache cannot be read ({problem}); querying without it", file=sys.stderr)
    if args.answer and client is None:
        print(
            "note: no LLM endpoint is set (OPENAI_API_KEY / OPENAI_BASE_URL), so no answer is generated; "
            "the retrieved context is shown instead",
            file=sys.stderr,
        )
    try:
        with open_index(paths.home) as index:
            result = query(index, args.question, args.mode, params, client=client, answer=args.answer)
    except (IndexNotFoundError, ValueError, LLMError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=1))
    else:
        _print_result(result)
    if result.is_empty():
        print(
            f"no results: nothing in the index matches this question in {result.mode} mode "
            f"(exit status {EXIT_NO_RESULTS}); try another mode or lower thresholds",
            file=sys.stderr,
        )
        return EXIT_NO_RESULTS
    return 0


EXIT_NO_RESULTS = 3  # `query` found nothing (no entity, relation, report or chunk)


def _print_result(result) -> None:
    """The result for a terminal: one line per item and one trimmed line of text, sources cited."""
    import unicodedata

    from graphrag_pipeline.query.search import cite

    width = max(40, shutil.get_terminal_size((100, 24)).columns)

    def line(text: str, indent: str = "  ") -> None:
        text = indent + " ".join(text.split())
        cols = [2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text]
        if sum(cols) > width:  # cut to the terminal's columns (CJK characters take two)
            n, used = 0, 0
            while used + cols[n] <= width - 1:
                used += cols[n]
                n += 1
            text = text[:n] + "\u2026"
        _say(text)

    def sources(item: dict) -> None:
        if item.get("sources"):
            line(" ".join(cite(src) for src in item["sources"]), "    sources: ")

    counts = ", ".join(
        f"{len(getattr(result, k))} {k.replace('_', ' ')}"
        for k in ("entities", "relations", "community_reports", "chunks")
        if getattr(result, k)
    )
    line(f"mode: {result.mode}" + (f" ({counts})" if counts else ""), "")
    if result.entities:
        _say("\nEntities")
    for e in result.entities:
        line(f"{e['name']} [{e['type']}]  score {e['score']:.3g}")
        line(e["description"], "    ")
        sources(e)
    if result.relations:
        _say("\nRelations")
    for r in result.relations:
        line(f"{r['source']} -- {r['target']}  score {r['score']:.3g}")
        line(r["description"], "    ")
        sources(r)
    if result.community_reports:
        _say("\nCommunity reports")
    for c in result.community_reports:
        line(f"{c['title']}  (level {c['level']}, rating {c['rating']:g})")
        line(c["summary"], "    ")
        sources(c)
    if result.chunks:
        _say("\nChunks")
    for c in result.chunks:
        via = f", via {c['via']}" if c.get("via") else ""
        line(f"{cite(c['sources'][0])}  score {c['score']:.3g}{via}")
        line(c["text"], "    ")
    if result.answer:
        _say("\nAnswer\n" + result.answer)


def cmd_serve(args: argparse.Namespace) -> int:
    """The HTTP service and web page over the published index (graphrag_pipeline/serve/)."""
    paths = _reading_paths(args, ("index/",))
    if _REMOTE:  # the index published elsewhere reaches this working copy (downloaded when its ETag changed)
        _follow_remote_index(_REMOTE["sync"])
    import uvicorn

    from graphrag_pipeline.query import IndexNotFoundError
    from graphrag_pipeline.serve import create_app

    try:
        app = create_app(paths.home, max_body_bytes=args.max_body_bytes, query_timeout_s=args.timeout)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    holder = app.state.holder
    try:
        holder.current()  # loaded (DuckDB: into memory) before the first request
    except IndexNotFoundError as exc:
        print(f"warning: {exc}; serving anyway: the index is picked up once it is published", file=sys.stderr)
    auth = "API key required (GRAPHRAG_SERVE_API_KEY)" if app.state.settings["auth"] else "no API key"
    _say(f"serving {paths.home} ({holder.backend}) at http://{args.host}:{args.port}/ - API docs at /docs; {auth}")
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=5)
    return 0


def _follow_remote_index(sync, interval_s: float = 30.0) -> None:
    """`serve` of a home on object storage: pull the published index every `interval_s` seconds."""
    import threading

    def loop() -> None:
        while True:
            time.sleep(interval_s)
            try:
                sync.pull(("index/",))
            except Exception as exc:  # noqa: BLE001 - the service keeps serving what it has
                print(f"warning: {exc}", file=sys.stderr)

    threading.Thread(target=loop, name="graphrag-index-pull", daemon=True).start()


def cmd_export(args: argparse.Namespace) -> int:
    paths = _reading_paths(args, ("graph/",))  # a reader: nothing is created in the home
    from graphrag_pipeline.graph.export import write_graphml
    from graphrag_pipeline.storage.store import Store

    try:
        nodes, edges = Store.reader(paths).read_graph("resolved_graph")
    except FileNotFoundError as exc:
        print(f"error: {exc}; run `graphrag-pipeline build` first", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path("graph.graphml")
    write_graphml(nodes, edges, out)
    _say(f"wrote {nodes.height} nodes and {edges.height} edges to {out}")
    return 0


def _elasticsearch_problem(paths: Paths) -> str | None:
    """With GRAPHRAG_ES_URL set: Elasticsearch behind the graph (the build's own test: a sync left
    half done, no index, or an input written since its last sync - e.g. builds run without the
    setting), said as a problem; None when it is in step or not configured."""
    from graphrag_pipeline.index.es_writer import EsConfig
    from graphrag_pipeline.urls import redact_url

    cfg = EsConfig.from_env(paths.home)
    if cfg is None or not paths.index_file.exists():
        return None
    where = f"Elasticsearch (alias {cfg.alias} at {redact_url(cfg.url)})"
    try:
        from graphrag_pipeline.index.es_reader import EsIndex

        with EsIndex(cfg) as remote:
            meta = dict(remote.meta)
    except FileNotFoundError:
        return f"{where} has no index: `graphrag-pipeline build` with GRAPHRAG_ES_URL set loads it"
    except Exception as exc:  # noqa: BLE001 - unreachable, refused: said, not raised
        return f"{where} cannot be checked: {_plain_error(str(exc))[:200]}"
    behind = (
        f"{where} is behind the graph (a sync was stopped half way, or the index changed in builds run without "
        "GRAPHRAG_ES_URL)"
    )
    if not meta.get("es_state_id"):
        return behind
    dagster_home, _ = resolve_dagster_home(paths)
    if not (dagster_home / "dagster.yaml").exists() and not (dagster_home / "history").is_dir():
        return None  # no instance here (a scratch copy of a home on object storage): nothing to compare
    before = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    try:
        import dagster as dg

        from graphrag_pipeline.definitions import current_defs

        stale = _elasticsearch_stale(paths, dg.DagsterInstance.get(), current_defs())
    except Exception as exc:  # noqa: BLE001 - said, not raised
        return f"{where} cannot be checked: {_plain_error(str(exc))[:200]}"
    finally:
        if before is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = before
    return behind if stale else None


def cmd_verify(args: argparse.Namespace) -> int:
    """Check every file of the home (read-only); exit 1 and list the problems when there are any."""
    from graphrag_pipeline.storage.home import read_home_record
    from graphrag_pipeline.storage.store import Store
    from graphrag_pipeline.storage.verify import verify_home

    home = _reading_paths(args).home
    if not home.is_dir():
        print(f"error: no home at {home}", file=sys.stderr)
        return 2
    paths = Paths(home)
    store = Store.reader(paths)
    record = read_home_record(home)
    doc_keys = sorted(
        p.name[: -len(".json")] for p in paths.doc_dir("chunks").glob("*.json") if not p.name.startswith(".")
    )
    try:
        comms = store.read_communities()
        report_ids = comms.filter(comms["size"] >= 2)["community_id"].to_list()
    except (FileNotFoundError, OSError):
        report_ids = []
    started = time.perf_counter()
    problems = verify_home(paths, store, doc_keys, record.method if record else "fast", report_ids)
    if not problems and (es_problem := _elasticsearch_problem(paths)):
        problems.append(es_problem)
    for p in problems:
        _say(f"problem: {p}")
    _say(
        f"verified {len(doc_keys)} documents, {len(report_ids)} reports, the graph and the index in "
        f"{time.perf_counter() - started:.1f}s: "
        + (
            "all good"
            if not problems
            else f"{_count(len(problems), 'problem')}; `graphrag-pipeline build` repairs them"
        )
    )
    return 1 if problems else 0


def cmd_dev(args: argparse.Namespace) -> int:
    paths = _prepare_environment(args)
    _remote_pull(("state/",))  # the home's record; the UI's runs and sensors pull what they read
    from graphrag_pipeline.storage.home import read_home_record

    record = read_home_record(paths.home)
    if record is not None:  # the UI's sensors and assets follow the home, whatever this shell says
        os.environ["GRAPHRAG_CORPUS"], os.environ["GRAPHRAG_METHOD"] = record.corpus, record.method
        _say(f"this home was built from {record.corpus} with method {record.method}")
    _say(f"DAGSTER_HOME={os.environ['DAGSTER_HOME']} ({_CHOSEN_INSTANCE['source']})")
    local = Path(sys.executable).with_name("dagster")
    exe = str(local) if local.exists() else (shutil.which("dagster") or "dagster")
    extra = args.dagster_args[1:] if args.dagster_args[:1] == ["--"] else args.dagster_args
    os.execvp(exe, [exe, "dev", "-m", "graphrag_pipeline.definitions", *extra])
    return 0


def _search_param(name: str, kind: type):
    """An argparse type for SearchParams' `name`: a number of `kind` in its range (query.search.param_problem)."""

    def parse(text: str):
        from graphrag_pipeline.query.search import param_problem

        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {'whole number' if kind is int else 'number'}: {text!r}") from None
        problem = param_problem(name, value)
        if problem:
            raise argparse.ArgumentTypeError(problem.replace(f"search parameter {name} must be", "must be"))
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="graphrag-pipeline", description=__doc__)
    p.add_argument("--home", help="state directory (default: $GRAPHRAG_HOME, else .graphrag in the project)")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build", help="sync partitions with the corpus and materialize everything stale or missing")
    b.add_argument("--corpus", help="corpus directory (default: $GRAPHRAG_CORPUS, else data/corpus)")
    b.add_argument(
        "--method",
        choices=METHODS,
        help="extraction method (default: $GRAPHRAG_METHOD, else light with OPENAI_API_KEY, else fast)",
    )
    b.add_argument("--batch-size", type=int, default=500, help="documents per run (default 500)")
    b.add_argument(
        "--recluster",
        action="store_true",
        help="cluster communities from scratch instead of updating the previous partition",
    )
    b.add_argument("--wait", action="store_true", help="if another build is running on this home, wait for it")
    b.add_argument("-v", "--verbose", action="store_true", help="show Dagster's log lines of every step (INFO)")
    b.add_argument(
        "--wait-timeout",
        type=float,
        default=600.0,
        help="seconds to wait for a free slot of the llm pool held by another run (default 600)",
    )
    b.add_argument(
        "--switch-corpus",
        action="store_true",
        help="rebuild this home from a corpus other than the one it was built from",
    )
    b.add_argument(
        "--switch-method",
        action="store_true",
        help="extract every document again with a method other than the one this home was built with",
    )
    b.add_argument(
        "--allow-empty", action="store_true", help="let an empty corpus remove every document of a built knowledge base"
    )
    b.add_argument(
        "--refresh",
        choices=["stale", "failed"],
        help="stale: also process the documents built under other settings (model, prompts, chunking: their "
        "code version changed); failed: extract again the documents with chunks whose answer could not be "
        "parsed, and write again the community reports written without the model (its answers were unusable); "
        "without it they are only reported (new LLM calls are a paid decision)",
    )
    b.add_argument(
        "--estimate",
        action="store_true",
        help="only say what the build would send to the LLM (calls, tokens, USD) and why; no call, nothing written",
    )
    b.add_argument("--json", action="store_true", help="with --estimate: print the estimate as JSON")
    b.set_defaults(func=cmd_build)

    s = sub.add_parser("stats", help="counts of the published index and LLM usage")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_stats)

    q = sub.add_parser("query", help="ask the published index")
    q.add_argument("question")
    from graphrag_pipeline.query.search import DEFAULT_MODE, MODES, PARAM_HELP, SearchParams

    q.add_argument("--mode", choices=list(MODES), default=DEFAULT_MODE, help=f"default {DEFAULT_MODE}")
    q.add_argument("--json", action="store_true", help="print the result as JSON (the shape of QueryResult.to_dict)")
    for f in fields(SearchParams):
        q.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=_search_param(f.name, type(f.default)),
            metavar="N" if isinstance(f.default, int) else "X",
            help=f"{PARAM_HELP.get(f.name, f.name)} (default {f.default})",
        )
    q.add_argument("--answer", action="store_true", help="generate an answer with the LLM (global mode: map-reduce)")
    q.set_defaults(func=cmd_query)

    sv = sub.add_parser("serve", help="HTTP API and web page over the published index (picks up new builds)")
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    sv.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    sv.add_argument("--timeout", type=float, default=30.0, help="seconds a query may run before 504 (default 30)")
    sv.add_argument(
        "--max-body-bytes", type=int, default=64 * 1024, help="larger request bodies get 413 (default 65536)"
    )
    sv.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    sv.set_defaults(func=cmd_serve)

    e = sub.add_parser("export", help="export the resolved graph")
    e.add_argument("--format", choices=["graphml"], default="graphml")
    e.add_argument("--out", help="output file (default graph.graphml)")
    e.set_defaults(func=cmd_export)

    v = sub.add_parser(
        "verify", help="check every file of the home (checksums, readability, the index against the graph)"
    )
    v.set_defaults(func=cmd_verify)

    d = sub.add_parser("dev", help="open the Dagster UI on this GRAPHRAG_HOME (extra args go to `dagster dev`)")
    d.add_argument("dagster_args", nargs=argparse.REMAINDER)
    d.set_defaults(func=cmd_dev)
    return p


def main(argv: list[str] | None = None) -> int:
    import warnings

    warnings.filterwarnings("ignore", message=r".*(beta|preview|experimental|deprecated).*")
    args = build_parser().parse_args(argv)
    from graphrag_pipeline.storage.remote import RemoteHomeError, remove_scratch

    try:
        return int(args.func(args) or 0)
    except RemoteHomeError as exc:  # the bucket cannot be used: one line, no credential
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if "ephemeral" in _REMOTE:  # GRAPHRAG_SCRATCH=ephemeral: this process's working copy goes with it
            remove_scratch(_REMOTE["ephemeral"])
        _REMOTE.clear()


def relax_garbage_collection() -> None:
    """Collect cycles less often in the CLI process. A build holds many long-lived objects (the
    definitions, the corpus plan of every document, the instance's records); Python's default
    thresholds walked them thousands of times per update: 1.5 s of a 13 s one-document update at
    25,000 documents, 0.25 s with these. The tables themselves live in polars and DuckDB, not in
    Python objects, so memory barely changes."""
    import gc

    gc.set_threshold(200_000, 50, 1000)


def run() -> None:
    """The console entry point. A build stopped by a signal leaves at once: worker threads may still
    wait on an LLM answer that nobody needs (every output is written whole or not at all)."""
    relax_garbage_collection()
    try:
        code = main()
    except BrokenPipeError:
        # the reader went away (`query ... | head`): what is left to print has nobody to read it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 128 + signal.SIGPIPE
    if code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    skip_final_collection()
    raise SystemExit(code)


def skip_final_collection() -> None:
    """Leave the objects alive now out of the collection the interpreter makes as it exits (gc.freeze):
    it walked every one of them - the plan of every document, the instance's records - and found
    nothing worth freeing in a process about to end (1.0 s after a one-document update at 50,000
    documents). Exit handlers still run (logging's flush among them); an object left in a garbage cycle
    is not finalized, which nothing here relies on: every file the package writes is closed where it is
    written, and atomically renamed."""
    import gc

    gc.freeze()


if __name__ == "__main__":
    run()
