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
