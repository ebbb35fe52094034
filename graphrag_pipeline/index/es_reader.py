"""Read-only access to the search index in Elasticsearch (the SearchIndex protocol of
index/protocol.py, as DuckDBIndex).

Entity and relation recall by kNN on `q_<dim>_vec` with `knowledge_graph_kwd` filters, type
recall by term query, community reports by `entity_keys_kwd`, chunks by kNN (and BM25 through
`chunks_by_text`). Similarities are returned as cosine values (Elasticsearch scores cosine as
(1 + cos) / 2) rounded like DuckDB's, and ties are broken by key, so both backends rank alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from graphrag_pipeline.index.duckdb_reader import IndexNotFoundError, index_embedder
from graphrag_pipeline.index.es_writer import KG, EsConfig, EsIndexError, _hash_id, vector_field
from graphrag_pipeline.index.protocol import Embedder
from graphrag_pipeline.llm.protocol import EmbeddingClient

SIM_DECIMALS = 6
# an entity's ranked n-hop paths; an index synced before schema 5 has them as RAGFlow's
# n_hop_with_weight ({path, weights} objects, in rank order) until the next sync rebuilds it
_N_HOP_FIELDS = ["n_hop_paths", "n_hop_with_weight"]


def _n_hop_paths(src: dict) -> list[list[str]]:
    if "n_hop_paths" in src:
        return list(src["n_hop_paths"] or [])
    return [p["path"] for p in src.get("n_hop_with_weight") or [] if isinstance(p, dict) and "path" in p]


class EsIndex:
    def __init__(self, cfg: EsConfig):
        self.cfg = cfg
        self.es = cfg.client()
        try:
            exists = self.es.indices.exists_alias(name=cfg.alias)
        except Exception as exc:  # noqa: BLE001
            raise cfg.error("opening the index", exc) from None
        if not exists:
            raise IndexNotFoundError(
                f"no index behind alias {cfg.alias!r} at {cfg.url}: run `graphrag-pipeline build` with "
                f"GRAPHRAG_ES_URL set"
            )
        meta_doc = self._get("meta")
        self.meta = json.loads(meta_doc["content_with_weight"]) if meta_doc else {}
        self.dim = int(self.meta.get("embedding_dim", 0))
        self.vf = vector_field(self.dim)
        self._pool: dict[str, list[str]] | None = None
        # the n-hop paths that came with the last entity recall (nhop() then needs no request)
        self._nhop_cache: dict[str, list[dict]] = {}

    # -- plumbing -----------------------------------------------------------------------------
    def close(self) -> None:
        self.es.close()

    def __enter__(self) -> EsIndex:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _get(self, doc_id: str) -> dict | None:
        res = self.es.options(ignore_status=404).get(index=self.cfg.alias, id=doc_id)
        return res.get("_source") if res.get("found") else None

    # responses carry only what the readers use: no totals, no metadata of the hits
    _HITS = ("hits.hits._source", "hits.hits._score", "hits.hits.sort")

    def _search(self, **kw) -> list[dict]:
        try:
            res = self.es.search(index=self.cfg.alias, track_total_hits=False, filter_path=",".join(self._HITS), **kw)
        except Exception as exc:  # noqa: BLE001
            raise self.cfg.error("searching", exc) from None
        return res.get("hits", {}).get("hits", [])

    def _msearch(self, bodies: list[dict]) -> list[list[dict]]:
        """Several searches in one request; the hits of each, in order."""
        if not bodies:
            return []
        searches = [x for b in bodies for x in ({}, {"track_total_hits": False, **b})]
        filter_path = ",".join(["responses.error", "responses.status"] + [f"responses.{f}" for f in self._HITS])
        try:
            res = self.es.msearch(index=self.cfg.alias, searches=searches, filter_path=filter_path)
        except Exception as exc:  # noqa: BLE001
            raise self.cfg.error("searching", exc) from None
        out = []
        for r in res["responses"]:
            if "error" in r:
                raise self.cfg.error("searching", RuntimeError(json.dumps(r["error"])[:400]))
            out.append(r.get("hits", {}).get("hits", []))
        return out

    def _run(self, plan: tuple[list[dict], Callable[[list[list[dict]]], Any]]) -> Any:
        """A plan (its search bodies, and what makes the result of their hits) in one request."""
        bodies, finish = plan
        return finish(self._msearch(bodies))

    def batch(self, calls: list[tuple[Callable[..., Any], tuple]]) -> list:
        """Several of the methods of this index at once, their results in order: those with a plan
        (`_plan_<name>`) share one _msearch, any other is called on its own."""
        plans = []
        for method, args in calls:
            planner = getattr(self, f"_plan_{method.__name__}", None)
            plans.append(planner(*args) if planner and getattr(method, "__self__", None) is self else None)
        hits = self._msearch([b for plan in plans if plan for b in plan[0]])
        out, i = [], 0
        for (method, args), plan in zip(calls, plans):
            if plan is None:
                out.append(method(*args))
                continue
            n = len(plan[0])
            out.append(plan[1](hits[i : i + n]))
            i += n
        return out

    def _knn_body(
        self, kind: str, vector: np.ndarray, k: int, fields: list[str], extra_filter: dict | None = None
    ) -> dict:
        filters = [{"term": {KG: kind}}] + ([extra_filter] if extra_filter else [])
        return {
            "knn": {
                "field": self.vf,
                "query_vector": [float(x) for x in vector],
                "k": k,
                "num_candidates": min(10000, max(100, 4 * k)),
                "filter": {"bool": {"filter": filters}},
            },
            "_source": fields,
            "size": k,
        }

    @staticmethod
    def _sims(hits: list[dict]) -> list[tuple[float, dict]]:
        return [(round(2.0 * h["_score"] - 1.0, SIM_DECIMALS), h["_source"]) for h in hits]

    def _knn(
        self, kind: str, vector: np.ndarray, k: int, fields: list[str], extra_filter: dict | None = None
    ) -> list[tuple[float, dict]]:
        return self._sims(self._msearch([self._knn_body(kind, vector, k, fields, extra_filter)])[0])

    @staticmethod
    def _terms_body(kind: str, field: str, values: list[str], fields: list[str], size: int = 10000, sort=None) -> dict:
        body = {
            "query": {"bool": {"filter": [{"term": {KG: kind}}, {"terms": {field: values}}]}},
            "_source": fields,
            "size": size,
        }
        return {**body, "sort": sort} if sort else body

    def _terms(
        self, kind: str, field: str, values: list[str], fields: list[str], size: int = 10000, sort=None
    ) -> list[dict]:
        return [h["_source"] for h in self._msearch([self._terms_body(kind, field, values, fields, size, sort)])[0]]

    def embedder(self, client: EmbeddingClient | None = None) -> Embedder:
        return index_embedder(self.meta, self.dim, client)

    # -- the SearchIndex protocol (index/protocol.py) ------------------------------------------------------------------
    @staticmethod
    def _entity(src: dict) -> dict:
        return {
            "key": src["entity_key_kwd"],
            "name": src["entity_kwd"],
            "type": src["entity_type_kwd"],
            "description": src.get("content_with_weight", ""),
            "pagerank": float(src.get("rank_flt", 0.0)),
            "source_ids": list(src.get("source_id") or []),
            "doc_ids": list(src.get("doc_ids_kwd") or []),
        }

    _ENT_FIELDS = [
        "entity_key_kwd",
        "entity_kwd",
        "entity_type_kwd",
        "content_with_weight",
        "rank_flt",
        "source_id",
        "doc_ids_kwd",
    ]
    _REL_FIELDS = [
        "from_key_kwd",
        "to_key_kwd",
        "from_entity_kwd",
        "to_entity_kwd",
        "content_with_weight",
        "weight_flt",
        "source_id",
    ]
    _REP_FIELDS = [
        "community_id_kwd",
        "level_int",
        "docnm_kwd",
        "summary",
        "rating_flt",
        "community_weight_flt",
        "documents_kwd",
        "content_with_weight",
        "entity_keys_kwd",
    ]

    @staticmethod
    def _relation(src: dict) -> dict:
        return {
            "source_key": src["from_key_kwd"],
            "target_key": src["to_key_kwd"],
            "source": src["from_entity_kwd"],
            "target": src["to_entity_kwd"],
            "description": src.get("content_with_weight", ""),
            "weight": float(src.get("weight_flt", 0.0)),
            "source_ids": list(src.get("source_id") or []),
        }

    @staticmethod
    def _report(src: dict) -> dict:
        return {
            "community_id": src["community_id_kwd"],
            "level": src["level_int"],
            "title": src["docnm_kwd"],
            "summary": src.get("summary", ""),
            "rating": float(src.get("rating_flt", 0.0)),
            "weight": float(src.get("community_weight_flt", 0.0)),
            "documents": list(src.get("documents_kwd") or []),
            "text": src.get("content_with_weight", ""),
        }

    # Each `_plan_<method>` gives the search bodies of one protocol method and what makes its result
    # of their hits: the method runs its plan in one request, `batch` runs several plans in one.
    def entities_by_vector(self, vector: np.ndarray, k: int, threshold: float) -> list[dict]:
        return self._run(self._plan_entities_by_vector(vector, k, threshold))

    def _plan_entities_by_vector(self, vector: np.ndarray, k: int, threshold: float):
        def finish(res: list[list[dict]]) -> list[dict]:
            hits = self._sims(res[0])
            # the n-hop paths of the recalled entities come along (local search asks for them next)
            self._nhop_cache = {src["entity_key_kwd"]: self._paths(src) for _, src in hits}
            rows = [{**self._entity(src), "sim": sim} for sim, src in hits if sim >= threshold]
            return sorted(rows, key=lambda r: (-r["sim"], r["key"]))[:k]

        return [self._knn_body("entity", vector, k + 8, self._ENT_FIELDS + _N_HOP_FIELDS)], finish

    @staticmethod
    def _paths(src: dict) -> list[dict]:
        return [{"entity_key": src["entity_key_kwd"], "path": path} for path in _n_hop_paths(src)]

    def entities_by_types(self, types: list[str], k: int) -> list[dict]:
        if not types:
            return []
        rows = [
            self._entity(s)
            for s in self._terms(
                "entity",
                "entity_type_kwd",
                types,
                self._ENT_FIELDS,
                size=min(k, 10000),
                sort=[{"rank_flt": "desc"}, {"entity_key_kwd": "asc"}],
            )
        ]
        return rows

    def keys_of_types(self, types: list[str], candidates: list[str], k: int) -> set[str]:
        """Those candidate keys that are among the k highest-PageRank entities of the given types."""
        return self._run(self._plan_keys_of_types(types, candidates, k))

    def _plan_keys_of_types(self, types: list[str], candidates: list[str], k: int):
        if not types or not candidates:
            return [], lambda res: set()
        type_filter = [{"term": {KG: "entity"}}, {"terms": {"entity_type_kwd": types}}]

        def finish(res: list[list[dict]]) -> set[str]:
            kth, hits = res
            if not kth:
                return {h["_source"]["entity_key_kwd"] for h in hits}
            bound = (-float(kth[0]["_source"]["rank_flt"]), kth[0]["_source"]["entity_key_kwd"])
            return {
                h["_source"]["entity_key_kwd"]
                for h in hits
                if (-float(h["_source"]["rank_flt"]), h["_source"]["entity_key_kwd"]) <= bound
            }

        # the k-th entity of these types in (PageRank desc, key) order, which bounds the top k (none:
        # fewer than k, so all are in), and the candidates of these types
        return (
            [
                {
                    "query": {"bool": {"filter": type_filter}},
                    "_source": ["entity_key_kwd", "rank_flt"],
                    "sort": [{"rank_flt": "desc"}, {"entity_key_kwd": "asc"}],
                    "from": k - 1,
                    "size": 1,
                },
                {
                    "query": {"bool": {"filter": type_filter + [{"terms": {"entity_key_kwd": candidates}}]}},
                    "_source": ["entity_key_kwd", "rank_flt"],
                    "size": len(candidates),
                },
            ],
            finish,
        )

    def entities_by_keys(self, keys: list[str]) -> list[dict]:
        return (
            [self._entity(s) for s in self._terms("entity", "entity_key_kwd", keys, self._ENT_FIELDS)] if keys else []
        )

    def nhop(self, keys: list[str]) -> list[dict]:
        if not keys:
            return []
        if set(keys) <= self._nhop_cache.keys():
            return [dict(p) for k in dict.fromkeys(keys) for p in self._nhop_cache[k]]
        out = []
        for src in self._terms("entity", "entity_key_kwd", keys, ["entity_key_kwd", *_N_HOP_FIELDS]):
            out += self._paths(src)
        return out

    def relations_by_vector(self, vector: np.ndarray, k: int, threshold: float) -> list[dict]:
        return self._run(self._plan_relations_by_vector(vector, k, threshold))

    def _plan_relations_by_vector(self, vector: np.ndarray, k: int, threshold: float):
        def finish(res: list[list[dict]]) -> list[dict]:
            rows = [{**self._relation(src), "sim": sim} for sim, src in self._sims(res[0]) if sim >= threshold]
            return sorted(rows, key=lambda r: (-r["sim"], r["source_key"], r["target_key"]))[:k]

        return [self._knn_body("relation", vector, k + 8, self._REL_FIELDS)], finish

    def relations_by_pairs(self, pairs: list[tuple[str, str]]) -> list[dict]:
        return self._run(self._plan_relations_by_pairs(pairs))

    def _plan_relations_by_pairs(self, pairs: list[tuple[str, str]]):
        """By document id (a hash of the pair), in the order asked, each once."""
        if not pairs:
            return [], lambda res: []
        ids = list(dict.fromkeys(_hash_id("rel", a, b) for a, b in pairs))
        fields = self._REL_FIELDS

        def finish(res: list[list[dict]]) -> list[dict]:
            by_pair = {(h["_source"]["from_key_kwd"], h["_source"]["to_key_kwd"]): h["_source"] for h in res[0]}
            return [self._relation(by_pair[p]) for p in dict.fromkeys(pairs) if p in by_pair]

        return [{"query": {"ids": {"values": ids}}, "_source": fields, "size": len(ids)}], finish

    def reports_for_entities(self, keys: list[str], k: int) -> list[dict]:
        return self._run(self._plan_reports_for_entities(keys, k))

    def _plan_reports_for_entities(self, keys: list[str], k: int):
        if not keys:
            return [], lambda res: []
        wanted = set(keys)

        def finish(res: list[list[dict]]) -> list[dict]:
            rows = []
            for h in res[0]:
                row = self._report(h["_source"])
                row["hits"] = len(wanted & set(h["_source"].get("entity_keys_kwd") or []))
                rows.append(row)
            return sorted(rows, key=lambda r: (-r["hits"], -r["rating"], r["community_id"]))[:k]

        return [self._terms_body("community_report", "entity_keys_kwd", keys, self._REP_FIELDS)], finish

    def reports_by_vector(self, vector: np.ndarray, k: int) -> list[dict]:
        rows = [
            {**self._report(src), "sim": sim}
            for sim, src in self._knn("community_report", vector, k + 8, self._REP_FIELDS)
        ]
        return sorted(rows, key=lambda r: (-r["sim"], -r["rating"], r["community_id"]))[:k]

    def reports_by_importance(self, vector: np.ndarray, k: int) -> list[dict]:
        """As DuckDBIndex.reports_by_importance: (level, -rating, -weight) by a sorted search, the
        reports tied at the k-th place fetched too, then their similarities by one filtered kNN."""
        if k <= 0:
            return []
        key = lambda r: (r["level"], -r["rating"], -r["weight"])  # noqa: E731
        sort = [
            {"level_int": "asc"},
            {"rating_flt": "desc"},
            {"community_weight_flt": "desc"},
            {"community_id_kwd": "asc"},
        ]
        query = {"bool": {"filter": [{"term": {KG: "community_report"}}]}}
        size = k + 32
        hits = self._search(query=query, source=self._REP_FIELDS, sort=sort, size=size)
        rows = [self._report(h["_source"]) for h in hits]
        while len(hits) == size and len(rows) > k and key(rows[-1]) == key(rows[k - 1]):
            hits = self._search(
                query=query, source=self._REP_FIELDS, sort=sort, size=size, search_after=hits[-1]["sort"]
            )
            rows += [self._report(h["_source"]) for h in hits]
        if len(rows) > k:
            cut = key(sorted(rows, key=key)[k - 1])
            rows = [r for r in rows if key(r) <= cut]
        ids = [r["community_id"] for r in rows]
        sims = {
            src["community_id_kwd"]: sim
            for sim, src in self._knn(
                "community_report", vector, len(ids), ["community_id_kwd"], {"terms": {"community_id_kwd": ids}}
            )
        }
        rows = [{**r, "sim": sims.get(r["community_id"], -1.0)} for r in rows]
        return sorted(rows, key=lambda r: (*key(r), -r["sim"], r["community_id"]))[:k]

    def chunks_by_ids(self, chunk_ids: list[str], text: bool = False) -> list[dict]:
        """As DuckDBIndex.chunks_by_ids: one row per (chunk, document), its first position there."""
        return self._run(self._plan_chunks_by_ids(chunk_ids, text))

    def _plan_chunks_by_ids(self, chunk_ids: list[str], text: bool = False):
        if not chunk_ids:
            return [], lambda res: []
        fields = ["chunk_id_kwd", "doc_id_kwd", "docnm_kwd", "position_int", *_PAGE_FIELDS] + (
            ["content"] if text else []
        )

        def finish(res: list[list[dict]]) -> list[dict]:
            found: dict[tuple[str, str], dict] = {}
            for h in res[0]:
                s = h["_source"]
                row = {
                    "chunk_id": s["chunk_id_kwd"],
                    "doc_id": s["doc_id_kwd"],
                    "doc": s["docnm_kwd"],
                    "position": s["position_int"],
                    **_pages(s),
                }
                if text:
                    row["text"] = s["content"]
                have = found.get((row["chunk_id"], row["doc_id"]))
                if have is None or row["position"] < have["position"]:
                    found[(row["chunk_id"], row["doc_id"])] = row
            return [found[k] for k in sorted(found)]

        return [self._terms_body("chunk", "chunk_id_kwd", sorted(set(chunk_ids)), fields)], finish

    def chunks_by_vector(self, vector: np.ndarray, k: int) -> list[dict]:
        return self._run(self._plan_chunks_by_vector(vector, k))

    def _plan_chunks_by_vector(self, vector: np.ndarray, k: int):
        def finish(res: list[list[dict]]) -> list[dict]:
            rows = [
                {
                    "chunk_id": s["chunk_id_kwd"],
                    "doc_id": s["doc_id_kwd"],
                    "doc": s["docnm_kwd"],
                    "position": s["position_int"],
                    **_pages(s),
                    "text": s["content"],
                    "sim": sim,
                }
                for sim, s in self._sims(res[0])
            ]
            return sorted(rows, key=lambda r: (-r["sim"], r["chunk_id"], r["doc"], r["position"]))[:k]

        fields = ["chunk_id_kwd", "doc_id_kwd", "docnm_kwd", "position_int", *_PAGE_FIELDS, "content"]
        return [self._knn_body("chunk", vector, k + 8, fields)], finish

    def chunks_by_text(self, question: str, k: int) -> list[dict]:
        """BM25 over chunk text."""
        hits = self._search(
            query={"bool": {"filter": [{"term": {KG: "chunk"}}], "must": [{"match": {"content": question}}]}},
            source=["chunk_id_kwd", "docnm_kwd", "position_int", *_PAGE_FIELDS, "content"],
            size=k,
        )
        return [
            {
                "chunk_id": h["_source"]["chunk_id_kwd"],
                "doc": h["_source"]["docnm_kwd"],
                "position": h["_source"]["position_int"],
                **_pages(h["_source"]),
                "text": h["_source"]["content"],
                "score": h["_score"],
            }
            for h in hits
        ]

    def type_pool(self) -> dict[str, list[str]]:
        if self._pool is None:  # read once per opened index, as its meta
            doc = self._get("ty2ents")
            self._pool = json.loads(doc["content_with_weight"]) if doc else {}
        return self._pool

    def counts(self) -> dict[str, int]:
        return dict(self.meta.get("counts", {}))

    # -- index/protocol.GraphLookup ------------------------------------------------------------------------------------
    def relations_of(self, key: str, k: int) -> list[dict]:
        """The relations of one entity, heaviest first (ties: the other end's key)."""
        if k <= 0:
            return []
        query = {
            "bool": {
                "filter": [{"term": {KG: "relation"}}],
                "should": [{"term": {"from_key_kwd": key}}, {"term": {"to_key_kwd": key}}],
                "minimum_should_match": 1,
            }
        }
        rows = [self._relation(h["_source"]) for h in self._search(query=query, source=self._REL_FIELDS, size=10000)]

        def other(r: dict) -> str:
            return r["target_key"] if r["source_key"] == key else r["source_key"]

        return sorted(rows, key=lambda r: (-r["weight"], other(r)))[:k]

    def entity_sources(self, key: str) -> list[str]:
        """The ids of the chunks an entity was extracted from."""
        hits = self._terms("entity", "entity_key_kwd", [key], ["source_id"], size=1)
        return list(hits[0].get("source_id") or []) if hits else []

    def chunk_texts(self, ids: list[str]) -> list[dict]:
        """Chunks by id, in document and position order (an identical chunk may appear in several documents)."""
        if not ids:
            return []
        fields = ["chunk_id_kwd", "docnm_kwd", "position_int", *_PAGE_FIELDS, "content"]
        rows = [
            {
                "chunk_id": s["chunk_id_kwd"],
                "doc": s["docnm_kwd"],
                "position": s["position_int"],
                **_pages(s),
                "text": s["content"],
            }
            for s in self._terms("chunk", "chunk_id_kwd", ids, fields)
        ]
        return sorted(rows, key=lambda r: (r["doc"], r["position"], r["chunk_id"]))


_PAGE_FIELDS = ["page_start_int", "page_end_int", "section_kwd"]


def _pages(source: dict) -> dict:
    """A chunk record's pages and section (absent in records written before they existed: None)."""
    return {
        "page_start": source.get("page_start_int"),
        "page_end": source.get("page_end_int"),
        "section": source.get("section_kwd"),
    }


__all__ = ["EsIndex", "EsIndexError"]
