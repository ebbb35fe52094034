"""The daemon path for real: `dagster-daemon run` (queued run coordinator, the home's SQLite
instance) with the sensors and automation as they are declared (running by default) takes a file
dropped into the corpus of a built home to the published index, in two runs."""

from __future__ import annotations

import os
import time

from graphrag_pipeline.ingest.documents import scan_corpus
from graphrag_pipeline_tests.conftest import cli
from graphrag_pipeline_tests.daemon_support import (
    drop_document,
    now_utc,
    open_instance,
    queryable,
    report_runs,
    runs_since,
    settled,
    start_daemon,
    step_processes,
    stop_daemon,
    wait_for,
)

WORD = "Quillthorpe"  # in no document of the bundled corpus
TIMEOUT_S = 240  # generous: a busy 2-core machine; what is asserted are counts, never times


def test_a_dropped_file_becomes_queryable_in_two_runs(home, corpus, tmp_path):
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    assert not queryable(home, WORD)
    instance = open_instance(home)
    assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
    assert instance.run_coordinator.dequeue_interval_seconds == 1  # the project's dagster.yaml
    log = tmp_path / "daemon.log"
    daemon = start_daemon(home, dict(os.environ), log)
    try:
        # the sensors' first ticks on the built home request nothing
        started = time.time()
        assert wait_for(lambda: settled(instance, started), TIMEOUT_S), log.read_text()[-3000:]
        before = now_utc()
        assert not runs_since(instance, before)
        drop_document(corpus, "quillthorpe_expedition.txt", WORD)
        new_key = next(f.key for f in scan_corpus(corpus) if f.path.name == "quillthorpe_expedition.txt")

        assert wait_for(lambda: queryable(home, WORD), TIMEOUT_S) is not None, log.read_text()[-3000:]
        # everything the daemon does about the change is done (each sensor ticked once more)
        done_at = time.time()
        assert wait_for(lambda: settled(instance, done_at), TIMEOUT_S), log.read_text()[-3000:]
        runs = runs_since(instance, before)
    finally:
        stop_daemon(daemon)

    assert [r["job"] for r in runs] == ["corpus_job", "publish_job"], runs
    assert all(r["status"] == "SUCCESS" for r in runs), runs
    corpus_run, publish_run = runs
    assert corpus_run["tags"]["dagster/sensor_name"] == "corpus_sensor"
    assert corpus_run["tags"]["dagster/asset_partition_range_start"] == new_key
    assert corpus_run["tags"]["dagster/asset_partition_range_end"] == new_key
    assert publish_run["tags"]["dagster/sensor_name"] == "publish_sensor"
    # every report partition of the change was written by that one run, and now every partition has a report
    partitions = instance.get_dynamic_partitions("communities")
    written = report_runs(instance, {r["run_id"] for r in runs})
    assert set(written) == {publish_run["run_id"]}
    assert written[publish_run["run_id"]]
    assert instance.get_materialized_partitions(instance_key("community_reports")) >= set(partitions)
    # the runs executed their steps in their own process: no process per step
    assert sum(step_processes(instance, r["run_id"]) for r in runs) == 0
    # the CLI still agrees that everything is up to date
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0 and "everything is up to date" in out, out


def instance_key(name: str):
    import dagster as dg

    return dg.AssetKey(name)
