"""The Elasticsearch index: the seeds' document model, incremental and atomic writes.

One index per knowledge base behind an alias. Records are typed by `knowledge_graph_kwd`
(entity, relation, community_report, chunk, ty2ents, meta) and carry their vector in
`q_<dim>_vec` (dense_vector, cosine, HNSW). Document ids are deterministic, so a rewrite is an
overwrite; each document stores a hash of its content, so a sync writes only what changed and
deletes by id what disappeared. A full rebuild loads a new index and moves the alias in one
atomic `_aliases` call; if anything fails before that, the old index keeps serving.
Only core APIs are used (no painless, ingest, _reindex or _delete_by_query).

`sync_records` publishes from the pipeline's own inputs: the records the DuckDB writer builds
(index/records.py) from the graph, communities, reports and chunks, never the DuckDB file, so it
runs on any machine that can read the storage layer. A state file of record fingerprints, named
by the meta record, lets it write only the records that changed ("delta"); without it every
record's content hash is compared with the cluster's ("sync").
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import polars as pl

from graphrag_pipeline import interrupts
from graphrag_pipeline.index.protocol import Embedder
from graphrag_pipeline.index.records import (
    HASH,
    HASH_SCHEME,
    NHOP_ORDER_SQL,
    NHOP_SCHEMA,
    IndexTables,
    nhop_affected,
    nhop_paths,
    rows_with_keys,
    with_hash,
    with_vectors,
)
from graphrag_pipeline.urls import redact_url

SCHEMA_VERSION = 5  # 2: documents_kwd on community reports (their sources); 3: chunk pages and section;
# 4: entities without community_ids_kwd; 5: n_hop_paths (ranked paths, no weights) for n_hop_with_weight
KG = "knowledge_graph_kwd"


class EsIndexError(RuntimeError):
    """Elasticsearch could not be used; the message names the URL without credentials."""


def _home_identity(home: str | os.PathLike | None) -> str | os.PathLike:
    """What names a home on every machine: a remote home's URL (never its local working copy)."""
    from graphrag_pipeline.settings import setting

    configured = setting("GRAPHRAG_HOME")
    if isinstance(configured, str) or home is None:
        return configured
    return home


@dataclass
class EsConfig:
    url: str
    alias: str
    api_key: str | None = None
    username: str | None = None
    password: str | None = None
    ca_certs: str | None = None
    verify_certs: bool = True
    request_timeout: float = 30.0

    @classmethod
    def from_env(cls, home: str | os.PathLike | None = None) -> EsConfig | None:
        """The configuration the GRAPHRAG_ES_* settings give, for the home `home` (default:
        GRAPHRAG_HOME's); None when GRAPHRAG_ES_URL is unset."""
        from graphrag_pipeline.settings import DEFAULT_KB, es_index_for, raw, setting

        url = setting("GRAPHRAG_ES_URL")
        if not url:
            return None
        parts = urlsplit(url)
        return cls(
            url=redact_url(url, keep_query=True),
            alias=setting("GRAPHRAG_ES_INDEX")
            if raw("GRAPHRAG_ES_INDEX") or setting("GRAPHRAG_KB") != DEFAULT_KB
            else es_index_for(_home_identity(home)),
            api_key=raw("GRAPHRAG_ES_API_KEY"),
            username=raw("GRAPHRAG_ES_USERNAME") or (parts.username or None),
            password=raw("GRAPHRAG_ES_PASSWORD") or (parts.password or None),
            ca_certs=raw("GRAPHRAG_ES_CA_CERTS"),
            verify_certs=setting("GRAPHRAG_ES_VERIFY_CERTS"),
        )

    def secrets(self) -> list[str]:
        return [s for s in (self.api_key, self.password) if s]

    def client(self):
        from elasticsearch import Elasticsearch

        kw: dict = {"request_timeout": self.request_timeout, "retry_on_timeout": True, "max_retries": 3}
        if self.api_key:
            kw["api_key"] = self.api_key
        elif self.username:
            kw["basic_auth"] = (self.username, self.password or "")
        if self.url.startswith("https"):
            kw["verify_certs"] = self.verify_certs
            if self.ca_certs:
                kw["ca_certs"] = self.ca_certs
        return Elasticsearch(self.url, **kw)

    def error(self, action: str, exc: BaseException) -> EsIndexError:
        text = f"{type(exc).__name__}: {exc}"
        for secret in self.secrets():
            text = text.replace(secret, "***")
        return EsIndexError(f"Elasticsearch at {self.url} failed while {action}: {text[:600]}")


def vector_field(dim: int) -> str:
    return f"q_{dim}_vec"


