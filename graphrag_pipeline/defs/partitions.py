"""The dynamic partitions: one per corpus document (`documents`) and one per community report (`communities`).

Their names are instance-wide, so they are scoped by the knowledge base (GRAPHRAG_KB, read when the
definitions load, like every setting the definitions use): the default knowledge base keeps the
plain names `documents` and `communities` (the partitions of homes built before GRAPHRAG_KB stay
theirs), any other gets `documents__<kb>` and `communities__<kb>`, so two homes sharing one
instance never add, list or delete each other's partitions.
"""

from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from functools import cached_property

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


def _sql_partitions(instance) -> tuple | None:
    """(storage, table): the instance's SQL event log storage and its `dynamic_partitions` table, which
    this module queries directly; None on any other storage (Dagster's own methods are used)."""
    try:
        from dagster._core.storage.event_log.schema import DynamicPartitionsTable
        from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
    except ImportError:
        return None
    storage = instance.event_log_storage
    if not isinstance(storage, SqlEventLogStorage) or not storage.has_table("dynamic_partitions"):
        return None
    return storage, DynamicPartitionsTable


def list_partition_keys_quickly(instance) -> bool:
    """Make `instance` (this object only) list dynamic partition keys with one column fetched as
    scalars: the same query and order as Dagster's `get_dynamic_partitions`, which fetches rows of
    two columns (45 against 80-250 ms at 50,000 partitions). A build lists the 50,000 `documents`
    keys some 15 times (Dagster itself, for the data version of every step whose input is all of
    them; the stages; the plan). False (nothing changed) on an instance whose partitions are not in
    an SQL event log storage."""
    import sqlalchemy as db

    found = _sql_partitions(instance)
    if found is None:
        return False
    storage, table = found

    memo = _ListingMemo()

    def listed(partitions_def_name: str) -> list[str]:
        query = (
            db.select(table.c.partition).where(table.c.partitions_def_name == partitions_def_name).order_by(table.c.id)
        )
        with storage.index_connection() as conn:
            return list(conn.execute(query).scalars())

    def get_dynamic_partitions(partitions_def_name: str) -> list[str]:
        if not memo.depth or partitions_def_name != documents_partitions.name:
            return listed(partitions_def_name)
        if memo.keys is None:
            memo.keys = listed(partitions_def_name)
        return list(memo.keys)  # (a copy: a caller may change the list it is given)

    def forgetting(change):
        def changed(*args, **kwargs):
            with _listed_again(instance):
                return change(*args, **kwargs)

        return changed

    instance.get_dynamic_partitions = get_dynamic_partitions
    for method in ("add_dynamic_partitions", "delete_dynamic_partition"):
        setattr(instance, method, forgetting(getattr(instance, method)))
    instance._graphrag_listing_memo = memo
    return True


class _ListingMemo:
    """The `documents` keys an instance listed during a run (`listing_memo`); None: not listed yet."""

    def __init__(self) -> None:
        self.depth = 0
        self.keys: list[str] | None = None


@contextmanager
def _listed_again(instance) -> Iterator[None]:
    """Around a change of the instance's partitions: the memo of its listing (if any) is forgotten
    before the change and after it, also when the change fails midway."""
    memo = getattr(instance, "_graphrag_listing_memo", None)
    if isinstance(memo, _ListingMemo):
        memo.keys = None
    try:
        yield
    finally:
        if isinstance(memo, _ListingMemo):
            memo.keys = None


@contextmanager
def listing_memo(instance) -> Iterator[None]:
    """While in the block (a run the build executes in this process), the `documents` keys are
    listed once by an instance of list_partition_keys_quickly and given again from memory: Dagster
    lists them for every step whose input is all of them (6 listings of 50,000 keys per update run,
    40-55 ms each). Adds and deletes made through this instance (or change_partitions) list them
    again; those another process makes during the run are seen once it ends, as a run launched a
    moment earlier would not have seen them either. The communities' keys are always listed: the
    communities asset changes them, and a run of another process may too. Nothing on an instance
    list_partition_keys_quickly did not change. A block inside another (the runs inside the CLI
    build's block, which begins where the build lists the documents for its plan) lists nothing
    again: what the outer block listed stands until it ends, or until a change through the instance."""
    memo = getattr(instance, "_graphrag_listing_memo", None)
    if not isinstance(memo, _ListingMemo):
        yield
        return
    if not memo.depth:  # (a block inside another - a run inside the build's - keeps its listing)
        memo.keys = None
    memo.depth += 1
    try:
        yield
    finally:
        memo.depth -= 1
        if not memo.depth:
            memo.keys = None


def change_partitions(instance, partitions_def: dg.DynamicPartitionsDefinition, add=(), delete=()) -> None:
    """Add the keys ``add`` (in their order: the order partitions are listed and ranged in) to a
    dynamic partitions definition, then delete the keys ``delete``."""
    add = list(add)
    if add:
        instance.add_dynamic_partitions(partitions_def.name, add)
    delete = list(delete)
    if len(delete) > 1 and _delete_at_once(instance, partitions_def.name, delete):
        return
    for key in delete:
        instance.delete_dynamic_partition(partitions_def.name, key)


def _delete_at_once(instance, name: str, keys: list[str]) -> bool:
    """Delete many dynamic partitions in one statement of the instance's SQL event log storage
    (SQLite, Postgres, MySQL: the statement `delete_dynamic_partition` runs once per key, each in its
    own transaction - 60 retired communities cost 0.6 s). False (nothing done) on any other
    storage, which deletes them one by one."""
    found = _sql_partitions(instance)
    if found is None:
        return False
    storage, table = found
    with _listed_again(instance), storage.index_connection() as conn:
        for start in range(0, len(keys), 500):  # bounded statements (SQLite's variable limit)
            conn.execute(
                table.delete().where(
                    (table.c.partitions_def_name == name) & table.c.partition.in_(keys[start : start + 500])
                )
            )
    return True


def not_materialized(instance, asset: str, keys: list[str]) -> set[str]:
    """The keys of `keys` Dagster has no materialization of `asset` for: documents not processed
    yet, whose outputs may be absent. Every other key's outputs must be there."""
    done = instance.get_materialized_partitions(asset_key(asset))
    return {k for k in keys if k not in done}


class NotMaterialized(AbstractSet[str]):
    """`not_materialized(instance, asset, keys)`, asked of the instance only when first used: the
    readers of every document's outputs look at it only for a document whose files are missing,
    and listing the materialized partitions groups every materialization event of the asset (0.1 s
    and more at 50,000 documents, more with each update)."""

    def __init__(self, instance, asset: str, keys: list[str]):
        self._instance, self._asset, self._keys = instance, asset, keys

    @cached_property
    def _value(self) -> set[str]:
        return not_materialized(self._instance, self._asset, self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._value

    def __iter__(self) -> Iterator[str]:
        return iter(self._value)

    def __len__(self) -> int:
        return len(self._value)


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
