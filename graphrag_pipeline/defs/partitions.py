"""The dynamic partitions: one per corpus document (`documents`) and one per community report (`communities`).

Their names are instance-wide, so they are scoped by the knowledge base (GRAPHRAG_KB, read when the
definitions load, like every setting the definitions use): the default knowledge base keeps the
plain names `documents` and `communities` (the partitions of homes built before GRAPHRAG_KB stay
theirs), any other gets `documents__<kb>` and `communities__<kb>`, so two homes sharing one
instance never add, list or delete each other's partitions.
"""

import dagster as dg

from graphrag_pipeline.settings import DEFAULT_KB, kb_scoped, knowledge_base

# Asset keys are instance-wide too (materializations, the partitions counted as written): another
# knowledge base's assets are `<kb>/chunks`, `<kb>/knowledge_graph`, ...; the default's stay unprefixed.
KEY_PREFIX: list[str] = [] if knowledge_base() == DEFAULT_KB else [knowledge_base()]


def asset_key(name: str) -> dg.AssetKey:
    """The key of the asset ``name`` (e.g. "community_reports") in this knowledge base."""
    return dg.AssetKey([*KEY_PREFIX, name])


def op_name(name: str) -> str:
    """The op (run config) name of the asset ``name`` in this knowledge base."""
    return asset_key(name).to_python_identifier()


documents_partitions = dg.DynamicPartitionsDefinition(name=kb_scoped("documents"))
community_partitions = dg.DynamicPartitionsDefinition(name=kb_scoped("communities"))


def loaded_for_current_kb() -> str | None:
    """None when the partition sets loaded at import are the current GRAPHRAG_KB's; else why not
    (a process that changed GRAPHRAG_KB after loading the definitions must not touch the old sets)."""
    if documents_partitions.name == kb_scoped("documents"):
        return None
    return (
        f"the definitions were loaded for the partition set {documents_partitions.name!r} but GRAPHRAG_KB now "
        f"names {kb_scoped('documents')!r}; start a new process for another knowledge base"
    )


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
