import dagster as dg

documents_partitions = dg.DynamicPartitionsDefinition(name="documents")
community_partitions = dg.DynamicPartitionsDefinition(name="communities")


def document_keys(instance) -> list[str]:
    """The `documents` partitions that name files (a key added by hand through the UI or API that
    could not be a file name - "../x", "/abs" - is left out: the document assets refuse it)."""
    from graphrag_pipeline.storage.store import partition_key_problem

    return [k for k in instance.get_dynamic_partitions(documents_partitions.name) if partition_key_problem(k) is None]
