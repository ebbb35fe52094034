"""Watching the corpus: the sensor adds, removes and runs document partitions; a daily schedule reconciles."""

import json

import dagster as dg

from graphrag_pipeline.defs import (
    jobs as pipeline_jobs,
)  # the module, not its jobs: each job is loaded once, from jobs.py
from graphrag_pipeline.defs.partitions import change_partitions, documents_partitions
from graphrag_pipeline.defs.resources import PipelineSettings
from graphrag_pipeline.ingest.corpus_sync import DEFAULT_BATCH, plan_sync, range_tags

CURSOR_VERSION = 1


def _refuse_emptying(plan, existing: list[str], settings: PipelineSettings) -> str | None:
    """An empty corpus (an unmounted drive, a wrong path) never empties a built knowledge base here."""
    if plan.states or not existing:
        return None
    return (
        f"the corpus {settings.corpus} has no documents: refusing to remove all {len(existing)} documents of "
        "this knowledge base; fix the corpus, or run `graphrag-pipeline build --allow-empty` to empty it"
    )


def _requests(plan, reason: str) -> list[dg.RunRequest]:
    requests = [
        dg.RunRequest(
            job_name=pipeline_jobs.documents_job.name,
            tags={**range_tags(batch), "graphrag/reason": reason, "graphrag/documents": str(len(batch))},
        )
        for batch in plan.batches(DEFAULT_BATCH)
    ]
    if plan.to_delete and not requests:
        # a deletion produces no new materialization, so ask for the merge directly; automation does the rest
        requests.append(
            dg.RunRequest(
                job_name=pipeline_jobs.graph_job.name, tags={"graphrag/reason": f"{reason}: documents removed"}
            )
        )
    return requests


@dg.sensor(
    jobs=[pipeline_jobs.documents_job, pipeline_jobs.graph_job],
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Adds partitions for new corpus files, removes those of deleted files, runs new or changed "
    "files in batches.",
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
        run_requests=_requests(plan, "corpus change"),
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
    instance = context.instance
    existing = instance.get_dynamic_partitions(documents_partitions.name)
    plan = plan_sync(settings.corpus, existing, settings.store(), settings.method, previous=None)
    if refusal := _refuse_emptying(plan, existing, settings):
        return dg.SkipReason(refusal)
    change_partitions(instance, documents_partitions, plan.to_add, plan.to_delete)
    requests = _requests(plan, "daily reconcile")
    if not requests:
        return dg.SkipReason(f"{len(plan.states)} documents, all up to date")
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
    description="Carries document changes downstream: merge, resolution, communities, reports, index.",
)
