"""Watching the corpus: the sensor adds, removes and runs document partitions; a daily schedule reconciles.

The daemon path (`dagster-daemon` with the queued run coordinator) takes a change in two runs, like
`graphrag-pipeline build`: `corpus_sensor` runs a new or changed file through `corpus_job`
(chunks, extraction, merge, resolution, clustering), then `publish_sensor`, seeing the new
`communities` materialization, runs `publish_job` over the report partitions still to write (one
partition range: the communities asset adds them last, contiguous) and the index. Both request
their runs with the in-process executor: one process per run instead of one per step.
"""

import json

import dagster as dg

from graphrag_pipeline.defs import (
    jobs as pipeline_jobs,
)  # the module, not its jobs: each job is loaded once, from jobs.py
from graphrag_pipeline.defs.instance_ops import KB_TAG
from graphrag_pipeline.defs.partitions import asset_key, change_partitions, community_partitions, documents_partitions
from graphrag_pipeline.defs.resources import PipelineSettings
from graphrag_pipeline.ingest.corpus_sync import DEFAULT_BATCH, contiguous_batches, plan_sync, range_tags
from graphrag_pipeline.settings import knowledge_base, setting

CURSOR_VERSION = 1
# corpus_sensor and publish_sensor (default 10 s); their ticks read the corpus' metadata / a few events
SENSOR_INTERVAL_S = setting("GRAPHRAG_SENSOR_INTERVAL")
# The runs of the daemon path execute their steps in the run's own process: each step of the
# multiprocess executor would start a process and load the definitions again (~3 s each here).
IN_PROCESS = (
    {"execution": {"config": {"in_process": {}}}}
    if setting("GRAPHRAG_DAEMON_IN_PROCESS")
    else {"execution": {"config": {"multiprocess": {}}}}
)


def _refuse_emptying(plan, existing: list[str], settings: PipelineSettings) -> str | None:
    """An empty corpus (an unmounted drive, a wrong path) never empties a built knowledge base here."""
    if plan.states or not existing:
        return None
    return (
        f"the corpus {settings.corpus} has no documents: refusing to remove all {len(existing)} documents of "
        "this knowledge base; fix the corpus, or run `graphrag-pipeline build --allow-empty` to empty it"
    )


def _requests(plan, reason: str, *, whole: bool = False, merge_deletions: bool = True) -> list[dg.RunRequest]:
    """Runs for the plan's documents in contiguous batches. ``whole`` (the sensor): a single batch
    is one `corpus_job` that also merges, resolves and clusters (as the CLI's last batch does);
    several batches each get a `documents_job`, and automation merges once none is in progress."""
    batches = plan.batches(DEFAULT_BATCH)
    job = pipeline_jobs.corpus_job if whole and len(batches) == 1 else pipeline_jobs.documents_job
    run_config = IN_PROCESS if whole else None
    tags = {"graphrag/reason": reason, KB_TAG: knowledge_base()}
    requests = [
        dg.RunRequest(
            job_name=job.name,
            run_config=run_config,
            tags={**range_tags(batch), **tags, "graphrag/documents": str(len(batch))},
        )
        for batch in batches
    ]
    if plan.to_delete and merge_deletions and not requests:
        # a deletion produces no new materialization, so ask for the merge directly; publish_sensor does the rest
        requests.append(
            dg.RunRequest(
                job_name=pipeline_jobs.graph_job.name,
                run_config=run_config,
                tags={**tags, "graphrag/reason": f"{reason}: documents removed"},
            )
        )
    return requests


@dg.sensor(
    jobs=[pipeline_jobs.documents_job, pipeline_jobs.corpus_job, pipeline_jobs.graph_job],
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Adds partitions for new corpus files, removes those of deleted files, runs new or changed "
    "files in batches (one batch: documents, merge, resolution and clustering in one run).",
)
def corpus_sensor(context: dg.SensorEvaluationContext, settings: PipelineSettings) -> dg.SensorResult:
    cursor = json.loads(context.cursor) if context.cursor else {}
    previous = cursor.get("files") if cursor.get("v") == CURSOR_VERSION else None
    existing = context.instance.get_dynamic_partitions(documents_partitions.name)
    plan = plan_sync(settings.corpus, existing, settings.store(), settings.method, previous)
    for err in plan.errors.values():
        context.log.warning(f"cannot read {err}")
    if refusal := _refuse_emptying(plan, existing, settings):
        return dg.SensorResult(skip_reason=refusal)
    new_cursor = json.dumps(
        {"v": CURSOR_VERSION, "files": {k: s.to_list() for k, s in plan.states.items()}}, sort_keys=True
    )
    if not plan.changed:
        return dg.SensorResult(cursor=new_cursor, skip_reason=f"{len(plan.states)} documents, none new or changed")
    context.log.info(f"corpus: {len(plan.to_add)} new, {len(plan.to_delete)} removed, {len(plan.stale)} to (re)process")
    partition_requests = []
    if plan.to_add:
        partition_requests.append(documents_partitions.build_add_request(plan.to_add))
    if plan.to_delete:
        partition_requests.append(documents_partitions.build_delete_request(plan.to_delete))
    return dg.SensorResult(
        run_requests=_requests(plan, "corpus change", whole=True),
        dynamic_partitions_requests=partition_requests,
        cursor=new_cursor,
    )


