"""The Elasticsearch index: the seeds' document model, incremental and atomic writes.

One index per knowledge base behind an alias. Records are typed by `knowledge_graph_kwd`
(entity, relation, community_report, chunk, ty2ents, meta) and carry their vector in
`q_<dim>_vec` (dense_vector, cosine, HNSW). Document ids are deterministic, so a rewrite is an
overwrite; each document stores a hash of its content, so a sync writes only what changed and
deletes by id what disappeared. A full rebuild loads a new index and moves the alias in one
atomic `_aliases` call; if anything fails before that, the old index keeps serving.
Only core APIs are used (no painless, ingest, _reindex or _delete_by_query).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from typing import Iterable
from urllib.parse import urlsplit, urlunsplit

import polars as pl

SCHEMA_VERSION = 1
KG = "knowledge_graph_kwd"


class EsIndexError(RuntimeError):
    """Elasticsearch could not be used; the message names the URL without credentials."""


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
    def from_env(cls, home: str | os.PathLike | None = None) -> "EsConfig | None":
        url = os.environ.get("GRAPHRAG_ES_URL", "").strip()
        if not url:
            return None
        parts = urlsplit(url)
        username = os.environ.get("GRAPHRAG_ES_USERNAME") or (parts.username or None)
        password = os.environ.get("GRAPHRAG_ES_PASSWORD") or (parts.password or None)
        default_alias = "graphrag-" + hashlib.sha1(str(home or os.environ.get("GRAPHRAG_HOME", "")).encode()).hexdigest()[:10]
        return cls(
            url=redact_url(url),
            alias=os.environ.get("GRAPHRAG_ES_INDEX", "").strip() or default_alias,
            api_key=os.environ.get("GRAPHRAG_ES_API_KEY") or None,
            username=username,
            password=password,
            ca_certs=os.environ.get("GRAPHRAG_ES_CA_CERTS") or None,
            verify_certs=os.environ.get("GRAPHRAG_ES_VERIFY_CERTS", "true").strip().lower() not in ("0", "false", "no"),
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


def redact_url(url: str) -> str:
    """The URL without user and password."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        parts = parts._replace(netloc=host)
    return urlunsplit(parts)


def vector_field(dim: int) -> str:
    return f"q_{dim}_vec"


