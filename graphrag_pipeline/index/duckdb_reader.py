"""Read-only access to the published DuckDB search index."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import struct
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from graphrag_pipeline.index.embedding import EndpointEmbedder, HashingEmbedder
from graphrag_pipeline.index.protocol import Embedder
from graphrag_pipeline.index.records import NHOP_ORDER_SQL
from graphrag_pipeline.llm.protocol import EmbeddingClient
from graphrag_pipeline.settings import default_home

# the order of an entity's paths in an index of schema < 6, whose paths carried their weights
_WEIGHTED_NHOP_ORDER_SQL = "entity_key, weights[1] DESC, path[2], weights[2] DESC NULLS LAST, path[3] NULLS LAST"


def attach_read_only(path: str | Path) -> duckdb.DuckDBPyConnection:
    """A connection of its own to the DuckDB file at `path`, read-only: the file is attached to a
    private in-memory instance (no lock file, WAL or temp folder is written, so a read-only home is
    enough). Not `duckdb.connect(path)`: the Python client shares one database instance among all
    connections of a process to the same path, so a reader would see the old file after a publish
    while another connection is open, and a thread opening or closing that shared instance can race
    with a thread registering Arrow data on it ("python_arrow_scan does not exist")."""
    for _ in range(_ATTEMPTS):
        con = duckdb.connect(":memory:")
        try:
            held = _hold(con, path)
            con.execute("ATTACH ? AS published (READ_ONLY)", [str(path)])
            con.execute("USE published")
            # the file locked is the file attached: no publish renamed another one into place between
            if held is _NO_LOCKS or (held is not None and _same_file(held, path)):
                return con
        except BaseException:
            release(con)
            raise
        release(con)
        time.sleep(0.01)
    raise OSError(errno.EAGAIN, f"the search index at {path} kept being replaced while it was opened; try again")


_ATTEMPTS = 20
_NO_LOCKS = object()  # this platform has no open-file-description locks (and then no spare is patched)

# the read locks readers hold: id(connection) -> what releases its lock
_HOLDS: dict[int, weakref.finalize] = {}


def _same_file(st: os.stat_result, path: str | Path) -> bool:
    try:
        now = os.stat(path)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def _hold(con, path: str | Path):
    """Take an open-file-description read lock on the file at `path` for as long as `con` lives
    (or until `release(con)`); the locked file's stat, or None when it could not be locked (gone, or
    a publish is patching it: it is no longer the published file), or _NO_LOCKS. A publish patches
    the file a previous publish replaced only when no lock is held on it (duckdb_spare): DuckDB's
    own lock is a process lock, which the process loses when it closes any other handle on the same
    file - a second reader of it, a look at its meta."""
    if getattr(fcntl, "F_OFD_SETLK", None) is None:
        return _NO_LOCKS
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None  # ATTACH says why it cannot be read (or, found meanwhile, the next attempt locks it)
    locked = ofd_lock(fd, fcntl.F_RDLCK)
    if not locked:
        os.close(fd)
        # a lock held (a publish patching this file) or, on a file system without such locks
        # (where no spare is patched either: duckdb_spare._unused says no), none to be had
        return None if locked is False else _NO_LOCKS
    _HOLDS[id(con)] = weakref.finalize(con, _unhold, id(con), fd)
    return os.fstat(fd)


def ofd_lock(fd: int, kind: int) -> bool | None:
    """Take an open-file-description lock of `kind` (fcntl.F_RDLCK / F_WRLCK) on the whole file
    open at `fd`, held until that descriptor is closed: True; False when a conflicting lock is held
    (by any process, this one included); None when there are no such locks (platform or file system)."""
    ofd = getattr(fcntl, "F_OFD_SETLK", None)
    if ofd is None:
        return None
    try:
        # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for an open-file-description lock)
        fcntl.fcntl(fd, ofd, struct.pack("hhqqi4x", kind, os.SEEK_SET, 0, 0, 0))
    except OSError as exc:
        return False if exc.errno in (errno.EAGAIN, errno.EACCES) else None
    return True


def _unhold(key: int, fd: int) -> None:
    _HOLDS.pop(key, None)
    os.close(fd)


def release(con) -> None:
    """Close a connection of attach_read_only and give up its read lock."""
    con.close()
    fin = _HOLDS.get(id(con))
    if fin is not None:
        fin()


class IndexNotFoundError(FileNotFoundError):
    pass


class IndexUnreadableError(IndexNotFoundError):
    """The index file exists but cannot be opened as a search index (damaged, or not readable)."""


def index_embedder(meta: dict, dim: int, client: EmbeddingClient | None = None) -> Embedder:
    """The embedder an index was built with (the endpoint's model needs an LLM client)."""
    model = meta.get("embedding_model", "hashing")
    if model.startswith("hashing"):
        return HashingEmbedder(dim)
    if client is None or f"endpoint:{client.embedding_model}" != model:
        raise ValueError(
            f"the index was embedded with {model!r}: set OPENAI_API_KEY/OPENAI_BASE_URL and "
            f"GRAPHRAG_EMBEDDING_MODEL={model.split(':', 1)[-1]} to query it"
        )
    return EndpointEmbedder(client)


# the columns of the rows each read returns (the same keys as es_reader.EsIndex fills)
ENT_COLS = "key, name, type, description, pagerank, source_ids, doc_ids"
REL_COLS = "source_key, target_key, source, target, description, weight, source_ids"
REP_COLS = "community_id, level, title, summary, rating, weight, documents, text"


class DuckDBIndex:
    """The search index as published by the `search_index` asset (opened read-only); implements
    index/protocol.SearchIndex."""

    def __init__(self, path: Path, preload: bool = False):
        """preload: hold the vectors in memory (a few seconds to load; then each similarity search is
        a matrix-vector product instead of a scan of the file) - for services that answer many queries."""
        self.path = Path(path)
        if not self.path.exists():
            raise IndexNotFoundError(
                f"no search index at {self.path}: run `graphrag-pipeline build` first "
                f"(GRAPHRAG_HOME={self.path.parent.parent})"
            )
        # a private instance per reader (attach_read_only): a DuckDBIndex opened after a publish
        # reads the new file even while an older one is open
        con = None
        try:
            con = attach_read_only(self.path)
            self.meta = {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM meta").fetchall()}
        except (duckdb.Error, OSError, ValueError) as exc:
            if con is not None:
                release(con)
            raise IndexUnreadableError(
                f"the search index at {self.path} cannot be read ({exc}): run `graphrag-pipeline build` to repair it"
            ) from None
        self.con = con
        self.dim = int(self.meta.get("embedding_dim", 0))
        self._memory: dict[str, tuple] = {}
        self._pool = None
        if preload:
            self.preload()

    _IN_MEMORY = {
        "entities": (ENT_COLS, ("key",)),
        "relations": (REL_COLS, ("source_key", "target_key")),
        "community_reports": (REP_COLS, ("community_id",)),
        "chunks": ("chunk_id, doc_id, doc, position, text, {pages}", ("chunk_id",)),
    }

    def _columns(self, table: str) -> set[str]:
        """The columns `table` has in this index (an older schema lacks some)."""
        rows = self.con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = ?", [table]).fetchall()
        return {r[0] for r in rows}

    @property
    def _pages(self) -> str:
        """The chunk page columns, as NULLs in an index published before they existed (schema < 4)."""
        if getattr(self, "_pages_sql", None) is None:
            cols = self._columns("chunks")
            self._pages_sql = ", ".join(
                c if c in cols else f"CAST(NULL AS {t}) AS {c}"
                for c, t in (("page_start", "BIGINT"), ("page_end", "BIGINT"), ("section", "VARCHAR"))
            )
        return self._pages_sql

    @property
    def _nhop_order(self) -> str:
        """How the paths of an entity are ordered: by their rank, or in an index published before
        paths had one (schema < 6, paths with their weights) by the weights, as they were ranked."""
        if getattr(self, "_nhop_order_sql", None) is None:
            ranked = "rank" in self._columns("nhop")
            self._nhop_order_sql = NHOP_ORDER_SQL if ranked else _WEIGHTED_NHOP_ORDER_SQL
        return self._nhop_order_sql

    def preload(self) -> None:
        for table, (cols, _) in self._IN_MEMORY.items():
            df = self.con.sql(f"SELECT {cols.format(pages=self._pages)}, embedding FROM {table}").pl()
            matrix = np.ascontiguousarray(df["embedding"].to_numpy(), dtype=np.float32).reshape(df.height, self.dim)
            self._memory[table] = (df.drop("embedding").to_dicts(), matrix)
        ents = self._memory["entities"][0]
        self._by_key = {r["key"]: r for r in ents}
        # entities in PageRank order (ties by key), for "top k of these types" in one numpy pass
        ordered = sorted(ents, key=lambda r: (-r["pagerank"], r["key"]))
        self._type_codes = {t: i for i, t in enumerate(sorted({r["type"] for r in ents}))}
        self._order_types = np.array([self._type_codes[r["type"]] for r in ordered], dtype=np.int32)
        self._position = {r["key"]: i for i, r in enumerate(ordered)}
        self._rel_by_pair = {(r["source_key"], r["target_key"]): r for r in self._memory["relations"][0]}
        self._nhop: dict[str, list[dict]] = {}
        for key, path in self.con.sql(f"SELECT entity_key, path FROM nhop ORDER BY {self._nhop_order}").fetchall():
            self._nhop.setdefault(key, []).append({"entity_key": key, "path": path})
        self._reports_of: dict[str, list[int]] = {}
        report_rows = self._memory["community_reports"][0]
        keys_of = dict(self.con.sql("SELECT community_id, entity_keys FROM community_reports").fetchall())
        for i, r in enumerate(report_rows):
            for key in keys_of.get(r["community_id"]) or []:
                self._reports_of.setdefault(key, []).append(i)
        self._chunks_of: dict[str, list[int]] = {}
        for i, r in enumerate(self._memory["chunks"][0]):
            self._chunks_of.setdefault(r["chunk_id"], []).append(i)
        self._pool = self.type_pool()

    def _top(self, table: str, vector: np.ndarray, k: int, threshold: float, order) -> list[dict]:
        """In-memory top k by similarity, same rounding and tie order as the SQL queries."""
        rows, matrix = self._memory[table]
        if not rows or k <= 0:
            return []
        sims = np.round((matrix @ np.asarray(vector, dtype=np.float32)).astype(np.float64), 6)
        kk = min(k, len(rows))
        kth = np.partition(sims, len(rows) - kk)[len(rows) - kk]
        picked = [{**rows[i], "sim": float(sims[i])} for i in np.nonzero(sims >= max(kth, threshold))[0]]
        return sorted(picked, key=order)[:k]

    def close(self) -> None:
        release(self.con)

    def __enter__(self) -> DuckDBIndex:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def embedder(self, client: EmbeddingClient | None = None) -> Embedder:
        return index_embedder(self.meta, self.dim, client)

    def _rows(self, sql: str, params: list | None = None) -> list[dict]:
        cur = self.con.execute(sql, params or [])
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]

    def _vec(self, vector: np.ndarray) -> str:
        return f"?::FLOAT[{self.dim}]"

    def entities_by_vector(self, vector: np.ndarray, k: int, threshold: float) -> list[dict]:
        if "entities" in self._memory:
            return self._top("entities", vector, k, threshold, lambda r: (-r["sim"], r["key"]))
        sql = f"""SELECT {ENT_COLS},
                         round(CAST(array_inner_product(embedding, {self._vec(vector)}) AS DOUBLE), 6) AS sim
                  FROM entities WHERE sim >= ? ORDER BY sim DESC, key LIMIT ?"""
        return self._rows(sql, [vector.tolist(), threshold, k])

    def entities_by_types(self, types: list[str], k: int) -> list[dict]:
        if not types:
            return []
        return self._rows(
            f"SELECT {ENT_COLS} FROM entities WHERE type IN (SELECT unnest(?)) ORDER BY pagerank DESC, key LIMIT ?",
            [types, k],
        )

    def keys_of_types(self, types: list[str], candidates: list[str], k: int) -> set[str]:
        """Those candidate keys that are among the k highest-PageRank entities of the given types."""
        if not types or not candidates:
            return set()
        if self._memory:
            codes = [self._type_codes[t] for t in set(types) if t in self._type_codes]
            mask = np.isin(self._order_types, codes)
            rank = np.cumsum(mask)  # 1-based rank among the entities of these types
            out = set()
            for c in candidates:
                i = self._position.get(c)
                if i is not None and mask[i] and rank[i] <= k:
                    out.add(c)
            return out
        rows = self.con.execute(
            """SELECT key FROM (SELECT key, row_number() OVER (ORDER BY pagerank DESC, key) AS rn
                                FROM entities WHERE type IN (SELECT unnest(?)))
               WHERE rn <= ? AND key IN (SELECT unnest(?))""",
            [types, k, candidates],
        ).fetchall()
        return {r[0] for r in rows}

    def entities_by_keys(self, keys: list[str]) -> list[dict]:
        if not keys:
            return []
        if self._memory:
            return [dict(self._by_key[k]) for k in dict.fromkeys(keys) if k in self._by_key]
        return self._rows(f"SELECT {ENT_COLS} FROM entities WHERE key IN (SELECT unnest(?))", [keys])

    def nhop(self, keys: list[str]) -> list[dict]:
        if not keys:
            return []
        if self._memory:
            return [dict(p) for k in dict.fromkeys(keys) for p in self._nhop.get(k, [])]
        # in the order the paths were computed (a delta publish appends re-computed entities at the end)
        return self._rows(
            f"SELECT entity_key, path FROM nhop WHERE entity_key IN (SELECT unnest(?)) ORDER BY {self._nhop_order}",
            [keys],
        )

    def relations_by_vector(self, vector: np.ndarray, k: int, threshold: float) -> list[dict]:
        if "relations" in self._memory:
            return self._top("relations", vector, k, threshold, lambda r: (-r["sim"], r["source_key"], r["target_key"]))
        sql = f"""SELECT {REL_COLS},
                         round(CAST(array_inner_product(embedding, {self._vec(vector)}) AS DOUBLE), 6) AS sim
                  FROM relations WHERE sim >= ? ORDER BY sim DESC, source_key, target_key LIMIT ?"""
        return self._rows(sql, [vector.tolist(), threshold, k])

    def relations_by_pairs(self, pairs: list[tuple[str, str]]) -> list[dict]:
        if not pairs:
            return []
        if self._memory:
            return [dict(self._rel_by_pair[p]) for p in dict.fromkeys(pairs) if p in self._rel_by_pair]
        keys = [f"{a}\x00{b}" for a, b in pairs]
        return self._rows(
            f"SELECT {REL_COLS} FROM relations WHERE source_key || chr(0) || target_key IN (SELECT unnest(?))",
            [keys],
        )

    def reports_for_entities(self, keys: list[str], k: int) -> list[dict]:
        if not keys:
            return []
        if self._memory:
            rows = self._memory["community_reports"][0]
            hits: dict[int, int] = {}
            for key in set(keys):
                for i in self._reports_of.get(key, []):
                    hits[i] = hits.get(i, 0) + 1
            found = [{**rows[i], "hits": n} for i, n in hits.items()]
            return sorted(found, key=lambda r: (-r["hits"], -r["rating"], r["community_id"]))[:k]
        return self._rows(
            f"""SELECT {REP_COLS},
                      len(list_intersect(entity_keys, ?)) AS hits
               FROM community_reports WHERE hits > 0 ORDER BY hits DESC, rating DESC, community_id LIMIT ?""",
            [keys, k],
        )

    def reports_by_vector(self, vector: np.ndarray, k: int) -> list[dict]:
        if "community_reports" in self._memory:
            return self._top(
                "community_reports", vector, k, -2.0, lambda r: (-r["sim"], -r["rating"], r["community_id"])
            )
        sql = f"""SELECT {REP_COLS},
                         round(CAST(array_inner_product(embedding, {self._vec(vector)}) AS DOUBLE), 6) AS sim
                  FROM community_reports ORDER BY sim DESC, rating DESC, community_id LIMIT ?"""
        return self._rows(sql, [vector.tolist(), k])

    def reports_by_importance(self, vector: np.ndarray, k: int) -> list[dict]:
        """The k most important reports: broadest level first, then rating, then community weight;
        similarity to the question breaks ties."""
        order = lambda r: (r["level"], -r["rating"], -r["weight"], -r["sim"], r["community_id"])  # noqa: E731
        if "community_reports" in self._memory:
            rows, matrix = self._memory["community_reports"]
            if not rows or k <= 0:
                return []
            sims = np.round((matrix @ np.asarray(vector, dtype=np.float32)).astype(np.float64), 6)
            return sorted(({**r, "sim": float(sims[i])} for i, r in enumerate(rows)), key=order)[:k]
        sql = f"""SELECT {REP_COLS},
                         round(CAST(array_inner_product(embedding, {self._vec(vector)}) AS DOUBLE), 6) AS sim
                  FROM community_reports
                  ORDER BY level, rating DESC, weight DESC, sim DESC, community_id LIMIT ?"""
        return self._rows(sql, [vector.tolist(), k])

    def chunks_by_ids(self, chunk_ids: list[str], text: bool = False) -> list[dict]:
        """Where these chunks are: one row per (chunk, document) with the chunk's first position
        there (and its text when asked), ordered by chunk id and document."""
        if not chunk_ids:
            return []
        if "chunks" in self._memory:
            rows = self._memory["chunks"][0]
            found: dict[tuple[str, str], dict] = {}
            for cid in set(chunk_ids):
                for i in self._chunks_of.get(cid, []):
                    r = rows[i]
                    have = found.get((cid, r["doc_id"]))
                    if have is None or r["position"] < have["position"]:
                        found[(cid, r["doc_id"])] = r
            out = [dict(found[k]) for k in sorted(found)]
            if not text:
                for r in out:
                    r.pop("text")
            return out
        extra = ", first(text ORDER BY position) AS text" if text else ""
        pages = ", ".join(f"first({c} ORDER BY position) AS {c}" for c in ("page_start", "page_end", "section"))
        return self._rows(
            f"""SELECT chunk_id, doc_id, first(doc) AS doc, min(position) AS position, {pages}{extra}
                FROM (SELECT chunk_id, doc_id, doc, position, text, {self._pages} FROM chunks)
                WHERE chunk_id IN (SELECT unnest(?)) GROUP BY chunk_id, doc_id ORDER BY chunk_id, doc_id""",
            [list(set(chunk_ids))],
        )

    def chunks_by_vector(self, vector: np.ndarray, k: int) -> list[dict]:
        if "chunks" in self._memory:
            return self._top("chunks", vector, k, -2.0, lambda r: (-r["sim"], r["chunk_id"], r["doc"], r["position"]))
        # an identical chunk in two documents ties on (sim, chunk_id): document and position decide,
        # not the storage order
        sql = f"""SELECT chunk_id, doc_id, doc, position, text, {self._pages},
                         round(CAST(array_inner_product(embedding, {self._vec(vector)}) AS DOUBLE), 6) AS sim
                  FROM chunks ORDER BY sim DESC, chunk_id, doc, position LIMIT ?"""
        return self._rows(sql, [vector.tolist(), k])

    def batch(self, calls: list[tuple[Callable[..., Any], tuple]]) -> list:
        """The calls one after the other (in process there is no round trip to save)."""
        return [method(*args) for method, args in calls]

    def type_pool(self) -> dict[str, list[str]]:
        if getattr(self, "_pool", None) is not None:
            return self._pool
        return {
            t: list(e)
            for t, e in self.con.execute('SELECT type, entities FROM ty2ents ORDER BY "count" DESC, type').fetchall()
        }

    def counts(self) -> dict[str, int]:
        return dict(self.meta.get("counts", {}))

    # -- index/protocol.GraphLookup: what the HTTP service reads besides search --------------------------------------
    def relations_of(self, key: str, k: int) -> list[dict]:
        """The relations of one entity, heaviest first (ties: the other end's key)."""
        if k <= 0:
            return []
        if self._memory:
            adjacency = getattr(self, "_relations_by_key", None)
            if adjacency is None:
                adjacency = {}
                for r in self._memory["relations"][0]:
                    adjacency.setdefault(r["source_key"], []).append(r)
                    if r["target_key"] != r["source_key"]:
                        adjacency.setdefault(r["target_key"], []).append(r)
                self._relations_by_key = adjacency
            rows = [dict(r) for r in adjacency.get(key, [])]
        else:
            rows = self._rows(
                "SELECT source_key, target_key, source, target, description, weight FROM relations "
                "WHERE source_key = ? OR target_key = ?",
                [key, key],
            )

        def other(r: dict) -> str:
            return r["target_key"] if r["source_key"] == key else r["source_key"]

        return sorted(rows, key=lambda r: (-r["weight"], other(r)))[:k]

    def entity_sources(self, key: str) -> list[str]:
        """The ids of the chunks an entity was extracted from."""
        rows = self._rows("SELECT source_ids FROM entities WHERE key = ?", [key])
        return list(rows[0]["source_ids"] or []) if rows else []

    def chunk_texts(self, ids: list[str]) -> list[dict]:
        """Chunks by id, in document and position order (an identical chunk may appear in several documents)."""
        if not ids:
            return []
        if self._memory:
            wanted = set(ids)
            rows = [dict(r) for r in self._memory["chunks"][0] if r["chunk_id"] in wanted]
        else:
            rows = self._rows(
                f"SELECT chunk_id, doc, position, text, {self._pages} FROM chunks WHERE chunk_id IN (SELECT unnest(?))",
                [ids],
            )
        return sorted(rows, key=lambda r: (r["doc"], r["position"], r["chunk_id"]))


def open_index(home: Path | None = None, backend: str | None = None, preload: bool = False, check_ms: float = 100):
    """The published index: Elasticsearch when GRAPHRAG_ES_URL is set (or backend="elasticsearch"),
    else the DuckDB file under GRAPHRAG_HOME as a LiveIndex: before a query (at most every
    `check_ms`) it compares the file's identity with the version open and moves to a newly published
    file, closing the old one once no query uses it."""
    from graphrag_pipeline.index.es_writer import EsConfig

    home = Path(home) if home else default_home()
    cfg = EsConfig.from_env(home) if backend != "duckdb" else None
    if cfg is not None:
        from graphrag_pipeline.index.es_reader import EsIndex

        return EsIndex(cfg)
    if backend == "elasticsearch":
        raise ValueError("backend 'elasticsearch' needs GRAPHRAG_ES_URL")
    from graphrag_pipeline.index.live import LiveIndex

    return LiveIndex(home, preload=preload, check_s=check_ms / 1000)
