"""The daemon path, driven for real: `dagster-daemon run` in its own process group on a home's
Dagster instance, a file dropped into the corpus, and what the instance then records (runs, their
process starts, sensor ticks). Used by test_daemon_path.py and by the `daemon` benchmark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SENSORS = ("corpus_sensor", "publish_sensor", "graphrag_automation")


def start_daemon(home: Path, env: dict, log: Path) -> subprocess.Popen:
    """`dagster-daemon run` on the home's instance (DAGSTER_HOME=$GRAPHRAG_HOME/dagster), loading
    the project's definitions; its own process group, so stop_daemon ends its code server too."""
    exe = Path(sys.executable).with_name("dagster-daemon")
    full = {**env, "GRAPHRAG_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            [str(exe), "run", "-m", "graphrag_pipeline.definitions"],
            env=full,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(REPO),
            start_new_session=True,
        )


def stop_daemon(proc: subprocess.Popen, timeout_s: float = 30) -> None:
    """SIGTERM to the daemon's process group (the daemon, its code server, run workers), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=timeout_s)
            return
        except subprocess.TimeoutExpired:
            continue


def open_instance(home: Path):
    import dagster as dg

    return dg.DagsterInstance.from_config(str(home / "dagster"))


def queryable(home: Path, word: str) -> bool:
    """Whether a naive query for `word` on the published DuckDB index returns a chunk containing it."""
    from graphrag_pipeline.index.duckdb_reader import open_index
    from graphrag_pipeline.query import query

    if not (home / "index" / "search_index.duckdb").exists():
        return False
    with open_index(home, backend="duckdb") as index:
        result = query(index, word, mode="naive")
    return any(word in c["text"] for c in result.chunks)


def wait_for(check: Callable[[], bool], timeout_s: float, poll_s: float = 0.5) -> float | None:
    """Seconds until `check()` was true, or None after `timeout_s`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if check():
            return time.monotonic() - started
        time.sleep(poll_s)
    return None


def runs_since(instance, since: datetime) -> list[dict]:
    """The runs created after `since`: job, status, tags, start and end, oldest first."""
    import dagster as dg

    out = []
    for rec in instance.get_run_records(dg.RunsFilter(created_after=since)):
        run = rec.dagster_run
        out.append(
            {
                "run_id": run.run_id,
                "job": run.job_name,
                "status": run.status.value,
                "tags": dict(run.tags),
                "created": rec.create_timestamp.timestamp(),
                "start": rec.start_time,
                "end": rec.end_time,
            }
        )
    return sorted(out, key=lambda r: r["created"])


def step_processes(instance, run_id: str) -> int:
    """Processes a run started for its steps (the multiprocess executor starts one per step; the
    in-process executor none): its STEP_WORKER_STARTING events."""
    import dagster as dg

    records = instance.get_records_for_run(
        run_id, of_type={dg.DagsterEventType.STEP_WORKER_STARTING}, limit=10_000
    ).records
    return len(records)


def report_runs(instance, run_ids: set[str], asset: str = "community_reports") -> dict[str, set[str]]:
    """The `community_reports` partitions each of `run_ids` materialized."""
    import dagster as dg

    out: dict[str, set[str]] = {}
    cursor = None
    while True:
        res = instance.fetch_materializations(dg.AssetKey(asset), limit=1000, cursor=cursor)
        for rec in res.records:
            if rec.run_id in run_ids:
                out.setdefault(rec.run_id, set()).add(rec.asset_materialization.partition)
        if not res.has_more:
            return out
        cursor = res.cursor


def sensor_ticked_after(instance, name: str, after: float) -> bool:
    """Whether sensor `name` finished a tick that started after `after` (epoch seconds)."""
    from dagster._core.definitions.run_request import InstigatorType
    from dagster._core.scheduler.instigation import TickStatus

    for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        if state.instigator_name != name:
            continue
        ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=5)
        if any(t.timestamp > after and t.status in (TickStatus.SKIPPED, TickStatus.SUCCESS) for t in ticks):
            return True
    return False


def settled(instance, after: float) -> bool:
    """Every sensor of the daemon path ticked after `after` and no run is queued or running: what
    the daemon will do about a change has been requested and done."""
    import dagster as dg

    busy = instance.get_run_records(
        dg.RunsFilter(
            statuses=[
                dg.DagsterRunStatus.QUEUED,
                dg.DagsterRunStatus.NOT_STARTED,
                dg.DagsterRunStatus.STARTING,
                dg.DagsterRunStatus.STARTED,
                dg.DagsterRunStatus.CANCELING,
            ]
        ),
        limit=1,
    )
    return not busy and all(sensor_ticked_after(instance, s, after) for s in SENSORS)


def now_utc() -> datetime:
    return datetime.now(UTC)


def drop_document(corpus: Path, name: str, word: str) -> Path:
    """A new corpus file whose text names `word` (found in no other document) beside known entities."""
    path = corpus / name
    path.write_text(
        f"The {word} Expedition of 1851\n\n"
        f"In 1851 the {word} Expedition, led by the botanist Joseph Hooker, sailed from Plymouth with "
        f"Charles Darwin's letters to map the rivers of Sikkim. The {word} survey sent its specimens to Kew "
        f"Gardens, where Hooker and Darwin compared them with the collections of the Royal Society.\n",
        encoding="utf-8",
    )
    return path