def mappings(dim: int) -> dict:
    kw = {"type": "keyword"}
    return {
        "dynamic": False,
        "_meta": {"schema_version": SCHEMA_VERSION, "dim": dim},
        "properties": {
            KG: kw,
            "content_hash_kwd": kw,
            "entity_kwd": kw,
            "entity_key_kwd": kw,
            "entity_type_kwd": kw,
            "source_id": kw,
            "doc_ids_kwd": kw,
            "rank_flt": {"type": "float"},
            "degree_int": {"type": "integer"},
            "from_entity_kwd": kw,
            "to_entity_kwd": kw,
            "from_key_kwd": kw,
            "to_key_kwd": kw,
            "keywords_kwd": kw,
            "weight_flt": {"type": "float"},
            "weight_int": {"type": "integer"},
            "community_id_kwd": kw,
            "level_int": {"type": "integer"},
            "docnm_kwd": kw,
            "entities_kwd": kw,
            "entity_keys_kwd": kw,
            "documents_kwd": kw,
            "rating_flt": {"type": "float"},
            "community_weight_flt": {"type": "float"},
            "chunk_id_kwd": kw,
            "doc_id_kwd": kw,
            "position_int": {"type": "integer"},
            "page_start_int": {"type": "integer"},
            "page_end_int": {"type": "integer"},
            "section_kwd": kw,
            "content_with_weight": {"type": "text"},
            "content": {"type": "text"},
            "title_tks": {"type": "text"},
            "n_hop_paths": {"type": "object", "enabled": False},
            vector_field(dim): {
                "type": "dense_vector",
                "dims": dim,
                "index": True,
                "similarity": "cosine",
                "index_options": {"type": "hnsw", "m": 16, "ef_construction": 100},
            },
        },
    }


def _vec(v) -> list[float]:
    """The vector rounded to 7 decimals (`round`, exactly). Each distinct value is rounded once: a
    vector has few distinct values (the offline embedder's are counts over a norm), and rounding
    dominated the cost of a document."""
    values = [float(x) for x in v]
    rounded = {x: round(x, 7) for x in set(values) if x}
    return [rounded[x] if x else x for x in values]  # zeros as they are: 0.0 and -0.0 share a dict key


def _hash_id(prefix: str, *parts: str) -> str:
    return prefix + "-" + hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:32]


