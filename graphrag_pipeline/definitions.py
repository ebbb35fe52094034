"""All Dagster definitions of the project, in one place (`dagster dev -m graphrag_pipeline.definitions`)."""

import dagster as dg

from graphrag_pipeline.defs.checks import communities_reference_entities, knowledge_graph_is_consistent, resolved_graph_is_consistent, search_index_is_complete
from graphrag_pipeline.defs.document_assets import chunks, doc_subgraph
from graphrag_pipeline.defs.graph_assets import communities, community_reports, knowledge_graph, resolved_graph
from graphrag_pipeline.defs.index_assets import elasticsearch_index, search_index
from graphrag_pipeline.defs.jobs import corpus_job, documents_job, graph_job, index_job, publish_job, recluster_job, reports_job
from graphrag_pipeline.defs.resources import llm_settings_from_env, settings_from_env
from graphrag_pipeline.defs.sensors import automation_sensor, corpus_sensor, daily_reconcile, weekly_recluster

defs = dg.Definitions(
    assets=[chunks, doc_subgraph, knowledge_graph, resolved_graph, communities, community_reports, search_index,
            elasticsearch_index],
    asset_checks=[
        knowledge_graph_is_consistent, resolved_graph_is_consistent,
        communities_reference_entities, search_index_is_complete,
    ],
    jobs=[documents_job, graph_job, reports_job, index_job, corpus_job, publish_job, recluster_job],
    sensors=[corpus_sensor, automation_sensor],
    schedules=[daily_reconcile, weekly_recluster],
    resources={"settings": settings_from_env(), "llm": llm_settings_from_env()},
)