def mappings(dim: int) -> dict:
    kw = {"type": "keyword"}
    return {
        "dynamic": False,
        "_meta": {"schema_version": SCHEMA_VERSION, "dim": dim},
        "properties": {
            KG: kw, "content_hash_kwd": kw,
            "entity_kwd": kw, "entity_key_kwd": kw, "entity_type_kwd": kw, "source_id": kw, "doc_ids_kwd": kw,
            "community_ids_kwd": kw, "rank_flt": {"type": "float"}, "degree_int": {"type": "integer"},
            "from_entity_kwd": kw, "to_entity_kwd": kw, "from_key_kwd": kw, "to_key_kwd": kw, "keywords_kwd": kw,
            "weight_flt": {"type": "float"}, "weight_int": {"type": "integer"},
            "community_id_kwd": kw, "level_int": {"type": "integer"}, "docnm_kwd": kw, "entities_kwd": kw,
            "entity_keys_kwd": kw, "rating_flt": {"type": "float"}, "community_weight_flt": {"type": "float"},
            "chunk_id_kwd": kw, "doc_id_kwd": kw, "position_int": {"type": "integer"},
            "content_with_weight": {"type": "text"}, "content": {"type": "text"}, "title_tks": {"type": "text"},
            "n_hop_with_weight": {"type": "object", "enabled": False},
            vector_field(dim): {"type": "dense_vector", "dims": dim, "index": True, "similarity": "cosine",
                                "index_options": {"type": "hnsw", "m": 16, "ef_construction": 100}},
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
            KG: "entity", "entity_kwd": e["name"], "entity_key_kwd": e["key"], "entity_type_kwd": e["type"],
            "content_with_weight": e["description"], "rank_flt": float(e["pagerank"]), "degree_int": int(e["degree"]),
            "source_id": list(e["source_ids"] or []), "doc_ids_kwd": list(e["doc_ids"] or []),
            "community_ids_kwd": list(e["community_ids"] or []), "n_hop_with_weight": nhop.get(e["key"], []),
            vf: _vec(e["embedding"]),
        }
    for r in tables["relations"].iter_rows(named=True):
        docs[_hash_id("rel", r["source_key"], r["target_key"])] = {
            KG: "relation", "from_entity_kwd": r["source"], "to_entity_kwd": r["target"],
            "from_key_kwd": r["source_key"], "to_key_kwd": r["target_key"], "content_with_weight": r["description"],
            "keywords_kwd": list(r["keywords"] or []), "weight_flt": float(r["weight"]), "weight_int": int(round(r["weight"])),
            "source_id": list(r["source_ids"] or []), vf: _vec(r["embedding"]),
        }
    for c in tables["community_reports"].iter_rows(named=True):
        docs[_hash_id("rep", c["community_id"])] = {
            KG: "community_report", "community_id_kwd": c["community_id"], "level_int": int(c["level"]),
            "docnm_kwd": c["title"], "title_tks": c["title"], "summary": c["summary"], "content_with_weight": c["text"],
            "weight_flt": float(c["rating"]), "rating_flt": float(c["rating"]), "community_weight_flt": float(c["weight"]),
            "rating_explanation": c["rating_explanation"], "findings_json": c["findings"],
            "entities_kwd": list(c["entity_names"] or []), "entity_keys_kwd": list(c["entity_keys"] or []),
            "extractive": bool(c["extractive"]), vf: _vec(c["embedding"]),
        }
    for ch in tables["chunks"].iter_rows(named=True):
        docs[_hash_id("chk", ch["doc_id"], ch["chunk_id"])] = {
            KG: "chunk", "chunk_id_kwd": ch["chunk_id"], "doc_id_kwd": ch["doc_id"], "docnm_kwd": ch["doc"],
            "position_int": int(ch["position"]), "content": ch["text"], vf: _vec(ch["embedding"]),
        }
    pool = {t: list(e) for t, e in tables["ty2ents"].select("type", "entities").iter_rows()}
    docs["ty2ents"] = {KG: "ty2ents", "content_with_weight": json.dumps(pool, ensure_ascii=False)}
    docs["meta"] = {KG: "meta", "content_with_weight": json.dumps(meta, ensure_ascii=False, sort_keys=True)}
    for doc in docs.values():
        doc["content_hash_kwd"] = hashlib.sha256(json.dumps(doc, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]
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

    def to_metadata(self) -> dict:
        return {"es_index": self.index, "es_full_rebuild": self.full_rebuild, "es_written": self.written,
                "es_deleted": self.deleted, "es_unchanged": self.unchanged, "es_reason": self.reason}


def _bulk(es, actions: Iterable[dict]) -> int:
    from elasticsearch import helpers

    ok, errors = helpers.bulk(es, actions, chunk_size=500, max_retries=3, initial_backoff=1, max_backoff=30,
                              raise_on_error=False, raise_on_exception=True, stats_only=False)
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
                full_rebuild, reason = True, f"mapping changed (schema {meta.get('schema_version')}, dim {meta.get('dim')})"
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
        es.indices.create(index=new_index, mappings=mappings(dim),
                          settings={"number_of_shards": 1, "number_of_replicas": 0, "refresh_interval": "-1"})
        written = _bulk(es, ({"_op_type": "index", "_index": new_index, "_id": i, "_source": d} for i, d in docs.items()))
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
        existing = {hit["_id"]: hit["_source"].get("content_hash_kwd")
                    for hit in helpers.scan(es, index=index, query={"query": {"match_all": {}}}, _source=["content_hash_kwd"], size=1000)}
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
    return EsWriteStats(index=index, full_rebuild=False, written=len(changed), deleted=len(gone),
                        unchanged=len(docs) - len(changed))


def read_duckdb_tables(path) -> tuple[dict[str, pl.DataFrame], dict]:
    """The tables and meta of a published DuckDB index (the source of an Elasticsearch sync)."""
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = {name: con.sql(f"SELECT * FROM {name}").pl()
                  for name in ("entities", "relations", "community_reports", "chunks", "nhop", "ty2ents")}
        meta = {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM meta").fetchall()}
    finally:
        con.close()
    return tables, meta