def _finish(doc: dict) -> dict:
    doc["content_hash_kwd"] = hashlib.sha256(json.dumps(doc, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[
        :32
    ]
    return doc


def meta_document(meta: dict) -> dict:
    return _finish({KG: "meta", "content_with_weight": json.dumps(meta, ensure_ascii=False, sort_keys=True)})


def iter_documents(tables: dict[str, pl.DataFrame], dim: int) -> Iterator[tuple[str, dict]]:
    """(deterministic id, document) for every row of the tables given (with vectors); an entity's
    document carries its n-hop paths (from `nhop`, which must hold those of the entities given).
    No meta record (see meta_document)."""
    vf = vector_field(dim)
    nhop: dict[str, list] = {}
    if "nhop" in tables:
        for key, path in tables["nhop"].sort("entity_key", "rank").select("entity_key", "path").iter_rows():
            nhop.setdefault(key, []).append(list(path))
    for e in tables["entities"].iter_rows(named=True) if "entities" in tables else ():
        yield (
            _hash_id("ent", e["key"]),
            _finish(
                {
                    KG: "entity",
                    "entity_kwd": e["name"],
                    "entity_key_kwd": e["key"],
                    "entity_type_kwd": e["type"],
                    "content_with_weight": e["description"],
                    "rank_flt": float(e["pagerank"]),
                    "degree_int": int(e["degree"]),
                    "source_id": list(e["source_ids"] or []),
                    "doc_ids_kwd": list(e["doc_ids"] or []),
                    "n_hop_paths": nhop.get(e["key"], []),
                    vf: _vec(e["embedding"]),
                }
            ),
        )
    for r in tables["relations"].iter_rows(named=True) if "relations" in tables else ():
        yield (
            _hash_id("rel", r["source_key"], r["target_key"]),
            _finish(
                {
                    KG: "relation",
                    "from_entity_kwd": r["source"],
                    "to_entity_kwd": r["target"],
                    "from_key_kwd": r["source_key"],
                    "to_key_kwd": r["target_key"],
                    "content_with_weight": r["description"],
                    "keywords_kwd": list(r["keywords"] or []),
                    "weight_flt": float(r["weight"]),
                    "weight_int": int(round(r["weight"])),
                    "source_id": list(r["source_ids"] or []),
                    vf: _vec(r["embedding"]),
                }
            ),
        )
    for c in tables["community_reports"].iter_rows(named=True) if "community_reports" in tables else ():
        yield (
            _hash_id("rep", c["community_id"]),
            _finish(
                {
                    KG: "community_report",
                    "community_id_kwd": c["community_id"],
                    "level_int": int(c["level"]),
                    "docnm_kwd": c["title"],
                    "title_tks": c["title"],
                    "summary": c["summary"],
                    "content_with_weight": c["text"],
                    "weight_flt": float(c["rating"]),
                    "rating_flt": float(c["rating"]),
                    "community_weight_flt": float(c["weight"]),
                    "rating_explanation": c["rating_explanation"],
                    "findings_json": c["findings"],
                    "entities_kwd": list(c["entity_names"] or []),
                    "entity_keys_kwd": list(c["entity_keys"] or []),
                    "documents_kwd": list(c.get("documents") or []),
                    "extractive": bool(c["extractive"]),
                    vf: _vec(c["embedding"]),
                }
            ),
        )
    for ch in tables["chunks"].iter_rows(named=True) if "chunks" in tables else ():
        yield (
            _hash_id("chk", ch["doc_id"], ch["chunk_id"]),
            _finish(
                {
                    KG: "chunk",
                    "chunk_id_kwd": ch["chunk_id"],
                    "doc_id_kwd": ch["doc_id"],
                    "docnm_kwd": ch["doc"],
                    "position_int": int(ch["position"]),
                    "page_start_int": ch.get("page_start"),
                    "page_end_int": ch.get("page_end"),
                    "section_kwd": ch.get("section"),
                    "content": ch["text"],
                    vf: _vec(ch["embedding"]),
                }
            ),
        )
    if "ty2ents" in tables:
        pool = {t: list(e) for t, e in tables["ty2ents"].select("type", "entities").iter_rows()}
        yield "ty2ents", _finish({KG: "ty2ents", "content_with_weight": json.dumps(pool, ensure_ascii=False)})


def build_documents(tables: dict[str, pl.DataFrame], meta: dict) -> dict[str, dict]:
    """Deterministic id -> document for every record of the index tables (a later row of a key wins)."""
    docs = dict(iter_documents(tables, int(meta["embedding_dim"])))
    docs["meta"] = meta_document(meta)
    return docs


@dataclass
class EsWriteStats:
    index: str
    full_rebuild: bool
    written: int = 0
    deleted: int = 0
    unchanged: int = 0
    seconds: float = 0.0
    previous_index: str | None = None
    reason: str = ""
    path: str = (
        ""  # delta (changed records only), sync (all records, by content hash), rebuild, current (nothing to do)
    )
    index_version: int | None = None  # the DuckDB index version Elasticsearch now holds

    def to_metadata(self) -> dict:
        return {
            "es_index": self.index,
            "es_full_rebuild": self.full_rebuild,
            "es_written": self.written,
            "es_deleted": self.deleted,
            "es_unchanged": self.unchanged,
            "es_reason": self.reason,
            "es_path": self.path,
            "es_index_version": self.index_version,
        }


def _bulk(es, actions: Iterable[dict]) -> int:
    from elasticsearch import helpers

    ok, errors = helpers.bulk(
        es,
        actions,
        chunk_size=500,
        max_retries=3,
        initial_backoff=1,
        max_backoff=30,
        raise_on_error=False,
        raise_on_exception=True,
        stats_only=False,
    )
    errors = [e for e in errors if not ("delete" in e and e["delete"].get("status") == 404)]
    if errors:
        first = errors[0]
        raise RuntimeError(f"{len(errors)} bulk actions failed, first: {json.dumps(first)[:400]}")
    return ok


def _current_index(es, alias: str) -> str | None:
    if not es.indices.exists_alias(name=alias):
        return None
    names = list(es.indices.get_alias(name=alias).keys())
    return sorted(names)[-1] if names else None


def publish(cfg: EsConfig, docs: dict[str, dict], dim: int, *, full_rebuild: bool = False) -> EsWriteStats:
    """Sync `docs` to the alias: incrementally when possible, else a new index and an alias swap."""
    started = time.perf_counter()
    es = cfg.client()
    try:
        try:
            current = _current_index(es, cfg.alias)
        except Exception as exc:  # noqa: BLE001 - connection refused, auth, TLS...
            raise cfg.error("reading the alias", exc) from None
        reason = "requested" if full_rebuild else ""
        if current and not full_rebuild:
            meta = es.indices.get_mapping(index=current)[current]["mappings"].get("_meta", {})
            if meta.get("schema_version") != SCHEMA_VERSION or int(meta.get("dim", -1)) != dim:
                full_rebuild, reason = (
                    True,
                    f"mapping changed (schema {meta.get('schema_version')}, dim {meta.get('dim')})",
                )
        if not current:
            full_rebuild, reason = True, "no index yet"
        if full_rebuild:
            stats = _rebuild(es, cfg, docs.items(), len(docs), dim, current)
        else:
            stats = _sync(es, cfg, docs, current)
        stats.reason = reason or "incremental"
        stats.seconds = time.perf_counter() - started
        return stats
    finally:
        es.close()


def _loading_marker(state_dir: Path | None, alias: str) -> Path | None:
    return Path(state_dir) / f"{alias}.loading.json" if state_dir is not None else None


def _remove_abandoned_load(es, state_dir: Path | None, alias: str, current: str | None, say) -> None:
    """An index a killed process was loading (named by its marker; never the alias's index) is deleted."""
    marker = _loading_marker(state_dir, alias)
    if marker is None or not marker.exists():
        return
    try:
        name = json.loads(marker.read_text(encoding="utf-8")).get("index")
    except (OSError, ValueError, AttributeError):
        name = None
    if isinstance(name, str) and name.startswith(f"{alias}-") and name != current:
        es.options(ignore_status=404).indices.delete(index=name)
        say(f"Elasticsearch: removed the index {name}, left half-loaded by a build that was stopped")
    marker.unlink(missing_ok=True)


def _unmark(marker: Path | None) -> None:
    if marker is not None:
        marker.unlink(missing_ok=True)


def _rebuild(
    es,
    cfg: EsConfig,
    docs: Iterable[tuple[str, dict]],
    n_docs: int,
    dim: int,
    current: str | None,
    state_dir: Path | None = None,
) -> EsWriteStats:
    """Load `docs` (n_docs of them) into a new index and move the alias to it in one atomic call.
    The new index's name is kept in a marker in `state_dir` while it loads: a process killed then
    (SIGKILL, power loss) leaves it named, and the next sync deletes it."""
    new_index = f"{cfg.alias}-{time.strftime('%Y%m%d%H%M%S')}-{time.time_ns() % 1_000_000:06d}"
    marker = _loading_marker(state_dir, cfg.alias)
    if marker is not None:
        from graphrag_pipeline.storage.files import write_json

        marker.parent.mkdir(parents=True, exist_ok=True)
        write_json({"index": new_index}, marker)

    def clean_up() -> None:
        """The half-loaded index goes; its marker only once it is gone (else the next sync deletes it)."""
        try:
            es.options(ignore_status=404).indices.delete(index=new_index)
        except Exception:  # noqa: BLE001 - best effort clean-up; the original error matters
            return
        _unmark(marker)

    try:
        es.indices.create(
            index=new_index,
            mappings=mappings(dim),
            settings={"number_of_shards": 1, "number_of_replicas": 0, "refresh_interval": "-1"},
        )
        written = _bulk(es, ({"_op_type": "index", "_index": new_index, "_id": i, "_source": d} for i, d in docs))
        es.indices.put_settings(index=new_index, settings={"refresh_interval": "1s"})
        es.indices.refresh(index=new_index)
        count = es.count(index=new_index)["count"]
        if count != n_docs:
            raise RuntimeError(f"new index holds {count} documents, expected {n_docs}")
    except BaseException as exc:  # anything before the switch leaves the old index serving
        clean_up()  # also on a stop (Dagster's interruption is a BaseException)
        if not isinstance(exc, Exception):
            raise
        raise cfg.error("rebuilding the index", exc) from None
    actions = [{"add": {"index": new_index, "alias": cfg.alias}}]
    if current:
        actions.insert(0, {"remove": {"index": current, "alias": cfg.alias}})
    # a stop during the switch takes effect after it: Elasticsearch may have switched before its
    # answer came, and the clean-up would then delete the index the alias now names
    with interrupts.deferred():
        try:
            es.indices.update_aliases(actions=actions)  # the atomic switch
        except Exception as exc:  # noqa: BLE001 - refused: the old index still serves
            clean_up()
            raise cfg.error("rebuilding the index", exc) from None
        _unmark(marker)
        if current:
            try:
                es.options(ignore_status=404).indices.delete(index=current)
            except Exception:  # noqa: BLE001 - an old index left behind is harmless
                pass
    return EsWriteStats(index=new_index, full_rebuild=True, written=written, previous_index=current)


def _sync(es, cfg: EsConfig, docs: dict[str, dict], index: str) -> EsWriteStats:
    from elasticsearch import helpers

    try:
        existing = {
            hit["_id"]: hit["_source"].get("content_hash_kwd")
            for hit in helpers.scan(
                es, index=index, query={"query": {"match_all": {}}}, _source=["content_hash_kwd"], size=1000
            )
        }
        changed = {i: d for i, d in docs.items() if existing.get(i) != d["content_hash_kwd"]}
        gone = [i for i in existing if i not in docs]
        actions = [{"_op_type": "index", "_index": index, "_id": i, "_source": d} for i, d in changed.items()]
        actions += [{"_op_type": "delete", "_index": index, "_id": i} for i in gone]
        if actions:
            _bulk(es, actions)
            es.indices.refresh(index=index)
    except EsIndexError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise cfg.error("updating the index", exc) from None
    return EsWriteStats(
        index=index, full_rebuild=False, written=len(changed), deleted=len(gone), unchanged=len(docs) - len(changed)
    )


_ORDER = {"nhop": NHOP_ORDER_SQL, "ty2ents": '"count" DESC, type'}


def read_duckdb_tables(path) -> tuple[dict[str, pl.DataFrame], dict]:
    """The tables and meta of a published DuckDB index (the source of an Elasticsearch sync)."""
    from graphrag_pipeline.index.duckdb_reader import attach_read_only, release

    con = attach_read_only(path)
    try:
        tables = {
            name: con.sql(f"SELECT * FROM {name}" + (f" ORDER BY {_ORDER[name]}" if name in _ORDER else "")).pl()
            for name in ("entities", "relations", "community_reports", "chunks", "nhop", "ty2ents")
        }
        meta = {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM meta").fetchall()}
    finally:
        release(con)
    return tables, meta


def _es_meta(es, index: str) -> dict:
    res = es.options(ignore_status=404).get(index=index, id="meta")
    if not res.get("found"):
        return {}
    try:
        return json.loads(res["_source"].get("content_with_weight") or "{}")
    except ValueError:
        return {}


def _mapping_problem(es, index: str, dim: int) -> str | None:
    meta = es.indices.get_mapping(index=index)[index]["mappings"].get("_meta", {})
    if meta.get("schema_version") != SCHEMA_VERSION or int(meta.get("dim", -1)) != dim:
        return f"mapping changed (schema {meta.get('schema_version')}, dim {meta.get('dim')})"
    return None


# -- publishing from the pipeline's own inputs ----------------------------------------------------
# What Elasticsearch holds is remembered as one fingerprint per record (kind, key, key2, fp) in a
# state file named by a random state id, which the index's meta record names too: when both agree,
# the next sync compares fingerprints locally and writes only the records that differ ("delta");
# otherwise (no state file on this machine, an interrupted sync) it compares every record's
# content hash with the cluster's ("sync"). The records are those the DuckDB writer publishes
# (index/records.py), built from the same inputs: the DuckDB file is never read.
STATE_SCHEMA = {
    "kind": pl.Utf8,
    "key": pl.Utf8,
    "key2": pl.Utf8,
    "fp": pl.UInt64,
    "nhop_fp": pl.UInt64,  # entities: the fingerprint of their n-hop paths
    "weight": pl.Float64,  # relations: their weight (the edges whose change moves n-hop paths)
}
_KINDS = {  # kind -> (table, id prefix, key columns)
    "entity": ("entities", "ent", ("key",)),
    "relation": ("relations", "rel", ("source_key", "target_key")),
    "community_report": ("community_reports", "rep", ("community_id",)),
    "chunk": ("chunks", "chk", ("doc_id", "chunk_id")),
}
_FP_SEED = 0x657366
BATCH = 2000  # rows given vectors and turned into documents at a time (bounded memory at any size)


def _fingerprint(*cols: str | pl.Expr) -> pl.Expr:
    return pl.struct(*cols).struct.json_encode().hash(_FP_SEED)


def _keyed(kind: str, df: pl.DataFrame, fp: pl.Expr, *extra: pl.Expr) -> pl.DataFrame:
    keys = _KINDS[kind][2]
    return df.select(
        pl.lit(kind).alias("kind"),
        pl.col(keys[0]).alias("key"),
        (pl.col(keys[1]) if len(keys) > 1 else pl.lit("")).alias("key2"),
        fp.alias("fp"),
        *extra,
    )


def _unique_chunks(chunks: pl.DataFrame) -> pl.DataFrame:
    """One row per chunk document: the last row of a key (an identical paragraph repeated in one
    document shares its key; the last one wins, as in build_documents)."""
    return chunks.unique(["doc_id", "chunk_id"], keep="last", maintain_order=True)


def nhop_fingerprints(nhop: pl.DataFrame) -> pl.DataFrame:
    """entity_key -> nhop_fp: a fingerprint of the entity's n-hop paths, in their order."""
    hashed = nhop if HASH in nhop.columns else with_hash("nhop", nhop)
    return (
        hashed.group_by("entity_key", maintain_order=True)
        .agg(pl.col(HASH).alias("_h"))
        .select("entity_key", _fingerprint("_h").alias("nhop_fp"))
    )


def record_fingerprints(rows: IndexTables, nhop_fp: pl.DataFrame) -> pl.DataFrame:
    """One row per Elasticsearch record but meta: its kind, key, key2 ("" for one-part keys) and a
    fingerprint of all its document is made of but the vector (its row's content hash; an
    entity's n-hop paths included through `nhop_fp`, see nhop_fingerprints; 0 for none). A vector
    follows from its text and the embedder, which the meta record names."""
    ents = rows.entities.join(nhop_fp, left_on="key", right_on="entity_key", how="left", maintain_order="left")
    ents = ents.with_columns(pl.col("nhop_fp").fill_null(0))
    pool = pl.DataFrame({"_h": [rows.ty2ents[HASH].to_list()]}, schema={"_h": pl.List(pl.UInt64)})
    frames = [
        _keyed("entity", ents, _fingerprint(HASH, "nhop_fp"), pl.col("nhop_fp")),
        _keyed("relation", rows.relations, pl.col(HASH), pl.col("weight").cast(pl.Float64)),
        _keyed("community_report", rows.community_reports, pl.col(HASH)),
        _keyed("chunk", _unique_chunks(rows.chunks), pl.col(HASH)),
        pool.select(
            pl.lit("ty2ents").alias("kind"),
            pl.lit("ty2ents").alias("key"),
            pl.lit("").alias("key2"),
            _fingerprint("_h").alias("fp"),
        ),
    ]
    return pl.concat([_state_columns(f) for f in frames])


def _state_columns(df: pl.DataFrame) -> pl.DataFrame:
    missing = [pl.lit(None, dtype=t).alias(c) for c, t in STATE_SCHEMA.items() if c not in df.columns]
    return df.with_columns(missing).select(list(STATE_SCHEMA)).cast(STATE_SCHEMA)


def _nhop_since(state: pl.DataFrame, edges: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """The n-hop fingerprints of every entity, computed only for the entities whose paths may have
    changed since `state` (records/nhop_affected: the ends of added, removed or re-weighted edges
    and the nodes passing through them); the others keep theirs. Also how many were computed."""
    old_edges = state.filter(pl.col("kind") == "relation").select(
        pl.col("key").alias("source_key"), pl.col("key2").alias("target_key"), "weight"
    )
    affected = sorted(nhop_affected(old_edges, edges))
    old = state.filter(pl.col("kind") == "entity").select(pl.col("key").alias("entity_key"), "nhop_fp")
    if not affected:
        return old, 0
    fresh = nhop_fingerprints(nhop_paths(edges, only=affected))
    gone = pl.Series("k", affected, dtype=pl.Utf8).implode()
    return pl.concat([old.filter(~pl.col("entity_key").is_in(gone)), fresh]), len(affected)


def document_ids(records: pl.DataFrame) -> list[str]:
    """The Elasticsearch ids of records (kind, key, key2)."""
    out = []
    for kind, key, key2 in records.select("kind", "key", "key2").iter_rows():
        if kind == "ty2ents":
            out.append("ty2ents")
        else:
            prefix, keys = _KINDS[kind][1], _KINDS[kind][2]
            out.append(_hash_id(prefix, key, key2) if len(keys) > 1 else _hash_id(prefix, key))
    return out


def stream_documents(
    rows: IndexTables,
    nhop: pl.DataFrame,
    embedder: Embedder,
    records: pl.DataFrame | None = None,
    batch: int = BATCH,
) -> Iterator[tuple[str, dict]]:
    """(id, document) of the records named (kind, key, key2; None: all, meta excepted), BATCH rows
    at a time: vectors are computed for those rows only (the endpoint's are cached). `nhop` holds
    the n-hop paths of (at least) the entities written."""
    dim = embedder.dim
    for kind, (table, _, keys) in _KINDS.items():
        df = rows.get(table)
        if kind == "chunk":
            df = _unique_chunks(df)
        if records is not None:
            want = records.filter(pl.col("kind") == kind)
            if not want.height:
                continue
            want = want.select(
                pl.col("key").alias(keys[0]), *([pl.col("key2").alias(keys[1])] if len(keys) > 1 else [])
            )
            df = rows_with_keys(df, want, keys)
        for offset in range(0, df.height, batch):
            part = with_vectors(table, df.slice(offset, batch), embedder)
            tables = {table: part}
            if kind == "entity":
                tables["nhop"] = nhop.filter(pl.col("entity_key").is_in(part["key"].implode()))
            yield from iter_documents(tables, dim)
    if records is None or records.filter(pl.col("kind") == "ty2ents").height:
        yield from iter_documents({"ty2ents": rows.ty2ents}, dim)


def _state_file(state_dir: Path, alias: str, state_id: str) -> Path:
    return Path(state_dir) / f"{alias}.{state_id}.parquet"


def _read_state(state_dir: Path, alias: str, state_id: str | None) -> pl.DataFrame | None:
    if not state_id or not str(state_id).isalnum():
        return None
    path = _state_file(state_dir, alias, state_id)
    try:
        state = pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError):
        return None
    return state if state.schema == pl.Schema(STATE_SCHEMA) else None


def _write_state(state_dir: Path, alias: str, state_id: str, records: pl.DataFrame) -> None:
    from graphrag_pipeline.storage.files import write_parquet

    Path(state_dir).mkdir(parents=True, exist_ok=True)
    keep = _state_file(state_dir, alias, state_id)
    write_parquet(records.select(list(STATE_SCHEMA)), keep)
    for old in Path(state_dir).glob(f"{alias}.*.parquet"):
        if old != keep:
            old.unlink(missing_ok=True)


def _scan_hashes(es, index: str) -> dict[str, str]:
    from elasticsearch import helpers

    return {
        hit["_id"]: hit["_source"].get("content_hash_kwd")
        for hit in helpers.scan(
            es, index=index, query={"query": {"match_all": {}}}, _source=["content_hash_kwd"], size=2000
        )
    }


def sync_records(
    cfg: EsConfig,
    rows: IndexTables,
    embedder: Embedder,
    info: dict,
    state_dir: Path,
    *,
    full_rebuild: bool = False,
    log=None,
) -> EsWriteStats:
    """Bring the alias up to the records `rows` (index/records.build_index_rows; no vectors, no
    n-hop paths: both are computed here, for the records written, with `embedder` and from the
    relations; with a state, n-hop paths only around the edges that changed).

    delta: the state file the meta record names is here, so only records whose fingerprint changed
    are written and vanished ones deleted by id; sync: every record's content hash is compared with
    the cluster's; rebuild (no index, a mapping or embedder change, or asked): a new index and an
    atomic alias swap; current: nothing differs. A sync marks the meta record (no state id) before
    it writes, so an interrupted one is never taken for a known state."""
    started = time.perf_counter()
    say = log or (lambda message: None)
    dim, model = embedder.dim, embedder.model_id
    es = cfg.client()
    try:
        try:
            current = _current_index(es, cfg.alias)
            problem = _mapping_problem(es, current, dim) if current else "no index yet"
            held = _es_meta(es, current) if current and not problem else {}
            _remove_abandoned_load(es, state_dir, cfg.alias, current, say)
        except Exception as exc:  # noqa: BLE001 - connection refused, auth, TLS...
            raise cfg.error("reading the alias", exc) from None
        reason = (
            "full rebuild requested"
            if full_rebuild
            else problem
            or (f"embedder {held.get('embedding_model')} -> {model}" if held.get("embedding_model") != model else None)
        )
        state_id = uuid.uuid4().hex
        meta = {
            "schema_version": SCHEMA_VERSION,
            "embedding_model": model,
            "embedding_dim": dim,
            **info,
            "counts": {t: n for t, n in rows.counts().items() if t != "nhop"},
            "built_at": time.time(),
            "index_id": uuid.uuid4().hex,
            "index_version": int(held.get("index_version") or 0) + 1,
            "es_state_id": state_id,
            "row_hash_scheme": HASH_SCHEME,  # fingerprints are comparable only under the same scheme
        }
        state = (
            _read_state(state_dir, cfg.alias, held.get("es_state_id"))
            if not reason and held.get("row_hash_scheme") == HASH_SCHEME
            else None
        )
        if state is not None:  # n-hop paths: only where an edge changed since
            nhop_fp, n_affected = _nhop_since(state, rows.relations)
            say(f"Elasticsearch: {n_affected} entities with possibly new n-hop paths")
            records = record_fingerprints(rows, nhop_fp)
            stats = _delta(es, cfg, current, rows, embedder, records, state, held, meta)
        else:
            nhop = with_hash("nhop", nhop_paths(rows.relations))
            records = record_fingerprints(rows, nhop_fingerprints(nhop))
            if reason:
                say(f"Elasticsearch: loading a new index ({reason})")
                docs = itertools.chain(stream_documents(rows, nhop, embedder), [("meta", meta_document(meta))])
                stats = _rebuild(es, cfg, docs, records.height + 1, dim, current, state_dir)
                stats.path, stats.reason = "rebuild", reason
            else:
                say(f"Elasticsearch: no state {held.get('es_state_id')} here; comparing every record's content hash")
                stats = _scan_sync(es, cfg, current, rows, nhop, embedder, records, held, meta)
    finally:
        es.close()
    if stats.path == "current":
        if not _state_file(state_dir, cfg.alias, held["es_state_id"]).exists():
            _write_state(state_dir, cfg.alias, held["es_state_id"], records)
        stats.index_version = held.get("index_version")
    else:
        _write_state(state_dir, cfg.alias, state_id, records)
        stats.index_version = meta["index_version"]
    stats.seconds = time.perf_counter() - started
    return stats


# changed records a delta holds with their vectors before writing them (about 20 MB at 1,536 dimensions per 1,000)
DEFERRED_DELTA_RECORDS = 5_000


def _mark_in_flux(es, index: str, held: dict) -> None:
    """The meta record without a state id: until the sync ends, no state file describes the index."""
    es.index(index=index, id="meta", document=meta_document({**held, "es_state_id": None}))


def _delta(es, cfg, index, rows, embedder, records, state, held, meta) -> EsWriteStats:
    both = records.join(state.rename({"fp": "old"}), on=["kind", "key", "key2"], how="full", coalesce=True)
    changed = both.filter(pl.col("fp").is_not_null() & pl.col("fp").ne_missing(pl.col("old")))
    gone = both.filter(pl.col("fp").is_null())
    if not changed.height and not gone.height:
        return EsWriteStats(
            index=index,
            full_rebuild=False,
            unchanged=records.height + 1,
            reason="already holds these records",
            path="current",
        )
    entities = changed.filter(pl.col("kind") == "entity")["key"].to_list()
    nhop = nhop_paths(rows.relations, only=entities) if entities else pl.DataFrame(schema=NHOP_SCHEMA)
    try:
        actions = (
            {"_op_type": "index", "_index": index, "_id": i, "_source": d}
            for i, d in stream_documents(rows, nhop, embedder, changed)
        )
        deletes = [{"_op_type": "delete", "_index": index, "_id": i} for i in document_ids(gone)]
        # up to DEFERRED_DELTA_RECORDS changed records get their vectors first (embedding calls can
        # be stopped), then are written with a stop deferred to the last write: readers never keep
        # half a delta. A larger delta streams (its vectors would not fit in memory at once); a stop
        # then leaves it half written and the meta record without its state: the next sync compares
        # every record.
        small = changed.height <= DEFERRED_DELTA_RECORDS
        writes = [*actions, *deletes] if small else itertools.chain(actions, deletes)
        with interrupts.deferred() if small else contextlib.nullcontext():
            _mark_in_flux(es, index, held)
            _bulk(es, writes)
            es.index(index=index, id="meta", document=meta_document(meta))
            es.indices.refresh(index=index)
    except EsIndexError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise cfg.error("writing the changed records", exc) from None
    return EsWriteStats(
        index=index,
        full_rebuild=False,
        written=changed.height + 1,
        deleted=gone.height,
        unchanged=records.height - changed.height,
        reason=f"{changed.height} records changed, {gone.height} removed since version {held.get('index_version')}",
        path="delta",
    )


def _scan_sync(es, cfg, index, rows, nhop, embedder, records, held, meta) -> EsWriteStats:
    try:
        existing = _scan_hashes(es, index)
        wanted = set(document_ids(records))
        gone = [i for i in existing if i not in wanted and i != "meta"]
        _mark_in_flux(es, index, held)
        written = [0]

        def changed() -> Iterator[dict]:
            for i, d in stream_documents(rows, nhop, embedder):
                if existing.get(i) != d["content_hash_kwd"]:
                    written[0] += 1
                    yield {"_op_type": "index", "_index": index, "_id": i, "_source": d}

        _bulk(es, itertools.chain(changed(), ({"_op_type": "delete", "_index": index, "_id": i} for i in gone)))
        es.index(index=index, id="meta", document=meta_document(meta))
        es.indices.refresh(index=index)
    except EsIndexError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise cfg.error("updating the index", exc) from None
    return EsWriteStats(
        index=index,
        full_rebuild=False,
        written=written[0] + 1,
        deleted=len(gone),
        unchanged=records.height - written[0],
        reason=f"no record state for index version {held.get('index_version')} here: every content hash compared",
        path="sync",
    )
