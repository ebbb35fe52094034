"""The Elasticsearch index: the seeds' document model, incremental and atomic writes.

One index per knowledge base behind an alias. Records are typed by `knowledge_graph_kwd`
(entity, relation, community_report, chunk, ty2ents, meta) and carry their vector in
`q_<dim>_vec` (dense_vector, cosine, HNSW). Document ids are deterministic, so a rewrite is an
overwrite; each document stores a hash of its content, so a sync writes only what changed and
deletes by id what disappeared. A full rebuild loads a new index and moves the alias in one
atomic `_aliases` call; if anything fails before that, the old index keeps serving.
Only core APIs are used (no painless, ingest, _reindex or _delete_by_query).

`sync_index` follows the DuckDB index: when the `meta` record in Elasticsearch says it holds
exactly the DuckDB index the latest publish was derived from (`previous_index_id`), only the
records named in DuckDB's `changes` table are read, written or deleted ("delta"); otherwise the
whole index is read and synced by content hash ("sync") or loaded anew ("rebuild").
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import polars as pl

from graphrag_pipeline.index.records import NHOP_ORDER_SQL
from graphrag_pipeline.urls import redact_url

SCHEMA_VERSION = 3  # 2: documents_kwd on community reports (their sources); 3: chunk pages and section
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
            "community_ids_kwd": kw,
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
            "n_hop_with_weight": {"type": "object", "enabled": False},
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
    return [round(float(x), 7) for x in v]


def _hash_id(prefix: str, *parts: str) -> str:
    return prefix + "-" + hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:32]


def build_documents(tables: dict[str, pl.DataFrame], meta: dict) -> dict[str, dict]:
    """Deterministic id -> document for every record of the index tables."""
    dim = int(meta["embedding_dim"])
    vf = vector_field(dim)
    docs: dict[str, dict] = {}
    nhop: dict[str, list] = {}
    for key, path, weights in tables["nhop"].select("entity_key", "path", "weights").iter_rows():
        nhop.setdefault(key, []).append({"path": list(path), "weights": list(weights)})
    for e in tables["entities"].iter_rows(named=True):
        docs[_hash_id("ent", e["key"])] = {
            KG: "entity",
            "entity_kwd": e["name"],
            "entity_key_kwd": e["key"],
            "entity_type_kwd": e["type"],
            "content_with_weight": e["description"],
            "rank_flt": float(e["pagerank"]),
            "degree_int": int(e["degree"]),
            "source_id": list(e["source_ids"] or []),
            "doc_ids_kwd": list(e["doc_ids"] or []),
            "community_ids_kwd": list(e["community_ids"] or []),
            "n_hop_with_weight": nhop.get(e["key"], []),
            vf: _vec(e["embedding"]),
        }
    for r in tables["relations"].iter_rows(named=True):
        docs[_hash_id("rel", r["source_key"], r["target_key"])] = {
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
    for c in tables["community_reports"].iter_rows(named=True):
        docs[_hash_id("rep", c["community_id"])] = {
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
    for ch in tables["chunks"].iter_rows(named=True):
        docs[_hash_id("chk", ch["doc_id"], ch["chunk_id"])] = {
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
    pool = {t: list(e) for t, e in tables["ty2ents"].select("type", "entities").iter_rows()}
    docs["ty2ents"] = {KG: "ty2ents", "content_with_weight": json.dumps(pool, ensure_ascii=False)}
    docs["meta"] = {KG: "meta", "content_with_weight": json.dumps(meta, ensure_ascii=False, sort_keys=True)}
    for doc in docs.values():
        doc["content_hash_kwd"] = hashlib.sha256(
            json.dumps(doc, sort_keys=True, ensure_ascii=False).encode()
        ).hexdigest()[:32]
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
            stats = _rebuild(es, cfg, docs, dim, current)
        else:
            stats = _sync(es, cfg, docs, current)
        stats.reason = reason or "incremental"
        stats.seconds = time.perf_counter() - started
        return stats
    finally:
        es.close()


def _rebuild(es, cfg: EsConfig, docs: dict[str, dict], dim: int, current: str | None) -> EsWriteStats:
    new_index = f"{cfg.alias}-{time.strftime('%Y%m%d%H%M%S')}-{time.time_ns() % 1_000_000:06d}"
    try:
        es.indices.create(
            index=new_index,
            mappings=mappings(dim),
            settings={"number_of_shards": 1, "number_of_replicas": 0, "refresh_interval": "-1"},
        )
        written = _bulk(
            es, ({"_op_type": "index", "_index": new_index, "_id": i, "_source": d} for i, d in docs.items())
        )
        es.indices.put_settings(index=new_index, settings={"refresh_interval": "1s"})
        es.indices.refresh(index=new_index)
        count = es.count(index=new_index)["count"]
        if count != len(docs):
            raise RuntimeError(f"new index holds {count} documents, expected {len(docs)}")
        actions = [{"add": {"index": new_index, "alias": cfg.alias}}]
        if current:
            actions.insert(0, {"remove": {"index": current, "alias": cfg.alias}})
        es.indices.update_aliases(actions=actions)  # the atomic switch
    except Exception as exc:  # noqa: BLE001 - anything before the switch leaves the old index serving
        try:
            es.options(ignore_status=404).indices.delete(index=new_index)
        except Exception:  # noqa: BLE001 - best effort clean-up; the original error matters
            pass
        raise cfg.error("rebuilding the index", exc) from None
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
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = {
            name: con.sql(f"SELECT * FROM {name}" + (f" ORDER BY {_ORDER[name]}" if name in _ORDER else "")).pl()
            for name in ("entities", "relations", "community_reports", "chunks", "nhop", "ty2ents")
        }
        meta = {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM meta").fetchall()}
    finally:
        con.close()
    return tables, meta


@dataclass
class DuckDBDelta:
    """The records of one DuckDB publish's `changes`, as Elasticsearch documents."""

    meta: dict
    docs: dict[str, dict]  # id -> document to write (the meta record included)
    delete_ids: list[str]
    total: int  # documents the whole index makes


