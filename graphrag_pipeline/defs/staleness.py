"""Which document partitions were built under other settings than the current definitions'.

The per-document assets make their data version of their code version and the run id (see
`metadata.versioned`), so the partitions whose latest materialization has another code version
are found with one query per asset (Dagster's latest data version by partition; Dagster's own
`dagster/code_version` tag cannot be queried by partition), not one per partition: the same
partitions Dagster's own staleness resolver reports as stale with the cause "has a new code
version" (tested against it), at the cost of a build's planning at 50k documents.
"""

from __future__ import annotations

import dagster as dg

from graphrag_pipeline.defs.partitions import asset_key

DOCUMENT_ASSETS = ("chunks", "doc_subgraph")


def document_code_versions(defs: dg.Definitions) -> dict[str, str | None]:
    """The code version of each per-document asset in these definitions."""
    graph = defs.resolve_asset_graph()
    return {name: graph.get(asset_key(name)).code_version for name in DOCUMENT_ASSETS}


def stale_by_code_version(instance: dg.DagsterInstance, defs: dg.Definitions, keys=None) -> dict[str, list[str]]:
    """For each per-document asset with a code version, the partitions (of ``keys``, default all
    materialized ones) whose latest materialization was written under another code version."""
    from dagster._core.definitions.data_version import DATA_VERSION_TAG

    graph = defs.resolve_asset_graph()
    wanted = None if keys is None else set(keys)
    out: dict[str, list[str]] = {}
    for name in DOCUMENT_ASSETS:
        key = asset_key(name)
        version = graph.get(key).code_version
        if not version:
            continue
        latest = instance.event_log_storage.get_latest_tags_by_partition(
            key, dg.DagsterEventType.ASSET_MATERIALIZATION, [DATA_VERSION_TAG]
        )
        out[name] = sorted(
            partition
            for partition, tags in latest.items()
            if (written := _code_version_of(tags.get(DATA_VERSION_TAG))) is not None
            and written != version
            and (wanted is None or partition in wanted)
        )
    return out


def stale_documents(instance: dg.DagsterInstance, defs: dg.Definitions, keys=None) -> list[str]:
    """The documents to process again so every per-document asset is current: any stale asset
    re-runs the document's whole chain (chunks then extraction)."""
    found = stale_by_code_version(instance, defs, keys)
    return sorted({k for partitions in found.values() for k in partitions})


def _code_version_of(data_version: str | None) -> str | None:
    """The code version part of a data version `metadata.versioned` wrote (`<code version>@<run id>`);
    None for a materialization written before assets had code versions: what settings it was built
    under is not known, so it is not reported (an upgraded home of 50,000 documents is not told to
    process them all again; the UI shows them stale once, by its own rule)."""
    return data_version.rpartition("@")[0] if data_version and "@" in data_version else None
