"""Helpers for materialization metadata: Markdown previews and counts."""

import dagster as dg


def md_table(rows: list[dict], columns: list[str], limit: int = 20, width: int = 80) -> dg.MarkdownMetadataValue:
    def cell(v) -> str:
        s = " ".join(str(v if v is not None else "").split()).replace("|", "\\|")
        return s if len(s) <= width else s[: width - 1] + "\u2026"

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows[:limit]:
        lines.append("| " + " | ".join(cell(row.get(c)) for c in columns) + " |")
    if len(rows) > limit:
        lines.append(f"\n_{len(rows) - limit} more rows not shown_")
    if not rows:
        lines.append("| " + " | ".join("" for _ in columns) + " |")
    return dg.MetadataValue.md("\n".join(lines))


def add_partition_metadata(context: dg.AssetExecutionContext, by_partition: dict[str, dict]) -> None:
    """Give each partition of a multi-partition step its own metadata, on top of the step's
    (Dagster writes one materialization per partition of the range; this is what each one adds).

    `context.add_asset_metadata(..., partition_key=)` is the public way, but each call lists every
    partition of the dynamic definition again to check the key (500 calls took 104 s with 50,000
    documents). The keys are checked here once against the step's own keys, and the metadata goes
    to the same accumulator that call writes to; the public call is used if that is ever missing."""
    step = getattr(context.op_execution_context, "_step_execution_context", None)
    accumulator = getattr(step, "_metadata_accumulator", None)
    if accumulator is None or not hasattr(accumulator, "with_additional_asset_metadata"):
        for key, metadata in by_partition.items():
            context.add_asset_metadata(metadata, partition_key=key)
        return
    targeted = set(context.partition_keys)
    unknown = [k for k in by_partition if k not in targeted]
    if unknown:
        raise ValueError(f"metadata for partitions this step does not write: {unknown[:5]}")
    for key, metadata in by_partition.items():
        accumulator = accumulator.with_additional_asset_metadata(
            asset_key=context.asset_key, partition_key=key, metadata=metadata
        )
    step._metadata_accumulator = accumulator


def code_version(context: dg.AssetExecutionContext) -> str | None:
    """The code version the running definition gives this asset (see graphrag_pipeline.code_versions)."""
    return context.assets_def.code_versions_by_key.get(context.asset_key)


def versioned(context: dg.AssetExecutionContext, metadata: dict) -> dg.MaterializeResult:
    """The step's result, with its code version in the metadata.

    Its data version is new for every run (the code version and the run id), as Dagster gives an
    unversioned asset: a document written again with other content must still make what is built
    from it stale in the UI (a data version made of the code version alone would stay the same for
    a root asset such as `chunks`, whatever the text). `staleness.stale_by_code_version` reads the
    code version back from it (`<code version>@<run id>`)."""
    version = code_version(context)
    return dg.MaterializeResult(
        metadata={**metadata, "code_version": version or "unversioned"},
        data_version=dg.DataVersion(f"{version}@{context.run.run_id}") if version else None,
    )


OWNERS = ["team:graphrag"]  # who answers for the pipeline's assets in the UI's catalog


def table_schema(columns) -> dg.TableSchemaMetadataValue:
    """`dagster/column_schema` of a table: a polars frame, schema, or {name: dtype} mapping."""
    schema = getattr(columns, "schema", columns)
    return dg.MetadataValue.table_schema(
        dg.TableSchema(columns=[dg.TableColumn(name, str(dtype)) for name, dtype in dict(schema).items()])
    )
