"""The corpus sensor and the daily reconcile schedule, evaluated against a test instance."""

from __future__ import annotations

import os
from datetime import UTC

import dagster as dg
import pytest

from graphrag_pipeline.defs.resources import settings_from_env
from graphrag_pipeline.defs.sensors import corpus_sensor, daily_reconcile
from graphrag_pipeline.ingest.corpus_sync import RANGE_END_TAG, RANGE_START_TAG, contiguous_batches


@pytest.fixture
def test_instance(home, corpus):
    with dg.instance_for_test() as instance:
        yield instance


def tick(instance, cursor=None) -> dg.SensorResult:
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"settings": settings_from_env()}) as ctx:
        result = corpus_sensor(ctx)
    for req in result.dynamic_partitions_requests or []:
        if isinstance(req, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        else:
            for key in req.partition_keys:
                instance.delete_dynamic_partition(req.partitions_def_name, key)
    return result


def ranges(result) -> list[tuple[str, str]]:
    return [(r.tags[RANGE_START_TAG], r.tags[RANGE_END_TAG]) for r in result.run_requests if RANGE_START_TAG in r.tags]


def test_new_files_become_partitions_and_one_batched_run(test_instance, corpus):
    result = tick(test_instance)
    keys = test_instance.get_dynamic_partitions("documents")
    assert len(keys) == 7
    assert ranges(result) == [(keys[0], keys[-1])]
    assert result.run_requests[0].job_name == "corpus_job"  # one batch: documents, merge and clustering in one run

    again = tick(test_instance, result.cursor)
    assert not again.run_requests
    assert "none new or changed" in (again.skip_reason.skip_message if again.skip_reason else "")


def test_changed_file_runs_alone_and_a_b_a_runs_again(test_instance, corpus):
    cursor = tick(test_instance).cursor
    doc = corpus / "darwin_and_wallace.txt"
    original = doc.read_bytes()
    doc.write_bytes(original + b"\n\nA new paragraph about Joseph Hooker at Kew Gardens.\n")
    r1 = tick(test_instance, cursor)
    assert ranges(r1) == [("darwin_and_wallace.txt", "darwin_and_wallace.txt")]
    doc.write_bytes(original)  # back to A: must run again even though A was processed before
    r2 = tick(test_instance, r1.cursor)
    assert ranges(r2) == [("darwin_and_wallace.txt", "darwin_and_wallace.txt")]
    assert not tick(test_instance, r2.cursor).run_requests


def test_an_edit_that_keeps_size_and_modification_time_is_found(test_instance, corpus, home):
    # new contents under the old size and modification time, as `cp -p`, `rsync -t`, `tar x` or
    # `touch -r` leave them: the sensor and the build's plan cache both hash the file again
    from graphrag_pipeline.ingest.corpus_sync import plan_sync
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store

    cursor = tick(test_instance).cursor
    store = Store(Paths(home))
    first = plan_sync(corpus, [], store, "fast")
    doc = corpus / "darwin_and_wallace.txt"
    before = doc.stat()
    doc.write_bytes(doc.read_bytes().replace(b"Darwin", b"DARWIN"))
    os.utime(doc, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (doc.stat().st_size, doc.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert ranges(tick(test_instance, cursor)) == [("darwin_and_wallace.txt", "darwin_and_wallace.txt")]
    again = plan_sync(corpus, [], store, "fast", cache=first.cache)
    assert again.states["darwin_and_wallace.txt"].hash != first.states["darwin_and_wallace.txt"].hash
    assert [k for k in again.states if again.states[k].hash != first.states[k].hash] == ["darwin_and_wallace.txt"]


def test_bulk_drop_is_batched_into_one_run(test_instance, corpus):
    cursor = tick(test_instance).cursor
    drop = corpus / "drop"
    drop.mkdir()
    for i in range(120):
        (drop / f"note_{i:03d}.txt").write_text(
            f"Note {i} mentions Isaac Newton and the Royal Society.", encoding="utf-8"
        )
    result = tick(test_instance, cursor)
    assert len(result.run_requests) == 1
    keys = test_instance.get_dynamic_partitions("documents")
    assert len(keys) == 127
    start, end = ranges(result)[0]
    assert keys.index(end) - keys.index(start) + 1 == 120
    assert all(k.startswith("drop--note_") for k in keys[keys.index(start) : keys.index(end) + 1])


def test_deleted_file_removes_partition_and_requests_the_merge(test_instance, corpus):
    cursor = tick(test_instance).cursor
    (corpus / "curie_radioactivity.md").unlink()
    result = tick(test_instance, cursor)
    assert "curie_radioactivity.md" not in test_instance.get_dynamic_partitions("documents")
    assert [r.job_name for r in result.run_requests] == ["graph_job"]


def test_daily_reconcile_reruns_documents_that_were_never_processed(test_instance, corpus):
    tick(test_instance)  # the sensor requested runs, but none executed
    # closed after use: an open schedule context keeps its instance's state storage as the current
    # one, which a later first load of the definitions (load_from_defs_folder) would read
    with dg.build_schedule_context(instance=test_instance, resources={"settings": settings_from_env()}) as ctx:
        requests = daily_reconcile(ctx)
    assert isinstance(requests, list) and len(requests) == 1
    keys = test_instance.get_dynamic_partitions("documents")
    assert (requests[0].tags[RANGE_START_TAG], requests[0].tags[RANGE_END_TAG]) == (keys[0], keys[-1])


def test_daily_reconcile_leaves_removed_files_to_the_sensor(test_instance, corpus):
    # found by an exploratory run: evaluating the schedule (also "test schedule" in the UI) removed
    # a removed file's partition for real and asked for a graph_job the scheduler never launches:
    # the document stayed in the index, and every tool said all was well
    tick(test_instance)
    before = test_instance.get_dynamic_partitions("documents")
    (corpus / "curie_radioactivity.md").unlink()
    with dg.build_schedule_context(instance=test_instance, resources={"settings": settings_from_env()}) as ctx:
        outcome = daily_reconcile(ctx)
    assert test_instance.get_dynamic_partitions("documents") == before  # nothing removed by an evaluation
    requests = outcome if isinstance(outcome, list) else []
    assert all(r.job_name in (None, "documents_job") for r in requests)
    # no range runs the removed document (still a partition) again
    keys = test_instance.get_dynamic_partitions("documents")
    gone = keys.index("curie_radioactivity.md")
    for r in requests:
        start, end = keys.index(r.tags[RANGE_START_TAG]), keys.index(r.tags[RANGE_END_TAG])
        assert not start <= gone <= end, (r.tags, gone)
    if not requests:
        assert "left to corpus_sensor" in outcome.skip_message
    # the sensor removes it (and the runs it asks for merge without it)
    tick(test_instance)
    assert "curie_radioactivity.md" not in test_instance.get_dynamic_partitions("documents")


def test_contiguous_batches_respects_order_and_size():
    order = list("abcdefghij")
    assert contiguous_batches(order, ["b", "c", "e", "f", "g", "j"], 2) == [["b", "c"], ["e", "f"], ["g"], ["j"]]
    assert contiguous_batches(order, [], 5) == []


def test_definitions_load_and_sensors_run_by_default():
    from graphrag_pipeline.definitions import defs

    dg.Definitions.validate_loadable(defs)
    assert defs.resolve_sensor_def("corpus_sensor").default_status == dg.DefaultSensorStatus.RUNNING
    assert defs.resolve_sensor_def("graphrag_automation").default_status == dg.DefaultSensorStatus.RUNNING
    assert defs.resolve_sensor_def("publish_sensor").default_status == dg.DefaultSensorStatus.RUNNING
    assert defs.resolve_schedule_def("daily_reconcile").default_status == dg.DefaultScheduleStatus.RUNNING
    graph = defs.resolve_asset_graph()
    for key in ("knowledge_graph", "resolved_graph", "communities"):
        assert graph.get(dg.AssetKey(key)).automation_condition is not None, key
    # publish_sensor owns the reports and the index: automation requesting them too would duplicate its runs
    for key in ("community_reports", "search_index", "elasticsearch_index"):
        assert graph.get(dg.AssetKey(key)).automation_condition is None, key
    # and no default automation sensor appears for assets no sensor targets
    assert "default_automation_condition_sensor" not in {s.name for s in defs.sensors or []}
    # the daemon's runs execute in process: a step waiting there for a pool slot sleeps instead of spinning
    from dagster._core.execution.plan.active import ActiveExecution

    assert getattr(ActiveExecution.sleep_til_ready, "graphrag_sleeping", False)


def test_weekly_recluster_is_off_by_default_and_reclusters(home, corpus, instance):
    from graphrag_pipeline.definitions import defs
    from graphrag_pipeline_tests.conftest import cli

    schedule = defs.resolve_schedule_def("weekly_recluster")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    inst = instance()
    result = defs.resolve_job_def(schedule.job_name).execute_in_process(instance=inst, raise_on_error=False)
    assert result.success
    ev = inst.get_latest_materialization_event(dg.AssetKey("communities"))
    meta = {k: v.value for k, v in ev.asset_materialization.metadata.items()}
    assert meta["reclustered"] is True and "asked" in meta["recluster_reason"]


def test_plan_cache_gives_the_same_plan_with_less_work(home, corpus, monkeypatch):
    from graphrag_pipeline.ingest import corpus_sync
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store
    from graphrag_pipeline_tests.conftest import cli

    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    store = Store(Paths(home))
    first = corpus_sync.plan_sync(corpus, sorted(p.name for p in corpus.iterdir()), store, "fast")
    assert first.stale == [] and first.cache
    calls = []
    monkeypatch.setattr(corpus_sync, "stored_hash", lambda *a: calls.append(a) or None)
    monkeypatch.setattr(corpus_sync, "file_hash", lambda p: calls.append(p) or "x")
    again = corpus_sync.plan_sync(corpus, sorted(p.name for p in corpus.iterdir()), store, "fast", cache=first.cache)
    assert again.stale == [] and calls == []  # nothing hashed or read again
    doc = corpus / "darwin_and_wallace.txt"
    doc.write_text(doc.read_text(encoding="utf-8") + "\n\nMore.\n", encoding="utf-8")
    edited = corpus_sync.plan_sync(corpus, sorted(p.name for p in corpus.iterdir()), store, "fast", cache=first.cache)
    assert edited.stale == ["darwin_and_wallace.txt"]
    # another method: what the stored outputs say no longer counts
    other = corpus_sync.plan_sync(corpus, sorted(p.name for p in corpus.iterdir()), store, "light", cache=first.cache)
    assert len(other.stale) == len(other.states)


def test_a_build_stats_each_documents_files_once_and_again_after_it_writes_them(home, corpus, instance, monkeypatch):
    """While a build shares its stats (sharing_doc_stats, with its `alone` check), the merge's
    signatures of the subgraph files come from the plan's stats; a file written through the Store
    is stat'ed again, and the signatures are what a fresh stat gives. Once another run has been in
    progress on the instance (the daemon's, the UI's: they may write documents' files), every file
    is stat'ed again."""
    import os
    from datetime import datetime, timedelta

    from graphrag_pipeline.defs.instance_ops import alone_since, cli_run_tags
    from graphrag_pipeline.ingest import corpus_sync
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import DOC_STATS, Store, sharing_doc_stats
    from graphrag_pipeline_tests.conftest import cli

    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    store = Store(Paths(home))
    keys = sorted(p.name for p in corpus.iterdir())
    inst = instance()

    @dg.asset
    def elsewhere() -> None:  # a run of another process
        return None

    real_stat, stats = os.stat, []
    monkeypatch.setattr(os, "stat", lambda path, *a, **kw: stats.append(os.fspath(path)) or real_stat(path, *a, **kw))
    with sharing_doc_stats():
        DOC_STATS.alone = alone_since(inst, datetime.now(UTC) - timedelta(seconds=1))
        corpus_sync.plan_sync(corpus, keys, store, "fast")
        # a run of this build process does not count
        assert dg.materialize([elsewhere], instance=inst, tags=cli_run_tags()).success
        stats.clear()
        assert store.subgraph_signatures(keys) and stats == []  # all taken from the plan's stats
        doc = keys[0]
        entities, relations = store.read_subgraphs([doc])
        store.write_subgraph(doc, entities.head(1), relations, store.subgraph_info(doc))
        stats.clear()
        shared = store.subgraph_signatures(keys)
        folder = Paths(home).doc_dir("doc_subgraph")
        written = {os.fspath(folder / f"{doc}{x}") for x in (".entities.parquet", ".relations.parquet")}
        assert set(stats) == written
        assert dg.materialize([elsewhere], instance=inst).success  # another process's run
        stats.clear()
        assert store.subgraph_signatures(keys) == shared and len(stats) == 2 * len(keys)
    stats.clear()
    fresh = store.subgraph_signatures(keys)
    assert shared == fresh and len(stats) == 2 * len(keys)  # off after the build: every file stat'ed
    assert DOC_STATS.alone is None and not DOC_STATS.known


def test_a_cli_build_alone_on_its_home_shares_its_stats(home, corpus, monkeypatch):
    """The runs of a CLI build are its own: its `alone` check holds through the build, so the merge
    uses the plan's stats (an update stats each document's files once)."""
    from graphrag_pipeline.defs import instance_ops
    from graphrag_pipeline_tests.conftest import cli

    answers = []
    real = instance_ops.alone_since

    def spied(instance, since):
        check = real(instance, since)
        return lambda: answers.append(check()) or answers[-1]

    monkeypatch.setattr(instance_ops, "alone_since", spied)
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    doc = corpus / "darwin_and_wallace.txt"
    doc.write_text(
        doc.read_text(encoding="utf-8") + "\n\nCharles Darwin wrote to Alfred Wallace again.\n", encoding="utf-8"
    )
    answers.clear()
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    assert answers and all(answers)  # asked by the merge and the index's chunk reader, never refused


def _publish_tick(instance, cursor=None):
    from graphrag_pipeline.definitions import defs

    sensor = defs.resolve_sensor_def("publish_sensor")
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, sensor_name="publish_sensor", resources={"settings": settings_from_env()}
    ) as ctx:
        return sensor.evaluate_tick(ctx)


def test_publish_sensor_writes_the_missing_reports_and_the_index_in_one_run(home, corpus, instance):
    from graphrag_pipeline.definitions import defs
    from graphrag_pipeline_tests.conftest import cli

    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    inst = instance()
    # a CLI build publishes its own clustering
    first = _publish_tick(inst)
    assert not first.run_requests and "CLI build" in (first.skip_message or "")
    (corpus / "hooker.txt").write_text(
        "Joseph Hooker sailed with James Clark Ross to Antarctica and later directed Kew Gardens, where he "
        "corresponded with Charles Darwin about the Wollemi Expedition.",
        encoding="utf-8",
    )
    # the corpus sensor takes one new file in one run that also merges and clusters, in process
    result = tick(inst)
    [request] = result.run_requests
    assert request.job_name == "corpus_job" and ranges(result) == [("hooker.txt", "hooker.txt")]
    assert request.run_config == {"execution": {"config": {"in_process": {}}}}
    run = defs.resolve_job_def("corpus_job").execute_in_process(instance=inst, tags=request.tags)
    assert run.success
    keys = inst.get_dynamic_partitions("communities")
    missing = [k for k in keys if k not in inst.get_materialized_partitions(dg.AssetKey("community_reports"))]
    assert missing
    # while a run that will cluster again is queued, publishing waits for it
    graph_job = defs.resolve_job_def("graph_job")
    pending = inst.create_run_for_job(graph_job, asset_selection=frozenset(graph_job.asset_layer.executable_asset_keys))
    waiting = _publish_tick(inst, first.cursor)
    assert not waiting.run_requests and "waiting" in (waiting.skip_message or ""), waiting.skip_message
    inst.report_run_canceled(pending)
    # the new communities' report partitions are the last ones: one range, one run with the index
    second = _publish_tick(inst, first.cursor)
    [publish] = second.run_requests
    assert publish.job_name == "publish_job"
    assert (publish.tags[RANGE_START_TAG], publish.tags[RANGE_END_TAG]) == (missing[0], missing[-1])
    assert keys[keys.index(missing[0]) :] == missing
    run = defs.resolve_job_def("publish_job").execute_in_process(instance=inst, tags=publish.tags)
    assert run.success
    assert inst.get_materialized_partitions(dg.AssetKey("community_reports")) >= set(keys)
    # nothing more to do until the next clustering
    third = _publish_tick(inst, second.cursor)
    assert not third.run_requests and "no new communities" in (third.skip_message or "")


def test_publish_sensor_runs_reports_of_several_ranges_first_then_the_index(home, corpus, instance):
    from graphrag_pipeline.definitions import defs
    from graphrag_pipeline_tests.conftest import cli

    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    inst = instance()
    cursor = _publish_tick(inst).cursor
    keys = inst.get_dynamic_partitions("communities")
    assert len(keys) >= 3
    assert defs.resolve_job_def("graph_job").execute_in_process(instance=inst).success  # clustered, not by a build
    assert inst.get_dynamic_partitions("communities") == keys
    # the reports of two partitions that are not neighbours are gone: two partition ranges to write
    from graphrag_pipeline.storage.layout import Paths

    for key in (keys[0], keys[2]):
        (Paths(home).reports_dir / f"{key}.json").unlink()
    first = _publish_tick(inst, cursor)
    assert [r.job_name for r in first.run_requests] == ["reports_job", "reports_job"]
    assert [(r.tags[RANGE_START_TAG], r.tags[RANGE_END_TAG]) for r in first.run_requests] == [
        (keys[0], keys[0]),
        (keys[2], keys[2]),
    ]
    for request in first.run_requests:
        assert defs.resolve_job_def("reports_job").execute_in_process(instance=inst, tags=request.tags).success
    assert all((Paths(home).reports_dir / f"{key}.json").exists() for key in (keys[0], keys[2]))
    # automation (Elasticsearch's eager condition) launched a sync first: publishing waits for it
    # instead of running Elasticsearch a second time, at once, in index_job
    index_job = defs.resolve_job_def("index_job")
    es_run = inst.create_run_for_job(index_job, asset_selection=frozenset({dg.AssetKey("elasticsearch_index")}))
    waiting = _publish_tick(inst, first.cursor)
    assert not waiting.run_requests and "elasticsearch_index" in (waiting.skip_message or ""), waiting.skip_message
    inst.report_run_canceled(es_run)
    # every report written: the index, once
    second = _publish_tick(inst, first.cursor)
    assert [r.job_name for r in second.run_requests] == ["index_job"]
    assert defs.resolve_job_def("index_job").execute_in_process(instance=inst).success
    assert not _publish_tick(inst, second.cursor).run_requests


def test_an_edit_is_published_once_and_automation_requests_nothing_beside_publish_sensor(home, corpus, instance):
    from graphrag_pipeline.definitions import defs
    from graphrag_pipeline_tests.conftest import cli

    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    inst = instance()
    publish_cursor = _publish_tick(inst).cursor
    automation = dg.evaluate_automation_conditions(defs=defs, instance=inst)
    assert automation.total_requested == 0
    corpus_cursor = tick(inst).cursor
    # an edit that adds no entity: the clustering that follows gives no new report partition
    edited = corpus / "darwin_and_wallace.txt"
    edited.write_text(edited.read_text(encoding="utf-8") + "\n\nThe end.\n", encoding="utf-8")
    [request] = tick(inst, corpus_cursor).run_requests
    assert request.job_name == "corpus_job"
    partitions = inst.get_dynamic_partitions("communities")
    assert defs.resolve_job_def("corpus_job").execute_in_process(instance=inst, tags=request.tags).success
    assert inst.get_dynamic_partitions("communities") == partitions
    # publish_sensor publishes the index (DuckDB and Elasticsearch) in one run; automation requests no
    # second run of Elasticsearch beside it
    assert [r.job_name for r in _publish_tick(inst, publish_cursor).run_requests] == ["index_job"]
    after = dg.evaluate_automation_conditions(defs=defs, instance=inst, cursor=automation.cursor)
    assert [str(r.key) for r in after.results if r.true_subset.size] == []


def test_publish_sensor_requests_a_failed_publish_again_then_gives_up(home, corpus, instance):
    from graphrag_pipeline.definitions import defs
    from graphrag_pipeline.defs.sensors import MAX_PUBLISH_ATTEMPTS
    from graphrag_pipeline_tests.conftest import cli

    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    inst = instance()
    cursor = _publish_tick(inst).cursor
    (corpus / "hooker.txt").write_text(
        "Joseph Hooker sailed with James Clark Ross to Antarctica and later directed Kew Gardens, where he "
        "corresponded with Charles Darwin about the Wollemi Expedition.",
        encoding="utf-8",
    )
    [request] = tick(inst).run_requests
    assert defs.resolve_job_def("corpus_job").execute_in_process(instance=inst, tags=request.tags).success
    # every requested publish run fails (here: it ends before doing anything): requested again, then given up
    publish_job = defs.resolve_job_def("publish_job")
    for attempt in range(MAX_PUBLISH_ATTEMPTS):
        result = _publish_tick(inst, cursor)
        assert [r.job_name for r in result.run_requests] == ["publish_job"], (attempt, result.skip_message)
        failed = inst.create_run_for_job(
            publish_job, tags={**result.run_requests[0].tags, "dagster/sensor_name": "publish_sensor"}
        )
        inst.report_run_failed(failed)
        cursor = result.cursor
    gave_up = _publish_tick(inst, cursor)
    assert not gave_up.run_requests and "gave up" in (gave_up.skip_message or ""), gave_up.skip_message
    assert "reports still missing" in gave_up.skip_message
    assert not _publish_tick(inst, gave_up.cursor).run_requests
    # a publish run that works, on the next clustering, clears it
    assert defs.resolve_job_def("graph_job").execute_in_process(instance=inst).success
    [again] = _publish_tick(inst, gave_up.cursor).run_requests
    assert again.job_name == "publish_job"
    assert publish_job.execute_in_process(instance=inst, tags=again.tags).success
    done = _publish_tick(inst, _publish_tick(inst, gave_up.cursor).cursor)
    assert not done.run_requests


def test_a_runs_listing_of_documents_is_taken_once_and_again_after_a_change(tmp_path):
    """Inside listing_memo (a run of the build), the `documents` keys are listed once: a key another
    instance adds meanwhile shows once the block ends; a change this instance makes (Dagster's methods
    or change_partitions, whose deletes are one statement) lists them again at once. The communities'
    keys are listed every time, and outside the block every listing is fresh."""
    from graphrag_pipeline.defs.partitions import (
        change_partitions,
        community_partitions,
        documents_partitions,
        list_partition_keys_quickly,
        listing_memo,
    )

    docs, comms = documents_partitions.name, community_partitions.name
    with dg.instance_for_test(temp_dir=str(tmp_path)) as build, dg.instance_for_test(temp_dir=str(tmp_path)) as other:
        assert list_partition_keys_quickly(build)
        change_partitions(build, documents_partitions, add=["a.txt", "b.txt"])
        with listing_memo(build):
            listed = build.get_dynamic_partitions(docs)
            assert listed == ["a.txt", "b.txt"]
            listed.append("changed by the caller")
            other.add_dynamic_partitions(docs, ["c.txt"])
            other.add_dynamic_partitions(comms, ["c1"])
            assert build.get_dynamic_partitions(docs) == ["a.txt", "b.txt"]  # from memory, unchanged
            assert build.get_dynamic_partitions(comms) == ["c1"]  # always listed
            build.add_dynamic_partitions(docs, ["d.txt"])
            assert build.get_dynamic_partitions(docs) == ["a.txt", "b.txt", "c.txt", "d.txt"]
            other.delete_dynamic_partition(docs, "a.txt")
            assert build.get_dynamic_partitions(docs) == ["a.txt", "b.txt", "c.txt", "d.txt"]
            change_partitions(build, documents_partitions, delete=["b.txt", "c.txt"])
            assert build.get_dynamic_partitions(docs) == ["d.txt"]
            other.add_dynamic_partitions(docs, ["e.txt"])
            build.delete_dynamic_partition(docs, "d.txt")
            assert build.get_dynamic_partitions(docs) == ["e.txt"]
            other.add_dynamic_partitions(docs, ["f.txt"])
        assert build.get_dynamic_partitions(docs) == ["e.txt", "f.txt"]
        other.add_dynamic_partitions(docs, ["g.txt"])
        assert build.get_dynamic_partitions(docs) == ["e.txt", "f.txt", "g.txt"]  # outside a run: fresh
        with listing_memo(other):  # an instance the build did not change: no memory
            assert other.get_dynamic_partitions(docs) == ["e.txt", "f.txt", "g.txt"]
            build.add_dynamic_partitions(docs, ["h.txt"])
            assert other.get_dynamic_partitions(docs)[-1] == "h.txt"

        # a block inside another (a run inside the build's block) keeps the outer block's listing
        with listing_memo(build):
            assert build.get_dynamic_partitions(docs)[-1] == "h.txt"
            other.add_dynamic_partitions(docs, ["i.txt"])
            with listing_memo(build):
                assert build.get_dynamic_partitions(docs)[-1] == "h.txt"
            assert build.get_dynamic_partitions(docs)[-1] == "h.txt"
            build.add_dynamic_partitions(docs, ["j.txt"])  # a change of its own: listed again
            with listing_memo(build):
                assert build.get_dynamic_partitions(docs)[-2:] == ["i.txt", "j.txt"]
                other.add_dynamic_partitions(docs, ["k.txt"])
            assert build.get_dynamic_partitions(docs)[-1] == "j.txt"
        assert build.get_dynamic_partitions(docs)[-1] == "k.txt"


def test_a_builds_quick_partition_listing_gives_what_dagster_lists(tmp_path):
    """The CLI build's instance lists partition keys with its own query (list_partition_keys_quickly):
    the same keys in the same order as Dagster's listing, through adds and deletes made by this
    instance or by another one (another process), the newest key's row id taken again included."""
    from graphrag_pipeline.defs.partitions import change_partitions, documents_partitions, list_partition_keys_quickly

    name = documents_partitions.name
    with dg.instance_for_test(temp_dir=str(tmp_path)) as build, dg.instance_for_test(temp_dir=str(tmp_path)) as other:
        assert list_partition_keys_quickly(build)
        assert "get_dynamic_partitions" in vars(build)  # this instance only

        def dagsters_listing(*args, **kwargs):
            raise AssertionError("the build's instance listed the keys through Dagster's method")

        build.event_log_storage.get_dynamic_partitions = dagsters_listing
        assert build.get_dynamic_partitions(name) == []

        def same(expected: list[str]) -> None:
            assert build.get_dynamic_partitions(name) == other.get_dynamic_partitions(name) == expected

        change_partitions(build, documents_partitions, add=["b.txt", "a.txt", "c/d.txt"])
        same(["b.txt", "a.txt", "c/d.txt"])
        other.add_dynamic_partitions(name, ["e.txt"])
        other.delete_dynamic_partition(name, "a.txt")
        same(["b.txt", "c/d.txt", "e.txt"])
        other.delete_dynamic_partition(name, "e.txt")  # the newest: its row id is taken again
        other.add_dynamic_partitions(name, ["f.txt"])
        same(["b.txt", "c/d.txt", "f.txt"])
        change_partitions(build, documents_partitions, delete=["b.txt", "f.txt"])
        same(["c/d.txt"])
        other.add_dynamic_partitions("another", ["x"])
        assert build.get_dynamic_partitions("another") == ["x"]
        assert build.get_dynamic_partitions(name) == ["c/d.txt"]


def test_output_signatures_stat_each_file_by_its_name_in_an_open_folder_and_equal_stats_by_path(tmp_path, monkeypatch):
    """joint_signatures stats a document's files by name under a descriptor of their folder (where
    the system can): the same signatures as stats by full path, for files present, missing, in a
    folder that does not exist, and for a key that cannot name a file."""
    from graphrag_pipeline.ingest.corpus_sync import OUTPUT_FILES
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store

    store = Store(Paths(tmp_path))
    chunks = store.paths.doc_dir("chunks")
    chunks.mkdir(parents=True)  # doc_subgraph's folder is never made: all its files are missing
    assert OUTPUT_FILES["chunks"] == (".json", ".parquet")
    for name, size in (("a.json", 3), ("a.parquet", 5), ("b.json", 7)):
        (chunks / name).write_bytes(b"x" * size)
    keys = ["a", "b", "c", "../x"]
    outputs = [("chunks", OUTPUT_FILES["chunks"]), ("doc_subgraph", OUTPUT_FILES["doc_subgraph"])]

    real_stat, calls = os.stat, []

    def stat(path, *a, **kw):
        calls.append((os.fspath(path), kw.get("dir_fd")))
        return real_stat(path, *a, **kw)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "supports_dir_fd", os.supports_dir_fd | {stat})
    by_name = store.joint_signatures(keys, outputs, "|fast")
    # the chunks by name; the files of the folder that cannot be opened by path
    named = [name for name, fd in calls if fd is not None]
    assert named == [f"{k}{x}" for k in "abc" for x in OUTPUT_FILES["chunks"]]
    assert all(name.startswith(os.fspath(tmp_path)) for name, fd in calls if fd is None)
    monkeypatch.setattr(os, "supports_dir_fd", os.supports_dir_fd - {stat})
    calls.clear()
    by_path = store.joint_signatures(keys, outputs, "|fast")
    assert calls and all(fd is None and name.startswith(os.fspath(tmp_path)) for name, fd in calls)
    assert by_name == by_path
    a = real_stat(chunks / "a.json")
    assert by_name["a"].startswith(f"{a.st_size}:{a.st_mtime_ns}/5:")
    assert by_name["b"].split("|")[0].endswith("/missing") and by_name["c"].startswith("missing/missing|")
    assert by_name["a"].split("|")[1] == "/".join(["missing"] * len(OUTPUT_FILES["doc_subgraph"]))
    assert by_name["../x"] == "invalid|invalid|fast"