@dg.schedule(
    cron_schedule="0 3 * * *",
    job=pipeline_jobs.documents_job,
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Daily reconcile: compares the corpus with what was actually processed and re-runs whatever differs.",
)
def daily_reconcile(context: dg.ScheduleEvaluationContext, settings: PipelineSettings):
    """Documents whose content differs from what their stored outputs say they processed (a run
    that failed, a revert the sensor's cursor did not see) are run again. New files get their
    partitions (the runs need them); removed files are left to corpus_sensor, which removes their
    partitions and asks for the merge: a schedule launches only its own job (documents_job), and
    an evaluation from the UI ("test schedule") must not remove documents."""
    instance = context.instance
    existing = instance.get_dynamic_partitions(documents_partitions.name)
    plan = plan_sync(settings.corpus, existing, settings.store(), settings.method, previous=None)
    if refusal := _refuse_emptying(plan, existing, settings):
        return dg.SkipReason(refusal)
    if plan.to_add:
        change_partitions(instance, documents_partitions, plan.to_add)
    # the ranges are cut in the partitions as they are (the removed ones still among them: a range
    # over one would run it again, as a missing file)
    plan.order = [*existing, *plan.to_add]
    left = f"; {len(plan.to_delete)} removed files are left to corpus_sensor" if plan.to_delete else ""
    requests = _requests(plan, "daily reconcile", merge_deletions=False)
    if not requests:
        return dg.SkipReason(f"{len(plan.states)} documents, all up to date{left}")
    if left:
        context.log.info(left[2:])
    return requests