def read_duckdb_delta(path) -> DuckDBDelta:
    """Only the records named in the `changes` table of a published DuckDB index (rows of other keys
    are never read)."""
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        meta = {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM meta").fetchall()}
        changes = con.sql("SELECT table_name, key, key2, op FROM changes").pl()

        def keys(table: str, op: str) -> pl.DataFrame:
            return changes.filter((pl.col("table_name") == table) & (pl.col("op") == op))

        def rows(table: str, sql_keys: pl.DataFrame, cols: list[str], order: str = "") -> pl.DataFrame:
            con.register("_k", sql_keys.to_arrow())
            try:
                on = " AND ".join(f"t.{c} = _k.{c}" for c in cols)
                return con.sql(
                    f"SELECT t.* FROM {table} t WHERE EXISTS (SELECT 1 FROM _k WHERE {on})"
                    + (f" ORDER BY {order}" if order else "")
                ).pl()
            finally:
                con.unregister("_k")

        # an entity's document carries its n-hop paths: new paths rewrite it too
        ent_keys = pl.concat(
            [keys("entities", "upsert").select("key"), changes.filter(pl.col("table_name") == "nhop").select("key")]
        ).unique()
        entities = rows("entities", ent_keys, ["key"])
        nhop = rows("nhop", entities.select(pl.col("key").alias("entity_key")), ["entity_key"], NHOP_ORDER_SQL)
        relations = rows(
            "relations",
            keys("relations", "upsert").select(pl.col("key").alias("source_key"), pl.col("key2").alias("target_key")),
            ["source_key", "target_key"],
        )
        reports = rows(
            "community_reports",
            keys("community_reports", "upsert").select(pl.col("key").alias("community_id")),
            ["community_id"],
        )
        chunks = rows(
            "chunks",
            keys("chunks", "upsert").select(pl.col("key").alias("doc_id"), pl.col("key2").alias("chunk_id")),
            ["doc_id", "chunk_id"],
        )
        ty2ents = con.sql(f"SELECT * FROM ty2ents ORDER BY {_ORDER['ty2ents']}").pl()
        n = {
            t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
            for t in ("entities", "relations", "community_reports")
        }
        n_chunks = con.execute("SELECT count(*) FROM (SELECT DISTINCT doc_id, chunk_id FROM chunks)").fetchall()[0][0]
    finally:
        con.close()
    docs = build_documents(
        {
            "entities": entities,
            "relations": relations,
            "community_reports": reports,
            "chunks": chunks,
            "nhop": nhop,
            "ty2ents": ty2ents,
        },
        meta,
    )
    if not changes.filter(pl.col("table_name") == "ty2ents").height:
        docs.pop("ty2ents")
    delete_ids = (
        [_hash_id("ent", k) for k in keys("entities", "delete")["key"].to_list()]
        + [_hash_id("rel", a, b) for a, b in keys("relations", "delete").select("key", "key2").iter_rows()]
        + [_hash_id("rep", k) for k in keys("community_reports", "delete")["key"].to_list()]
        + [_hash_id("chk", d, c) for d, c in keys("chunks", "delete").select("key", "key2").iter_rows()]
    )
    return DuckDBDelta(meta, docs, delete_ids, sum(n.values()) + n_chunks + 2)


def read_duckdb_meta(path) -> dict:
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        return {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM meta").fetchall()}
    finally:
        con.close()


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


def _apply_delta(es, cfg: EsConfig, index: str, delta: DuckDBDelta) -> EsWriteStats:
    """Write the changed records and delete the vanished ones; the meta record goes last, so an
    interrupted delta leaves Elasticsearch claiming the old version (and the next run repeats it)."""
    docs = dict(delta.docs)
    meta_doc = docs.pop("meta")
    try:
        actions = [{"_op_type": "index", "_index": index, "_id": i, "_source": d} for i, d in docs.items()]
        actions += [{"_op_type": "delete", "_index": index, "_id": i} for i in delta.delete_ids]
        if actions:
            _bulk(es, actions)
        es.index(index=index, id="meta", document=meta_doc)
        es.indices.refresh(index=index)
    except EsIndexError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise cfg.error("applying the index delta", exc) from None
    written = len(docs) + 1
    return EsWriteStats(
        index=index,
        full_rebuild=False,
        written=written,
        deleted=len(delta.delete_ids),
        unchanged=max(0, delta.total - written),
    )


def sync_index(cfg: EsConfig, duckdb_path, *, full_rebuild: bool = False) -> EsWriteStats:
    """Bring the alias up to the published DuckDB index: by its delta when Elasticsearch holds exactly
    the index that delta starts from, else by a content-hash sync or a rebuild (`publish`)."""
    started = time.perf_counter()
    meta = read_duckdb_meta(duckdb_path)
    dim = int(meta["embedding_dim"])
    version = meta.get("index_version")
    reason = "full rebuild requested" if full_rebuild else ""
    if not full_rebuild:
        es = cfg.client()
        try:
            try:
                current = _current_index(es, cfg.alias)
                problem = _mapping_problem(es, current, dim) if current else "no index yet"
                held = _es_meta(es, current) if current and not problem else {}
            except Exception as exc:  # noqa: BLE001 - connection refused, auth, TLS...
                raise cfg.error("reading the alias", exc) from None
            if problem:
                reason = problem
            elif held.get("index_id") and held.get("index_id") == meta.get("index_id"):
                counts = meta.get("counts") or {}
                records = (
                    sum(int(counts.get(t, 0)) for t in ("entities", "relations", "community_reports", "chunks")) + 2
                )
                return EsWriteStats(
                    index=current,
                    full_rebuild=False,
                    unchanged=records,
                    seconds=time.perf_counter() - started,
                    reason="already holds this index version",
                    path="current",
                    index_version=version,
                )
            elif (
                meta.get("previous_index_id")
                and held.get("index_id") == meta.get("previous_index_id")
                and (delta := read_duckdb_delta(duckdb_path)).meta.get("index_id") == meta.get("index_id")
            ):
                stats = _apply_delta(es, cfg, current, delta)
                stats.reason = f"delta from index version {held.get('index_version')} to {version}"
                stats.path, stats.index_version = "delta", version
                stats.seconds = time.perf_counter() - started
                return stats
            else:
                reason = (
                    f"Elasticsearch holds index version {held.get('index_version')}, the latest delta starts "
                    f"from version {meta.get('previous_version')}"
                )
        finally:
            es.close()
    tables, meta = read_duckdb_tables(duckdb_path)
    stats = publish(cfg, build_documents(tables, meta), dim, full_rebuild=full_rebuild)
    stats.path = "rebuild" if stats.full_rebuild else "sync"
    if full_rebuild:
        stats.reason = reason
    elif reason and stats.reason == "incremental":  # a content-hash sync: say why the delta could not be used
        stats.reason = reason
    stats.index_version = version
    stats.seconds = time.perf_counter() - started
    return stats
