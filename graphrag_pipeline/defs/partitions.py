"""The dynamic partitions: one per corpus document (`documents`) and one per community report (`communities`)."""

import dagster as dg

documents_partitions = dg.DynamicPartitionsDefinition(name="documents")
community_partitions = dg.DynamicPartitionsDefinition(name="communities")


def document_keys(instance) -> list[str]:
    """The `documents` partitions that name files (a key added by hand through the UI or API that
    could not be a file name - "../x", "/abs" - is left out: the document assets refuse it)."""
    from graphrag_pipeline.storage.store import partition_key_problem

    return [k for k in instance.get_dynamic_partitions(documents_partitions.name) if partition_key_problem(k) is None]


def change_partitions(instance, partitions_def: dg.DynamicPartitionsDefinition, add=(), delete=()) -> None:
    """Add the keys ``add`` (in their order: the order partitions are listed and ranged in) to a
    dynamic partitions definition, then delete the keys ``delete``."""
    add = list(add)
    if add:
        instance.add_dynamic_partitions(partitions_def.name, add)
    for key in delete:
        instance.delete_dynamic_partition(partitions_def.name, key)


def not_materialized(instance, asset: str, keys: list[str]) -> set[str]:
    """The keys of `keys` Dagster has no materialization of `asset` for: documents not processed
    yet, whose outputs may be absent. Every other key's outputs must be there."""
    done = instance.get_materialized_partitions(dg.AssetKey(asset))
    return {k for k in keys if k not in done}


def missing_inputs_failure(exc, reader: str) -> dg.Failure:
    """The failure of step `reader` when documents' outputs it needs are missing (a
    storage.store.MissingInputError): which files, which partitions, how to rebuild them. Without
    retries (the files do not come back by themselves); the step wrote nothing."""
    keys = list(exc.missing)
    shown = ", ".join(keys[:10]) + (f" and {len(keys) - 10} more" if len(keys) > 10 else "")
    return dg.Failure(
        description=f"{reader} cannot read its inputs: {exc}. Dagster records these partitions of `{exc.asset}` as "
        "materialized, so their files were lost: deleted, or written on another machine's disk (every step must see "
        f"the same GRAPHRAG_HOME). Nothing was written. Rebuild these documents: `graphrag-pipeline build` finds "
        f"and processes them again, or materialize `chunks` and `doc_subgraph` for partition(s) {shown}.",
        metadata={
            "missing_partitions": dg.MetadataValue.json(keys[:200]),
            "missing_files": dg.MetadataValue.json([str(f) for k in keys[:200] for f in exc.missing[k]]),
        },
        allow_retries=False,
    )