weekly_recluster = dg.ScheduleDefinition(
    name="weekly_recluster",
    cron_schedule="0 4 * * 0",
    job=pipeline_jobs.recluster_job,
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Sundays 04:00, when turned on: cluster communities from scratch (builds otherwise keep the previous "
    "partition and move only the changed frontier, re-clustering by themselves when quality drops).",
)


automation_sensor = dg.AutomationConditionSensorDefinition(
    "graphrag_automation",
    target=dg.AssetSelection.all(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    run_tags={KB_TAG: knowledge_base()},
    description="Carries document changes made outside corpus_sensor's runs (a backfill from the UI, several batches "
    "of documents) to the merge, resolution and communities; publish_sensor writes the reports and publishes the "
    "index (DuckDB and Elasticsearch).",
)


# -- publishing: the reports of a new clustering, then the index -----------------------------------
PUBLISH_CURSOR_VERSION = 1
# runs publish_sensor requests for one clustering before it gives up (a failed run is requested again)
MAX_PUBLISH_ATTEMPTS = 4
_FINISHED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
_IN_PROGRESS = [s for s in dg.DagsterRunStatus if s not in _FINISHED]


def _planned_run_in_progress(instance, key: dg.AssetKey) -> str | None:
    """The id of a run that will materialize the (unpartitioned) asset `key` and has not finished."""
    info = instance.get_latest_planned_materialization_info(key)
    if info is None:
        return None
    run = instance.get_run_by_id(info.run_id)
    return info.run_id if run is not None and run.status not in _FINISHED else None


def _latest_storage_id(instance, key: dg.AssetKey) -> int | None:
    records = instance.fetch_materializations(key, limit=1).records
    return records[0].storage_id if records else None


def _busy(context: dg.SensorEvaluationContext) -> str | None:
    """Why publishing must wait: a run that will cluster again or publish is queued or running
    (elasticsearch_index too: its eager automation may have launched a sync of its own, which a
    publish run now would duplicate, two writers on one alias)."""
    instance = context.instance
    for name in ("communities", "search_index", "elasticsearch_index"):
        if run_id := _planned_run_in_progress(instance, asset_key(name)):
            return f"run {run_id[:8]} will materialize {name}"
    mine = instance.get_run_records(
        dg.RunsFilter(
            statuses=_IN_PROGRESS, tags={"dagster/sensor_name": context.sensor_name, KB_TAG: knowledge_base()}
        ),
        limit=1,
    )
    return f"run {mine[0].dagster_run.run_id[:8]} of this sensor is in progress" if mine else None


@dg.sensor(
    jobs=[pipeline_jobs.publish_job, pipeline_jobs.reports_job, pipeline_jobs.index_job],
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="After a new `communities` materialization (not a CLI build's: the build publishes itself), writes "
    "the report partitions still missing and publishes the index in one run (publish_job over their partition "
    "range).",
)
def publish_sensor(context: dg.SensorEvaluationContext, settings: PipelineSettings) -> dg.SensorResult:
    from graphrag_pipeline.defs.instance_ops import CLI_TAG

    instance = context.instance
    cursor = json.loads(context.cursor) if context.cursor else {}
    if cursor.get("v") != PUBLISH_CURSOR_VERSION:
        cursor = {"v": PUBLISH_CURSOR_VERSION, "handled": 0, "reports_for": None}
    records = instance.fetch_materializations(asset_key("communities"), limit=1).records
    if not records or records[0].storage_id <= cursor["handled"]:
        return dg.SensorResult(skip_reason="no new communities materialization")
    latest = records[0]
    done = {**cursor, "handled": latest.storage_id, "reports_for": None, "pending": None, "attempts": 0}
    run = instance.get_run_by_id(latest.run_id)
    if run is not None and run.tags.get(CLI_TAG) == "build":
        return dg.SensorResult(cursor=json.dumps(done), skip_reason="clustered by a CLI build, which publishes itself")
    if reason := _busy(context):
        return dg.SensorResult(skip_reason=f"waiting: {reason}")
    all_keys = instance.get_dynamic_partitions(community_partitions.name)
    written = instance.get_materialized_partitions(asset_key("community_reports"))
    store = settings.store()
    present = store.stored_report_ids()
    todo = [k for k in all_keys if k not in written or k not in present]
    if not todo:
        index_id = _latest_storage_id(instance, asset_key("search_index"))
        if index_id is not None and index_id > latest.storage_id:
            return dg.SensorResult(
                cursor=json.dumps(done), skip_reason="no new communities to publish: the index is newer than them"
            )
    # a clustering is handled once its reports and index exist, not when a run is requested: a run
    # that failed (or was canceled) is requested again, up to MAX_PUBLISH_ATTEMPTS runs per clustering
    attempts = int(cursor.get("attempts") or 0) if cursor.get("pending") == latest.storage_id else 0
    if attempts >= MAX_PUBLISH_ATTEMPTS:
        message = (
            f"gave up publishing the communities of run {latest.run_id[:8]} after {attempts} runs that did not "
            f"finish ({len(todo)} reports still missing): see those runs' errors, then launch publish_job from the UI "
            "or run `graphrag-pipeline build`"
        )
        context.log.warning(message)
        return dg.SensorResult(cursor=json.dumps(done), skip_reason=message)
    if attempts:
        context.log.warning(
            f"the last run requested for the communities of run {latest.run_id[:8]} did not finish the work "
            f"({len(todo)} reports missing, or the index older than them): requesting it again "
            f"({attempts + 1} of {MAX_PUBLISH_ATTEMPTS})"
        )
    pending = {**cursor, "pending": latest.storage_id, "attempts": attempts + 1}
    batches = contiguous_batches(all_keys, todo, DEFAULT_BATCH)
    tags = {KB_TAG: knowledge_base(), "graphrag/reason": "new communities"}
    if len(batches) > 1 and cursor.get("reports_for") != latest.storage_id:
        # several partition ranges: one run each for their reports, the index once none is in progress
        context.log.info(f"{len(todo)} reports to write in {len(batches)} runs, then the index")
        requests = [
            dg.RunRequest(
                job_name=pipeline_jobs.reports_job.name, run_config=IN_PROCESS, tags={**tags, **range_tags(b)}
            )
            for b in batches
        ]
        return dg.SensorResult(run_requests=requests, cursor=json.dumps({**pending, "reports_for": latest.storage_id}))
    if todo:
        # one range (or what the runs above left, from its first to its last key: the kept reports
        # in between are reused, each recorded as `kept`)
        span = all_keys[all_keys.index(todo[0]) : all_keys.index(todo[-1]) + 1]
        context.log.info(f"{len(todo)} reports to write ({len(span)} partitions), then the index")
        request = dg.RunRequest(
            job_name=pipeline_jobs.publish_job.name, run_config=IN_PROCESS, tags={**tags, **range_tags(span)}
        )
        return dg.SensorResult(run_requests=[request], cursor=json.dumps(pending))
    request = dg.RunRequest(job_name=pipeline_jobs.index_job.name, run_config=IN_PROCESS, tags=tags)
    return dg.SensorResult(run_requests=[request], cursor=json.dumps(pending))
