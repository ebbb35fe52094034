"""The jobs the CLI, the sensor and the schedules launch: stretches of the asset graph run in one run each."""

import dagster as dg

# the modules, not their assets: the defs-folder loader registers each asset once, from its own file
from graphrag_pipeline.defs import document_assets as docs
from graphrag_pipeline.defs import graph_assets as graph
from graphrag_pipeline.defs import index_assets as index
from graphrag_pipeline.defs.partitions import op_name

documents_job = dg.define_asset_job(
    "documents_job",
    selection=[docs.chunks, docs.doc_subgraph],
    description="Chunk and extract a range of documents in one run.",
)
graph_job = dg.define_asset_job(
    "graph_job",
    selection=[graph.knowledge_graph, graph.resolved_graph, graph.communities],
    description="Merge, resolve and cluster the whole corpus.",
)
reports_job = dg.define_asset_job(
    "reports_job",
    selection=[graph.community_reports],
    description="Write the reports of a range of communities in one run.",
)
index_job = dg.define_asset_job(
    "index_job",
    selection=[index.search_index, index.elasticsearch_index],
    description="Publish the search index (DuckDB, and Elasticsearch when configured).",
)

# The CLI's build runs whole stretches of the graph in one run each, to pay Dagster's per-run
# cost twice per build instead of four times: documents + graph, then reports + index.
corpus_job = dg.define_asset_job(
    "corpus_job",
    selection=[docs.chunks, docs.doc_subgraph, graph.knowledge_graph, graph.resolved_graph, graph.communities],
    description="Chunk and extract a range of documents, then merge, resolve and cluster the corpus.",
)
publish_job = dg.define_asset_job(
    "publish_job",
    selection=[graph.community_reports, index.search_index, index.elasticsearch_index],
    description="Write the reports of a range of communities, then publish the index.",
)

# Re-cluster the communities from scratch (the weekly schedule, off by default, runs it); reports
# and the index follow through declarative automation, and only communities that came out
# different get new reports.
recluster_job = dg.define_asset_job(
    "recluster_job",
    selection=[graph.communities],
    config={"ops": {op_name("communities"): {"config": {"full_recluster": True}}}},
    description="Cluster the communities from scratch instead of updating the kept partition.",
)
