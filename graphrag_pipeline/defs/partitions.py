import dagster as dg

documents_partitions = dg.DynamicPartitionsDefinition(name="documents")
community_partitions = dg.DynamicPartitionsDefinition(name="communities")
