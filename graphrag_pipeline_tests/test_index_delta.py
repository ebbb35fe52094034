"""Delta publishing of the DuckDB index: a patched index equals a full rebuild (vectors included),
only changed texts are embedded, n-hop paths are re-computed only around changed edges, the
fall-backs to a full rebuild, and no incomplete index is ever published."""

from __future__ import annotations

import errno
import os
import random
import stat
import threading

import duckdb
import polars as pl
import pytest

from graphrag_pipeline.graph.tables import EDGE_SCHEMA, NODE_SCHEMA, with_metrics
from graphrag_pipeline.index import duckdb_writer
from graphrag_pipeline.index.duckdb_spare import drop_spare, is_spare_name, spare_path
from graphrag_pipeline.index.duckdb_writer import (
    COMPACT_FREE_FRACTION,
    COMPACT_MIN_FREE_BLOCKS,
    SCHEMA_VERSION,
    IncompleteIndexError,
    check_index_file,
    free_blocks,
    publish_index,
    read_meta,
)
from graphrag_pipeline.index.embedding import HashingEmbedder
from graphrag_pipeline.index.records import TABLES, nhop_affected, nhop_paths
from graphrag_pipeline.query import DuckDBIndex, query
from graphrag_pipeline.reports.offline import CommunityReport, Finding

TYPES = ["PERSON", "GEO", "ORGANIZATION", "EVENT"]
QUESTIONS = ["Who is Entity 12?", "Entity 40 and Entity 41", "the organisation of entity 7", "place 3"]


class Counting(HashingEmbedder):
    def __init__(self, dim: int = 512):
        super().__init__(dim)
        self.seen: list[str] = []

    def embed(self, texts):
        self.seen += list(texts)
        return super().embed(texts)


def _left(folder) -> list[str]:
    """The files in `folder`, but the spare a delta publish keeps (duckdb_spare)."""
    return sorted(p.name for p in folder.iterdir() if not is_spare_name(p.name))


def _name(i: int) -> str:
    return f"Entity {i}"


def _inputs(n: int = 160, seed: int = 7) -> dict:
    rnd = random.Random(seed)
    nodes = pl.DataFrame(
        [
            {
                "key": f"e{i:03d}",
                "name": _name(i),
                "type": TYPES[i % 4],
                "description": f"{_name(i)} is thing number {i}",
                "descriptions": [],
                "source_ids": [f"c{i % 9}"],
                "doc_ids": [f"d{i % 5}"],
                "degree": 0,
                "pagerank": 0.0,
            }
            for i in range(n)
        ],
        schema=NODE_SCHEMA,
    )
    pairs = set()
    while len(pairs) < 3 * n:
        a, b = sorted(rnd.sample(range(n), 2))
        pairs.add((a, b))
    edges = pl.DataFrame(
        [
            {
                "source_key": f"e{a:03d}",
                "target_key": f"e{b:03d}",
                "source": _name(a),
                "target": _name(b),
                "description": f"{_name(a)} works with {_name(b)}",
                "descriptions": [],
                "keywords": ["work"],
                "weight": float(rnd.randint(1, 5)),
                "source_ids": [f"c{a % 9}"],
                "doc_ids": [f"d{a % 5}"],
            }
            for a, b in sorted(pairs)
        ],
        schema=EDGE_SCHEMA,
    )
    nodes = with_metrics(nodes, edges)
    keys = nodes["key"].to_list()
    comms = []
    for j in range(0, n, 6):  # level 0: groups of 6; level 1: groups of 24 (one of them a single node: no report)
        comms.append({"community_id": f"L0-{j:03d}", "level": 0, "nodes": keys[j : j + 6]})
    for j in range(0, n, 24):
        comms.append({"community_id": f"L1-{j:03d}", "level": 1, "nodes": keys[j : j + 24]})
    comms.append({"community_id": "L2-solo", "level": 2, "nodes": [keys[0]]})
    communities = pl.DataFrame([{**c, "size": len(c["nodes"]), "weight": len(c["nodes"]) / n} for c in comms])
    reports = {
        c["community_id"]: CommunityReport(
            c["community_id"],
            c["level"],
            f"Group {c['community_id']}",
            f"Members {', '.join(c['nodes'][:3])}",
            5.0,
            "why",
            [Finding("a finding", "its explanation")],
            [_name(int(k[1:])) for k in c["nodes"]],
        )
        for c in comms
        if len(c["nodes"]) >= 2
    }
    chunk_rows = []
    for d in range(6):
        for p in range(5):
            text = f"Document {d} paragraph {p}: {_name(d * 5 + p)} met {_name(d * 5 + p + 1)}."
            chunk_rows.append(
                {"chunk_id": f"chunk-{d}-{p}", "doc_id": f"d{d}", "doc": f"doc{d}.txt", "position": p, "text": text}
            )
    # an identical paragraph repeated in one document, and shared with another document
    chunk_rows.append(
        {"chunk_id": "chunk-dup", "doc_id": "d1", "doc": "doc1.txt", "position": 5, "text": "Same paragraph."}
    )
    chunk_rows.append(
        {"chunk_id": "chunk-dup", "doc_id": "d1", "doc": "doc1.txt", "position": 6, "text": "Same paragraph."}
    )
    chunk_rows.append(
        {"chunk_id": "chunk-dup", "doc_id": "d2", "doc": "doc2.txt", "position": 5, "text": "Same paragraph."}
    )
    chunks = pl.DataFrame(chunk_rows)
    return {"nodes": nodes, "edges": edges, "communities": communities, "reports": reports, "chunks": chunks}


def _edit(inp: dict) -> dict:
    """A small edit touching every table: descriptions, a removed and an added entity, re-weighted,
    removed and added relations (PageRank recomputed: moves nearly every entity's score), a changed,
    a removed and a new report, changed / removed / added chunks."""
    nodes, edges, communities = inp["nodes"], inp["edges"], inp["communities"]
    nodes = nodes.with_columns(
        pl.when(pl.col("key").is_in(["e010", "e020", "e030"]))
        .then(pl.col("description") + " Edited.")
        .otherwise(pl.col("description"))
        .alias("description")
    )
    nodes = nodes.filter(pl.col("key") != "e005")
    edges = edges.filter((pl.col("source_key") != "e005") & (pl.col("target_key") != "e005"))
    new = pl.DataFrame(
        [
            {
                "key": "e999",
                "name": "Newcomer",
                "type": "PERSON",
                "description": "A new entity",
                "descriptions": [],
                "source_ids": ["c1"],
                "doc_ids": ["d6"],
                "degree": 0,
                "pagerank": 0.0,
            }
        ],
        schema=NODE_SCHEMA,
    )
    nodes = pl.concat([nodes, new])
    first = edges.row(0, named=True)
    edges = edges.slice(2).with_columns(  # two relations removed
        pl.when((pl.col("source_key") == "e012") | (pl.col("target_key") == "e012"))
        .then(pl.col("weight") * 2)
        .otherwise(pl.col("weight"))
        .alias("weight")
    )
    added = pl.DataFrame(
        [
            {
                "source_key": k,
                "target_key": "e999",
                "source": _name(int(k[1:])),
                "target": "Newcomer",
                "description": f"{_name(int(k[1:]))} greets Newcomer",
                "descriptions": [],
                "keywords": [],
                "weight": 3.0,
                "source_ids": ["c1"],
                "doc_ids": ["d6"],
            }
            for k in ("e040", "e041", first["source_key"])
        ],
        schema=EDGE_SCHEMA,
    )
    edges = pl.concat([edges, added]).unique(["source_key", "target_key"], keep="first", maintain_order=True)
    nodes = with_metrics(nodes, edges)
    keys = set(nodes["key"].to_list())
    communities = communities.filter(pl.col("community_id") != "L0-012").with_columns(
        pl.col("nodes").list.eval(pl.element().filter(pl.element().is_in(list(keys))))
    )
    communities = communities.with_columns(pl.col("nodes").list.len().alias("size"))
    communities = pl.concat(
        [
            communities,
            pl.DataFrame(
                [{"community_id": "L0-new", "level": 0, "nodes": ["e040", "e041", "e999"], "size": 3, "weight": 0.5}],
                schema=communities.schema,
            ),
        ]
    )
    reports = {k: v for k, v in inp["reports"].items() if k != "L0-012"}
    changed = reports["L0-018"]
    reports["L0-018"] = CommunityReport(
        changed.community_id,
        changed.level,
        changed.title,
        changed.summary + " Now more.",
        6.0,
        "why",
        changed.findings,
        changed.entities,
    )
    reports["L0-new"] = CommunityReport(
        "L0-new",
        0,
        "Newcomer and friends",
        "Entity 40, Entity 41 and Newcomer",
        7.0,
        "why",
        [],
        ["Entity 40", "Entity 41", "Newcomer"],
    )
    chunks = (
        inp["chunks"]
        .filter(pl.col("doc_id") != "d4")
        .with_columns(
            pl.when(pl.col("chunk_id") == "chunk-0-1")
            .then(pl.lit("Document 0 paragraph 1 rewritten: Newcomer arrives."))
            .otherwise(pl.col("text"))
            .alias("text"),
            pl.when(pl.col("chunk_id") == "chunk-0-1")
            .then(pl.lit("chunk-0-1b"))
            .otherwise(pl.col("chunk_id"))
            .alias("chunk_id"),
        )
    )
    chunks = pl.concat(
        [
            chunks,
            pl.DataFrame(
                [
                    {
                        "chunk_id": "chunk-6-0",
                        "doc_id": "d6",
                        "doc": "doc6.txt",
                        "position": 0,
                        "text": "Newcomer appears in a new document.",
                    }
                ]
            ),
        ]
    )
    return {"nodes": nodes, "edges": edges, "communities": communities, "reports": reports, "chunks": chunks}


def _publish(path, inp: dict, embedder=None, **kw):
    reportable = inp["communities"].filter(pl.col("size") >= 2)["community_id"].to_list()
    reports = [inp["reports"][c] for c in reportable if c in inp["reports"]]
    return publish_index(
        path,
        inp["nodes"],
        inp["edges"],
        inp["communities"],
        reports,
        inp["chunks"],
        embedder or HashingEmbedder(),
        {"method": "fast", "documents": 6, "communities": inp["communities"].height},
        **kw,
    )


def _tables(path) -> dict[str, pl.DataFrame]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {t: con.sql(f"SELECT * FROM {t} ORDER BY ALL").pl() for t in TABLES}
    finally:
        con.close()


def test_delta_publish_equals_a_full_rebuild(tmp_path):
    before, after = _inputs(), _edit(_inputs())
    path = tmp_path / "index.duckdb"
    first = _publish(path, before)
    assert first.mode == "full" and first.reason == "no previous index"
    v1 = read_meta(path)

    counting = Counting()
    res = _publish(path, after, counting, max_fraction=1.0)
    assert res.mode == "delta", res.reason
    full = _publish(tmp_path / "full.duckdb", after)
    assert full.mode == "full"
    # a patched index can be read by whoever could read a new one (its copy is not left 0600)
    mode = stat.S_IMODE(path.stat().st_mode)
    assert mode == stat.S_IMODE((tmp_path / "full.duckdb").stat().st_mode) and mode & stat.S_IRGRP
    delta_tables, full_tables = _tables(path), _tables(tmp_path / "full.duckdb")
    for t in TABLES:  # every row and column, vectors and row hashes included
        assert delta_tables[t].equals(full_tables[t]), t

    # only new or re-worded texts were embedded: the entity scores moved everywhere (PageRank), their names did not
    assert "Newcomer" in counting.seen and "Document 0 paragraph 1 rewritten: Newcomer arrives." in counting.seen
    assert not any(t.startswith("Entity ") and ":" not in t for t in counting.seen), counting.seen
    assert len(counting.seen) < 20
    stats = res.tables
    assert stats["entities"].updated > 100 and stats["entities"].inserted == 1 and stats["entities"].deleted == 1
    assert stats["community_reports"].deleted >= 2 and stats["community_reports"].inserted >= 2
    assert stats["chunks"].deleted >= 5 and stats["nhop"].unchanged > 0
    for t, d in stats.items():
        assert d.unchanged + d.updated + d.deleted == first.meta["counts"][t], t

    meta = read_meta(path)
    assert meta["index_version"] == v1["index_version"] + 1 and meta["previous_index_id"] == v1["index_id"]
    assert meta["build_mode"] == "delta" and meta["counts"] == full.meta["counts"]
    con = duckdb.connect(str(path), read_only=True)
    try:
        changes = con.sql("SELECT table_name, key, key2, op FROM changes").pl()
    finally:
        con.close()
    ops = {(r["table_name"], r["key"], r["key2"]): r["op"] for r in changes.to_dicts()}
    assert ops[("entities", "e005", None)] == "delete" and ops[("entities", "e999", None)] == "upsert"
    assert (
        ops[("community_reports", "L0-012", None)] == "delete"
        and ops[("community_reports", "L0-new", None)] == "upsert"
    )
    assert ops[("chunks", "d4", "chunk-4-0")] == "delete" and ops[("chunks", "d0", "chunk-0-1b")] == "upsert"
    assert ops[("nhop", "e999", None)] == "upsert"

    # and the two answer every query alike, from the file and from memory
    for preload in (False, True):
        with DuckDBIndex(path, preload=preload) as a, DuckDBIndex(tmp_path / "full.duckdb", preload=preload) as b:
            for q in QUESTIONS:
                for mode in ("local", "global", "naive"):
                    assert query(a, q, mode).to_dict() == query(b, q, mode).to_dict(), (q, mode, preload)
            keys = [f"e{i:03d}" for i in range(0, 60, 3)] + ["e999"]
            assert a.nhop(keys) == b.nhop(keys)
            assert a.type_pool() == b.type_pool()


def test_nhop_paths_are_recomputed_only_around_changed_edges():
    before, after = _inputs(), _edit(_inputs())
    old, new = nhop_paths(before["edges"]), nhop_paths(after["edges"])
    affected = nhop_affected(before["edges"], after["edges"])
    assert 0 < len(affected) < after["nodes"].height

    # every entity whose paths differ is among the affected ones...
    def group(df):
        return {k: g.drop("entity_key").to_dicts() for (k,), g in df.group_by("entity_key", maintain_order=True)}

    g_old, g_new = group(old), group(new)
    differ = {k for k in set(g_old) | set(g_new) if g_old.get(k) != g_new.get(k)}
    assert differ <= affected
    # ... and the paths computed for those alone are exactly the whole computation's
    local = nhop_paths(after["edges"], only=sorted(affected))
    assert local.equals(new.filter(pl.col("entity_key").is_in(sorted(affected))))
    assert nhop_affected(after["edges"], after["edges"]) == set()


def test_unchanged_inputs_leave_the_file_alone_and_the_fallbacks(tmp_path, monkeypatch):
    inp = _inputs()
    path = tmp_path / "index.duckdb"
    _publish(path, inp)
    st = os.stat(path)
    again = _publish(path, inp)
    assert again.mode == "unchanged"
    assert (os.stat(path).st_ino, os.stat(path).st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    assert _left(tmp_path) == ["index.duckdb"]  # the copy made meanwhile is gone

    edited = _edit(inp)
    v1 = read_meta(path)
    forced = _publish(path, edited, full_rebuild=True)
    assert forced.mode == "full" and forced.reason == "full rebuild requested"
    # the changes are still recorded against the index it replaced (Elasticsearch can follow)
    assert read_meta(path)["previous_index_id"] == v1["index_id"] and read_meta(path)["changed_keys"] > 0

    big = _publish(path, inp, max_fraction=0.01)  # back to the first inputs: more than 1 % of the rows change
    assert big.mode == "full" and "rows change" in big.reason

    other = _publish(path, edited, HashingEmbedder(256))
    assert other.mode == "full" and "embedder" in other.reason and read_meta(path)["previous_index_id"] is None

    _publish(path, inp, HashingEmbedder(256))
    tiny = {
        **inp,
        "nodes": inp["nodes"].with_columns(
            pl.when(pl.col("key") == "e010")
            .then(pl.lit("Edited"))
            .otherwise(pl.col("description"))
            .alias("description")
        ),
    }
    assert _publish(path, tiny, HashingEmbedder(256)).mode == "delta"
    assert not _publish(path, inp, HashingEmbedder(256)).compacted  # deltas alone leave the file compact

    # a file with many free blocks (here: a big table written, a table written after it, the big
    # one dropped) is patched, then copied into a compact file before it is published - a delta
    # all the same, no text re-embedded
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE junk AS SELECT md5(i::VARCHAR) || md5((-i)::VARCHAR) AS t FROM range(1200000) r(i)")
    con.execute("CHECKPOINT")
    con.execute("CREATE TABLE chunks_again AS SELECT * FROM chunks")
    con.execute("DROP TABLE chunks")
    con.execute("ALTER TABLE chunks_again RENAME TO chunks")
    con.execute("CHECKPOINT")
    con.execute("DROP TABLE junk")
    con.execute("CHECKPOINT")
    free, total = free_blocks(con)
    con.close()
    assert free > COMPACT_FREE_FRACTION * total and free >= COMPACT_MIN_FREE_BLOCKS
    bloated = path.stat().st_size
    drop_spare(path)  # else the next publish patches the file the last one replaced, not a copy of this one
    counting = Counting(256)
    compact = _publish(path, tiny, counting)
    assert compact.mode == "delta" and compact.compacted and "compacted" in compact.reason, compact.reason
    assert compact.to_metadata()["compacted"] and "compact" in compact.phases
    assert len(counting.seen) <= 2 and path.stat().st_size < bloated / 2
    assert _left(path.parent) == [path.name]  # no copy left behind
    con = duckdb.connect(str(path), read_only=True)
    try:
        free, total = free_blocks(con)
        assert free <= COMPACT_FREE_FRACTION * total
        names = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        assert names == {*TABLES, "meta", "changes"}
        keys = "SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'meta' AND constraint_type = 'PRIMARY KEY'"
        assert con.execute(keys).fetchone()[0] == 1  # the copy keeps the tables' constraints
    finally:
        con.close()
    assert read_meta(path)["previous_version"] is not None and read_meta(path)["build_mode"] == "delta"
    assert read_meta(path)["build_reason"].startswith("incremental, then compacted")
    assert _publish(tmp_path / "fresh.duckdb", tiny, HashingEmbedder(256)).mode == "full"
    compacted_tables, fresh_tables = _tables(path), _tables(tmp_path / "fresh.duckdb")
    for t in TABLES:
        assert compacted_tables[t].equals(fresh_tables[t]), t
    (tmp_path / "fresh.duckdb").unlink()

    # a compaction that fails once its copy is written: the patched file is published as it is
    # (complete, only larger), and neither the copy nor DuckDB's temporary files stay behind
    monkeypatch.setattr(duckdb_writer, "_COMPACT_CHECKED", (*duckdb_writer._COMPACT_CHECKED, "no_such_table"))
    failed = _publish(path, inp, HashingEmbedder(256), compact_above=0.0, compact_min_blocks=0)
    assert failed.mode == "delta" and not failed.compacted and "not compacted" in failed.reason, failed.reason
    assert read_meta(path)["index_version"] == compact.meta["index_version"] + 1
    assert _tables(path)["entities"].height == inp["nodes"].height
    assert _left(tmp_path) == ["index.duckdb"]
    monkeypatch.undo()

    con = duckdb.connect(str(path))
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    counting = Counting(256)
    old = _publish(path, inp, counting)
    assert old.mode == "full" and old.reason == f"schema version 1 -> {SCHEMA_VERSION}"
    # rebuilt for the new layout with the same embedder: no text embedded again (a paid model's calls)
    assert counting.seen == []
    con = duckdb.connect(str(path))
    con.execute("""UPDATE meta SET value = '"struct-polars-0.0.1"' WHERE key = 'row_hash_scheme'""")
    con.close()
    counting = Counting(256)
    rehashed = _publish(path, tiny, counting)
    assert rehashed.mode == "full" and "row hash scheme" in rehashed.reason
    assert counting.seen == []  # an entity's vector embeds its name: the edited description needs none
    # vectors of texts made another way (or by a version that did not say how) are not reused
    con = duckdb.connect(str(path))
    con.execute("""UPDATE meta SET value = '"texts-0"' WHERE key = 'embed_text_scheme'""")
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    counting = Counting(256)
    assert _publish(path, inp, counting).mode == "full" and len(counting.seen) > 100


def test_an_incomplete_index_is_never_published(tmp_path):
    inp = _inputs()
    path = tmp_path / "index.duckdb"
    _publish(path, inp)
    original = path.read_bytes()
    edited = _edit(inp)
    edited["reports"].pop("L0-030")  # a reportable community without its report
    for kw in ({}, {"full_rebuild": True}):
        with pytest.raises(IncompleteIndexError) as err:
            _publish(path, edited, **kw)
        assert "1 of" in str(err.value) and "L0-030" in str(err.value)
        assert err.value.completeness.missing["community_reports"] == ["L0-030"]
        assert path.read_bytes() == original
        assert _left(tmp_path) == ["index.duckdb"]  # no temporary file left behind
    verdict = check_index_file(path, inp["nodes"], inp["edges"], inp["communities"])
    assert verdict.passed, verdict.problems()
    verdict = check_index_file(path, edited["nodes"], edited["edges"], edited["communities"])
    assert not verdict.passed and verdict.missing_count["entities"] == 1 and verdict.extra_count["entities"] == 1


def _equals_a_full_rebuild(path, inp, ref) -> None:
    _publish(ref, inp)
    got, want = _tables(path), _tables(ref)
    for t in TABLES:  # every row and column, vectors and row hashes included
        assert got[t].equals(want[t]), t
    ref.unlink()


def test_the_file_a_delta_replaced_is_caught_up_and_patched_by_the_next_one(tmp_path):
    """A delta publish keeps the file it replaced (the spare); the next delta publish catches it up
    with the published `changes` and patches it instead of copying the published file. Each result
    equals a full rebuild, through an edit, its revert and the edit again."""
    before, after = _inputs(), _edit(_inputs())
    path, ref = tmp_path / "index.duckdb", tmp_path / "ref.duckdb"
    _publish(path, before)
    assert not spare_path(path).exists()  # a full build: nothing to keep
    bases = []
    for inp in (after, before, after, before):
        res = _publish(path, inp, max_fraction=1.0)
        assert res.mode == "delta", res.reason
        bases.append("spare" if "spare" in res.phases else "copy")
        _equals_a_full_rebuild(path, inp, ref)
        assert spare_path(path).stat().st_ino != path.stat().st_ino
        assert read_meta(spare_path(path))["index_id"] == read_meta(path)["previous_index_id"]
    assert bases == ["copy", "spare", "spare", "spare"]
    # nothing changed: the spare stays as it is, and is used next time
    kept = spare_path(path).stat().st_ino
    assert _publish(path, before).mode == "unchanged" and spare_path(path).stat().st_ino == kept
    assert "spare" in _publish(path, after, max_fraction=1.0).phases
    _equals_a_full_rebuild(path, after, ref)
    # a full rebuild leaves no spare: its `changes` cannot catch the older file up
    assert _publish(path, after, full_rebuild=True).mode == "full" and not spare_path(path).exists()
    assert _left(tmp_path) == ["index.duckdb"]


def test_a_spare_that_is_open_wrong_or_the_published_file_itself_is_not_patched(tmp_path):
    before, after = _inputs(), _edit(_inputs())
    path, ref = tmp_path / "index.duckdb", tmp_path / "ref.duckdb"
    _publish(path, before)
    _publish(path, after, max_fraction=1.0)

    # a reader (in this process: DuckDB's own lock does not see it) still holds the version that
    # becomes the spare: the next publish copies instead, and the reader's rows stay as they were
    third = {
        **before,
        "nodes": before["nodes"].with_columns(
            pl.when(pl.col("key") == "e010").then(pl.lit("Third")).otherwise(pl.col("description")).alias("description")
        ),
    }
    reader = DuckDBIndex(path)  # on `after`
    try:
        assert "spare" in _publish(path, before, max_fraction=1.0).phases  # `after` becomes the spare
        assert read_meta(path)["index_id"] != reader.meta["index_id"]  # (and a look at a file drops no lock)
        res = _publish(path, third, max_fraction=1.0)
        assert "copy" in res.phases and "spare" not in res.phases
        _equals_a_full_rebuild(path, third, ref)
        row = reader.con.execute("SELECT description FROM entities WHERE key = 'e010'").fetchone()
        assert row[0] == after["nodes"].filter(pl.col("key") == "e010")["description"][0] != "Third"
        assert reader.con.execute("SELECT count(*) FROM entities WHERE key = 'e999'").fetchone()[0] == 1
    finally:
        reader.close()
    assert "spare" in _publish(path, after, max_fraction=1.0).phases  # the file the copy replaced
    _equals_a_full_rebuild(path, after, ref)

    # a spare that does not come out equal to the published version (here a row lost): dropped, copied
    _publish(path, before, max_fraction=1.0)
    con = duckdb.connect(str(spare_path(path)))
    con.execute("DELETE FROM chunks WHERE chunk_id = (SELECT min(chunk_id) FROM chunks)")
    con.close()
    res = _publish(path, after, max_fraction=1.0)
    assert "copy" in res.phases and "spare" not in res.phases
    _equals_a_full_rebuild(path, after, ref)

    # a second name of the published file itself (a publish that died between keeping the spare and
    # renaming): never patched in place
    drop_spare(path)
    os.link(path, spare_path(path))
    published = path.read_bytes()
    res = _publish(path, before, max_fraction=1.0)
    assert "copy" in res.phases
    assert spare_path(path).read_bytes() == published  # the old file, untouched, is the new spare
    _equals_a_full_rebuild(path, before, ref)


def test_a_reader_locks_the_file_it_reads_and_lets_go_of_it(tmp_path, monkeypatch):
    """A publish renaming another file into place between a reader's lock and its ATTACH: the
    reader opens again, so the file it reads is the file it holds (else that file, unlocked,
    could be patched as a spare under it). release() lets go at once; a publish that fails keeps
    no lock behind, even while its error is kept."""
    from graphrag_pipeline.index import duckdb_reader
    from graphrag_pipeline.index.duckdb_reader import attach_read_only, release
    from graphrag_pipeline.index.duckdb_spare import _unused

    inp = _inputs()
    path, other = tmp_path / "index.duckdb", tmp_path / "other.duckdb"
    _publish(path, inp)
    _publish(other, _edit(inp))
    real_hold, swaps = duckdb_reader._hold, []

    def hold_then_replaced(con, p):
        held = real_hold(con, p)
        if not swaps:
            swaps.append(os.stat(path).st_ino)
            os.replace(other, path)  # a publish, between the lock and the ATTACH
        return held

    monkeypatch.setattr(duckdb_reader, "_hold", hold_then_replaced)
    con = attach_read_only(path)
    monkeypatch.undo()
    assert swaps and os.stat(path).st_ino != swaps[0]
    assert con.execute("SELECT count(*) FROM entities WHERE key = 'e999'").fetchall()[0][0] == 1  # the new file
    assert not _unused(path)  # ... and the one it holds
    release(con)
    assert _unused(path)

    holds = len(duckdb_reader._HOLDS)
    monkeypatch.setattr(duckdb_writer, "with_vectors", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError) as failed:
        _publish(path, inp, max_fraction=1.0)
    assert failed.value is not None and len(duckdb_reader._HOLDS) == holds and _unused(path)


def test_without_file_locks_readers_read_and_publishes_copy(tmp_path, monkeypatch):
    """A file system that refuses open-file-description locks (ENOLCK): readers open the index
    without one, and no publish patches a spare (it cannot know nobody reads it): it copies."""
    from graphrag_pipeline.index import duckdb_reader

    inp = _inputs()
    path = tmp_path / "index.duckdb"
    _publish(path, inp)
    _publish(path, _edit(inp), max_fraction=1.0)
    real = duckdb_reader.fcntl.fcntl

    def no_locks(fd, cmd, *args):
        if cmd == duckdb_reader.fcntl.F_OFD_SETLK:
            raise OSError(errno.ENOLCK, "No locks available")
        return real(fd, cmd, *args)

    monkeypatch.setattr(duckdb_reader.fcntl, "fcntl", no_locks)  # the fcntl module: readers and publishes
    index = DuckDBIndex(path)
    assert index.con.execute("SELECT count(*) FROM entities").fetchall()[0][0] == _edit(inp)["nodes"].height
    index.close()
    res = _publish(path, inp, max_fraction=1.0)
    assert "copy" in res.phases and "spare" not in res.phases
    _equals_a_full_rebuild(path, inp, tmp_path / "ref.duckdb")


def test_a_spare_is_checked_again_once_taken(tmp_path):
    """What the spare is gets checked again after it is moved to the publish's own name (it was
    looked at when the publish began): a second name of the published file (another publish died
    between keeping the spare and renaming), or a file of another version, is not patched."""
    from graphrag_pipeline.index.duckdb_reader import attach_read_only, release
    from graphrag_pipeline.index.duckdb_spare import take_spare
    from graphrag_pipeline.index.duckdb_writer import CatchUp

    inp = _inputs()
    path = tmp_path / "index.duckdb"
    _publish(path, inp)
    _publish(path, _edit(inp), max_fraction=1.0)
    meta = read_meta(path)
    con = attach_read_only(path)
    catch_up = CatchUp.read(con)
    release(con)
    published = path.read_bytes()
    os.link(path, tmp_path / "link")
    assert take_spare(tmp_path / "link", tmp_path / "work", path, meta["previous_index_id"], catch_up, print) is None
    assert path.read_bytes() == published and _left(tmp_path) == ["index.duckdb"]
    # a file of another version than the one the published file was patched from
    _publish(tmp_path / "older.duckdb", inp)
    assert (
        take_spare(tmp_path / "older.duckdb", tmp_path / "work", path, meta["previous_index_id"], catch_up, print)
        is None
    )
    assert _left(tmp_path) == ["index.duckdb"]
    # the right one
    con = take_spare(spare_path(path), tmp_path / "work", path, meta["previous_index_id"], catch_up, print)
    assert con is not None
    con.execute("COMMIT")
    con.close()
    assert _tables(tmp_path / "work")["entities"].equals(_tables(path)["entities"])


def test_a_failed_copy_or_a_replaced_file_fails_the_publish_and_leaves_what_is_published(tmp_path, monkeypatch):
    inp = _inputs()
    path = tmp_path / "index.duckdb"
    _publish(path, inp)
    original = path.read_bytes()

    def disk_full(fd):  # the copy's flush to disk is where a full disk shows
        raise OSError(28, "No space left on device")

    # a file system without sendfile between files: the copy goes through memory
    def no_sendfile(*args):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(duckdb_writer.os, "sendfile", no_sendfile)
    assert _publish(path, _edit(inp), max_fraction=1.0).mode == "delta"
    assert _tables(path)["entities"].height == _edit(inp)["nodes"].height
    _publish(path, inp, max_fraction=1.0)
    original = path.read_bytes()
    monkeypatch.undo()

    drop_spare(path)  # the next publish copies the published file
    monkeypatch.setattr(duckdb_writer._Copier, "CHUNK", 4096)  # many chunks
    monkeypatch.setattr(duckdb_writer.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        _publish(path, _edit(inp), max_fraction=1.0)
    assert path.read_bytes() == original
    assert _left(tmp_path) == ["index.duckdb"]
    monkeypatch.undo()

    # another publish replaces the file while this one compares: this one stops, the other stays
    other = tmp_path / "other.bin"
    other.write_bytes(original)
    real_rows = duckdb_writer.build_index_rows

    def rows_then_replaced(*args, **kwargs):
        out = real_rows(*args, **kwargs)
        os.replace(other, path)  # same bytes, another file
        return out

    monkeypatch.setattr(duckdb_writer, "build_index_rows", rows_then_replaced)
    with pytest.raises(RuntimeError, match="replaced by another publish"):
        _publish(path, _edit(inp), max_fraction=1.0)
    assert path.read_bytes() == original
    assert _left(tmp_path) == ["index.duckdb"]


def test_a_write_failing_inside_the_patch_transaction_raises_its_own_error(tmp_path, monkeypatch):
    """An INSERT that fails inside the patch's transaction is the error the publish raises (DuckDB
    then refuses to unregister the inserted frame, "Current transaction is aborted", which used to
    hide the cause); nothing is published."""
    inp = _inputs()
    path = tmp_path / "index.duckdb"
    _publish(path, inp)
    original = path.read_bytes()
    real = duckdb_writer.with_vectors

    def bad_degrees(table, rows, *args, **kwargs):
        out = real(table, rows, *args, **kwargs)
        return out.with_columns(pl.lit("many").alias("degree")) if table == "entities" else out

    monkeypatch.setattr(duckdb_writer, "with_vectors", bad_degrees)
    with pytest.raises(duckdb.ConversionException, match="many"):
        _publish(path, _edit(inp), max_fraction=1.0)
    assert path.read_bytes() == original
    assert _left(tmp_path) == ["index.duckdb"]


def test_readers_see_whole_versions_while_deltas_are_published(tmp_path):
    inp, edited = _inputs(), _edit(_inputs())
    path = tmp_path / "index.duckdb"
    _publish(path, inp)
    expected = {read_meta(path)["counts"]["entities"], edited["nodes"].height}
    errors, seen = [], set()
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            try:
                con = duckdb.connect(str(path), read_only=True)
                n = con.execute("SELECT count(*) FROM entities").fetchall()[0][0]
                counts = con.execute("SELECT value FROM meta WHERE key = 'counts'").fetchall()[0][0]
                con.close()
                assert n in expected and str(n) in counts
                seen.add(n)
            except Exception as exc:  # noqa: BLE001
                errors.append(repr(exc))

    t = threading.Thread(target=reader)
    t.start()
    try:
        # a whole-graph edit back and forth: deltas, compacted ones and a full rebuild
        results = [
            _publish(
                path,
                edited if i % 2 == 0 else inp,
                max_fraction=1.0,
                compact_above=0.0 if i in (1, 2) else COMPACT_FREE_FRACTION,
                compact_min_blocks=0 if i in (1, 2) else COMPACT_MIN_FREE_BLOCKS,
                full_rebuild=i == 4,
            )
            for i in range(6)
        ]
    finally:
        stop.set()
        t.join()
    assert not errors, errors[:3]
    assert [r.mode for r in results] == ["delta"] * 4 + ["full", "delta"]
    assert [r.compacted for r in results] == [False, True, True, False, False, False]
    assert seen and seen <= expected
    assert _left(tmp_path) == ["index.duckdb"]


# -- through Dagster --------------------------------------------------------------------------------
def _run_index_job(instance, run_config: dict | None = None):
    from graphrag_pipeline.definitions import defs

    return defs.resolve_job_def("index_job").execute_in_process(
        instance=instance, raise_on_error=False, run_config=run_config or {}
    )


def _metadata(instance, asset: str) -> dict:
    import dagster as dg

    ev = instance.get_latest_materialization_event(dg.AssetKey(asset))
    return {k: v.value for k, v in ev.asset_materialization.metadata.items()}


def test_search_index_fails_on_a_missing_report_and_keeps_the_published_index(home, corpus, instance):
    import dagster as dg

    from graphrag_pipeline.defs.checks import search_index_is_complete
    from graphrag_pipeline_tests.conftest import cli

    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    index = home / "index" / "search_index.duckdb"
    inst = instance()
    first = _metadata(inst, "search_index")
    assert first["mode"] == "full" and first["index_version"] == 1

    # a republish with nothing changed leaves the file as it is
    st = os.stat(index)
    assert _run_index_job(inst).success
    assert _metadata(inst, "search_index")["mode"] == "unchanged"
    assert os.stat(index).st_mtime_ns == st.st_mtime_ns

    before = index.read_bytes()
    meta_before = read_meta(index)
    reports = sorted((home / "reports").glob("*.json"))
    gone = reports[len(reports) // 2]
    gone.unlink()
    result = _run_index_job(inst)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE)
    description = failure.step_failure_data.user_failure_data.description  # a dg.Failure, not a crash
    assert gone.stem in description and "1 of" in description and "no report file" in description, description
    assert index.read_bytes() == before and read_meta(index) == meta_before  # the published index is untouched
    assert _left(index.parent) == [index.name]  # nothing half-written beside it
    assert len(list((home / "reports").glob("*.json"))) == len(reports) - 1  # and no report file was deleted
    assert search_index_is_complete.check_specs and all(s.blocking for s in search_index_is_complete.check_specs)


def test_the_cli_exits_non_zero_and_keeps_the_published_index_when_a_report_is_unreadable(home, corpus, monkeypatch):
    """Through the CLI: an edit is built while one stored report (of a community the edit does not
    touch) cannot be read; the index is not published over the complete one and the build fails."""
    from graphrag_pipeline.storage.store import Store
    from graphrag_pipeline_tests.conftest import cli

    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    index = home / "index" / "search_index.duckdb"
    before, meta_before = index.read_bytes(), read_meta(index)
    victim = sorted(p.stem for p in (home / "reports").glob("*.json"))[0]
    read_report, identity = Store.read_report, Store.report_identity
    monkeypatch.setattr(Store, "read_report", lambda self, cid: None if cid == victim else read_report(self, cid))
    # (a file that cannot be read now is another file than the one the index read last time)
    monkeypatch.setattr(Store, "report_identity", lambda self, cid: "other" if cid == victim else identity(self, cid))
    doc = sorted(corpus.iterdir())[0]
    doc.write_text(doc.read_text(encoding="utf-8") + "\n\nAda Lovelace wrote to Charles Babbage.\n", encoding="utf-8")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code != 0, out
    assert victim in out and "no report file" in out and "build FAILED" in out, out
    assert index.read_bytes() == before and read_meta(index) == meta_before  # the complete index stays published
    monkeypatch.setattr(Store, "read_report", read_report)
    monkeypatch.setattr(Store, "report_identity", identity)
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")  # readable again: published
    assert code == 0, out
    assert read_meta(index)["index_version"] == meta_before["index_version"] + 1


def test_nhop_affected_is_exact_enough_on_random_edits_and_spares_hubs_minor_edges():
    """On random graphs with random edits, every node whose paths differ is affected; and a small
    change at a hub that leaves its strongest edges alone does not mark every node that reaches it."""
    import random

    def edges_of(pairs: dict) -> pl.DataFrame:
        rows = sorted((min(a, b), max(a, b), w) for (a, b), w in pairs.items())
        schema = {"source_key": pl.Utf8, "target_key": pl.Utf8, "weight": pl.Float64}
        return pl.DataFrame(rows, schema=schema, orient="row")

    def group(df):
        return {k: g.drop("entity_key").to_dicts() for (k,), g in df.group_by("entity_key", maintain_order=True)}

    rng = random.Random(7)
    for trial in range(30):
        n = rng.randint(5, 40)
        names = [f"n{i:02d}" for i in range(n)]
        pairs = {}
        for _ in range(rng.randint(n, n * 4)):
            a, b = rng.sample(names, 2)
            pairs[(min(a, b), max(a, b))] = float(rng.randint(1, 6))
        before = edges_of(pairs)
        edited = dict(pairs)
        for _ in range(rng.randint(1, 3)):
            kind = rng.random()
            if kind < 0.4 and edited:
                k = rng.choice(sorted(edited))
                edited[k] += rng.choice([1.0, 0.5, 3.0])
            elif kind < 0.7 and edited:
                del edited[rng.choice(sorted(edited))]
            else:
                a, b = rng.sample(names, 2)
                edited[(min(a, b), max(a, b))] = float(rng.randint(1, 6))
        after = edges_of(edited)
        affected = nhop_affected(before, after)
        g_old, g_new = group(nhop_paths(before)), group(nhop_paths(after))
        differ = {k for k in set(g_old) | set(g_new) if g_old.get(k) != g_new.get(k)}
        assert differ <= affected, (trial, differ - affected)
        # as the publish calls it: the endpoints of every relation that differs in any column (here
        # with random extra nodes, as a description-only change adds) and only the old edges touching them
        ends = set(before.join(after, on=["source_key", "target_key", "weight"], how="anti")["source_key"])
        ends |= set(before.join(after, on=["source_key", "target_key", "weight"], how="anti")["target_key"])
        ends |= set(after.join(before, on=["source_key", "target_key", "weight"], how="anti")["source_key"])
        ends |= set(after.join(before, on=["source_key", "target_key", "weight"], how="anti")["target_key"])
        touched = ends | set(rng.sample(names, 2))
        near = before.filter(pl.col("source_key").is_in(touched) | pl.col("target_key").is_in(touched))
        assert nhop_affected(near, after, touched=touched) >= affected, trial
        local = nhop_paths(after, only=sorted(affected)) if affected else None
        if local is not None:
            assert local.equals(nhop_paths(after).filter(pl.col("entity_key").is_in(sorted(affected))))

    # a hub joined to 30 spokes by strong edges; a spoke-to-spoke edge of weight 1 far from the top
    hub = {("hub", f"s{i:02d}"): 10.0 + i for i in range(30)}
    hub[("s00", "s01")] = 1.0
    bumped = dict(hub)
    bumped[("s00", "s01")] = 2.0
    affected = nhop_affected(edges_of(hub), edges_of(bumped))
    assert affected == {"s00", "s01"}  # the hub's strongest edges did not change: nobody else moves
    # its strongest edge gains weight, its strongest neighbours keep their order: the paths hold no
    # weights, so only the edge's ends are computed again (not every spoke that walks through the hub)
    heavier = dict(hub)
    heavier[("hub", "s29")] = 50.0
    assert nhop_affected(edges_of(hub), edges_of(heavier)) == {"hub", "s29"}
    assert nhop_paths(edges_of(hub)).equals(nhop_paths(edges_of(heavier)))
    # the order changes (s00 jumps to the top): the spokes reaching the hub are computed again
    reordered = dict(hub)
    reordered[("hub", "s00")] = 60.0
    assert len(nhop_affected(edges_of(hub), edges_of(reordered))) == 31


def test_report_documents_from_the_memo_equal_a_full_computation_over_random_edits():
    """The reports' documents taken from the memo where the members' documents did not change are
    exactly those computed for every report, step after step of random edits (members' documents
    added and removed, members moving between communities, a document losing its chunks); and the
    memo is really used: after one node changes, only the reports holding it are ranked again."""
    import random

    from graphrag_pipeline.index.records import SourcesMemo, _report_rows
    from graphrag_pipeline.reports.offline import CommunityReport

    rng = random.Random(5)
    docs = [f"d{i:03d}" for i in range(40)]
    keys = [f"k{i:02d}" for i in range(30)]
    node_docs = {k: sorted(rng.sample(docs, rng.randint(1, 8))) for k in keys}
    comms = {f"c{i}": sorted(rng.sample(keys, rng.randint(2, 9))) for i in range(8)}
    comms["top"] = list(keys)

    def frames(chunked: list[str]):
        nodes = pl.DataFrame(
            {"key": keys, "name": [k.upper() for k in keys], "doc_ids": [node_docs[k] for k in keys]},
            schema={"key": pl.Utf8, "name": pl.Utf8, "doc_ids": pl.List(pl.Utf8)},
        )
        communities = pl.DataFrame(
            {"community_id": list(comms), "nodes": list(comms.values()), "weight": [1.0] * len(comms)},
            schema={"community_id": pl.Utf8, "nodes": pl.List(pl.Utf8), "weight": pl.Float64},
        )
        chunks = pl.DataFrame({"doc_id": chunked, "doc": [f"corpus/{d}.txt" for d in chunked]})
        reports = [CommunityReport(c, 0, f"title {c}", "summary", 5.0, "why") for c in comms]
        return reports, communities, nodes, chunks

    memo = SourcesMemo()
    for step in range(30):
        kind = rng.random()
        if kind < 0.4:
            k = rng.choice(keys)
            node_docs[k] = sorted(set(node_docs[k]) ^ {rng.choice(docs)}) or [docs[0]]
        elif kind < 0.7:
            c = rng.choice([c for c in comms if c != "top"])
            comms[c] = sorted(set(comms[c]) ^ {rng.choice(keys)}) or [keys[0]]
        chunked = docs if step % 7 else docs[1:]  # now and then a named document has no chunks
        args = frames(chunked)
        assert _report_rows(*args, sources=memo).equals(_report_rows(*args)), step
    assert memo.table is not None and memo.table.height == len(comms)

    # one node gains a document; the memo's documents are marked, so a report taken from it shows
    k = keys[3]
    holding = {c for c, m in comms.items() if k in m}
    node_docs[k] = sorted(set(node_docs[k]) | {docs[-1]})
    memo.table = memo.table.with_columns(pl.lit(["from the memo"]).alias("documents"))
    args = frames(docs)
    rows = _report_rows(*args, sources=memo)
    from_memo = set(rows.filter(pl.col("documents") == ["from the memo"])["community_id"].to_list())
    assert from_memo == set(comms) - holding and holding


def test_report_sources_memo_is_voided_by_a_moved_path_and_read_back_only_in_its_own_layout(tmp_path):
    from graphrag_pipeline.index.records import SourcesMemo, _report_rows
    from graphrag_pipeline.reports.offline import CommunityReport
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store

    nodes = pl.DataFrame(
        {"key": ["a", "b", "c"], "name": ["A", "B", "C"], "doc_ids": [["d1", "d2"], ["d2"], ["d3"]]},
        schema={"key": pl.Utf8, "name": pl.Utf8, "doc_ids": pl.List(pl.Utf8)},
    )
    communities = pl.DataFrame(
        {"community_id": ["c1", "c2"], "nodes": [["a", "b"], ["b", "c"]], "weight": [1.0, 1.0]},
        schema={"community_id": pl.Utf8, "nodes": pl.List(pl.Utf8), "weight": pl.Float64},
    )
    reports = [CommunityReport(c, 0, f"title {c}", "summary", 5.0, "why") for c in ("c1", "c2")]
    chunks = pl.DataFrame({"doc_id": ["d1", "d2", "d3"], "doc": ["one.txt", "two.txt", "three.txt"]})
    memo = SourcesMemo()
    first = _report_rows(reports, communities, nodes, chunks, memo)
    assert first["documents"].to_list() == [["two.txt", "one.txt"], ["three.txt", "two.txt"]]
    # the same document ids, one of them now under another path (a Unicode twin took its key)
    moved = chunks.with_columns(
        pl.when(pl.col("doc_id") == "d2").then(pl.lit("zwei.txt")).otherwise("doc").alias("doc")
    )
    again = _report_rows(reports, communities, nodes, moved, memo)
    assert again.equals(_report_rows(reports, communities, nodes, moved))
    assert "zwei.txt" in again["documents"].to_list()[0]

    store = Store(Paths(tmp_path))
    store.write_report_sources("search_index", memo)
    back = store.read_report_sources("search_index")
    assert back.table.equals(memo.table) and back.paths.equals(memo.paths)
    assert _report_rows(reports, communities, nodes, moved, back).equals(again)
    # a file of another layout is not used (nor does it fail the build): the lists are computed again
    table_file = tmp_path / "graph" / "report-sources.search_index.parquet"
    pl.DataFrame({"community_id": ["c1"], "signature": [1], "documents": [["x"]]}).write_parquet(table_file)
    assert store.read_report_sources("search_index").table is None
    table_file.write_bytes(b"garbage")
    assert store.read_report_sources("search_index").table is None
    # nor one whose scheme is unknown (null), in a home whose path holds glob characters
    store.write_report_sources("search_index", memo)
    assert store.read_report_sources("search_index").table is not None
    written = pl.read_parquet(table_file)
    written.with_columns(pl.lit(None, pl.Utf8).alias("scheme")).write_parquet(table_file)
    assert store.read_report_sources("search_index").table is None
    odd = Store(Paths(tmp_path / "home [1]*"))
    odd.paths.graph_dir.mkdir(parents=True, exist_ok=True)
    odd.write_report_sources("search_index", memo)
    assert odd.read_report_sources("search_index").table.equals(memo.table)
    store.write_report_sources("search_index", SourcesMemo())
    assert not table_file.exists()


def _by_key(old: pl.DataFrame, new: pl.DataFrame) -> pl.DataFrame:
    """The changed keys of a unique-keyed table, worked out row by row (the oracle)."""
    before = {(r["source_key"], r["target_key"]): r["row_hash"] for r in old.to_dicts()}
    after = {(r["source_key"], r["target_key"]): r["row_hash"] for r in new.to_dicts()}
    rows = [
        (s, t, 1 if (s, t) in before else None, 1 if (s, t) in after else None)
        for (s, t) in sorted(set(before) | set(after))
        if before.get((s, t)) != after.get((s, t))
    ]
    return pl.DataFrame(
        rows,
        schema={"source_key": pl.Utf8, "target_key": pl.Utf8, "old_rows": pl.Int64, "new_rows": pl.Int64},
        orient="row",
    )


def test_relations_compared_by_hash_first_equal_a_key_by_key_comparison_and_a_hash_collision_is_caught(tmp_path):
    rng = random.Random(5)
    old = pl.DataFrame(
        {
            "source_key": [f"s{i % 97}" for i in range(3000)],
            "target_key": [f"t{i}" for i in range(3000)],
            "row_hash": [rng.getrandbits(64) for _ in range(3000)],
        },
        schema={"source_key": pl.Utf8, "target_key": pl.Utf8, "row_hash": pl.UInt64},
    )
    con = duckdb.connect(str(tmp_path / "relations.duckdb"))
    con.execute("CREATE TABLE relations (source_key VARCHAR, target_key VARCHAR, row_hash UBIGINT)")
    con.register("_old", old.to_arrow())
    con.execute("INSERT INTO relations SELECT * FROM _old")

    def compare(new: pl.DataFrame) -> tuple[pl.DataFrame | None, pl.DataFrame]:
        fast = duckdb_writer._diff_unique_by_hash(con, "relations", new)
        got = duckdb_writer._diff_groups(con, "relations", new)
        sort = ["source_key", "target_key"]
        assert got.select(_by_key(old, new).columns).sort(sort).equals(_by_key(old, new)), got
        return fast, got

    for _ in range(20):  # random edits: rows re-worded, removed, added
        new = old.sample(fraction=1.0, shuffle=True, seed=rng.randrange(1 << 30)).with_row_index("i")
        new = new.filter(pl.col("i") >= rng.randrange(0, 30)).with_columns(
            pl.when(pl.col("i") < 60 + rng.randrange(0, 30))
            .then(pl.col("row_hash") // 2)
            .otherwise(pl.col("row_hash"))
            .alias("row_hash")
        )
        added = pl.DataFrame(
            {
                "source_key": ["new"] * 25,
                "target_key": [f"n{i}" for i in range(25)],
                "row_hash": [rng.getrandbits(64) for _ in range(25)],
            },
            schema=old.schema,
        )
        fast, got = compare(pl.concat([new.drop("i"), added]))
        assert fast is not None and got.height > 60

    h = old["row_hash"].to_list()
    # a re-worded row whose new hash is another (unchanged) row's: a hash twice among the new rows
    collided = old.with_columns(
        pl.when(pl.col("target_key") == "t1").then(h[2]).otherwise(pl.col("row_hash")).alias("row_hash")
    )
    assert compare(collided)[0] is None
    # ... and when that other row was re-worded too: a key seen as removed is among the new rows
    both = old.with_columns(
        pl.when(pl.col("target_key") == "t1")
        .then(h[2])
        .when(pl.col("target_key") == "t2")
        .then(h[2] // 2)
        .otherwise(pl.col("row_hash"))
        .alias("row_hash")
    )
    assert compare(both)[0] is None
    # a key written twice among the new rows
    twice = pl.concat([old, old.head(1).with_columns(pl.col("row_hash") // 3)])
    assert duckdb_writer._diff_unique_by_hash(con, "relations", twice) is None
    assert duckdb_writer._diff_groups(con, "relations", twice).rows() == [("s0", "t0", 1, 2)]
    con.close()


def test_the_completeness_check_names_keys_swapped_doubled_or_null_at_the_same_count(tmp_path):
    inp = _inputs()
    path = tmp_path / "index.duckdb"
    _publish(path, inp)
    assert check_index_file(path, inp["nodes"], inp["edges"], inp["communities"]).passed
    edges = inp["edges"].sort("source_key", "target_key")
    first, second = edges.row(0, named=True), edges.row(1, named=True)

    def damaged(assignment: str, *values, of: dict = first):
        """The index with the relation `of` changed by `assignment` (an UPDATE's SET), checked."""
        copy = tmp_path / "damaged.duckdb"
        copy.write_bytes(path.read_bytes())
        con = duckdb.connect(str(copy))
        where = [of["source_key"], of["target_key"]]
        con.execute(f"UPDATE relations SET {assignment} WHERE source_key = ? AND target_key = ?", [*values, *where])
        con.close()
        return check_index_file(copy, inp["nodes"], inp["edges"], inp["communities"])

    # the first relation written twice in place of the second: as many rows, one key doubled, one missing
    doubled = damaged("source_key = ?, target_key = ?", first["source_key"], first["target_key"], of=second)
    assert not doubled.passed
    assert doubled.duplicate_count["relations"] == 1 and doubled.missing_count["relations"] == 1
    # a relation under another key: as many rows, none doubled
    swapped = damaged("target_key = 'nobody'")
    assert not swapped.passed
    assert swapped.missing_count["relations"] == 1 and swapped.extra_count["relations"] == 1
    # a key with no value matches nothing, not even the same key with no value in the graph
    null = damaged("target_key = NULL")
    assert not null.passed and null.missing_count["relations"] == 1
    is_first = (pl.col("source_key") == first["source_key"]) & (pl.col("target_key") == first["target_key"])
    inp["edges"] = inp["edges"].with_columns(
        pl.when(is_first).then(None).otherwise(pl.col("target_key")).alias("target_key")
    )
    both = check_index_file(tmp_path / "damaged.duckdb", inp["nodes"], inp["edges"], inp["communities"])
    assert not both.passed and both.missing_count["relations"] == 1 and both.extra_count["relations"] == 1


def test_row_hashes_and_parquet_files_do_not_depend_on_how_a_table_is_chunked(tmp_path):
    from graphrag_pipeline.index.records import COLUMNS, row_hashes
    from graphrag_pipeline.storage.files import SLICE_ROWS, in_slices, write_parquet

    n = 3 * SLICE_ROWS + 17
    df = _relations(n, 11, sources=500, words=30, by_source=False)
    pieces = pl.concat([df.slice(i, 1000) for i in range(0, n, 1000)], rechunk=False)
    sliced = in_slices(pieces)
    assert sliced.equals(df) and sliced.n_chunks() == 4 and pieces.n_chunks() == 25
    assert in_slices(df.head(SLICE_ROWS)).n_chunks() == 1  # a small table as it is
    hashes = row_hashes(df, COLUMNS["relations"])
    assert hashes.equals(row_hashes(pieces, COLUMNS["relations"])) and hashes.n_unique() == n
    for i, table in enumerate((df, pieces)):  # the same bytes, whatever the chunks
        write_parquet(table, tmp_path / f"{i}.parquet")
    assert (tmp_path / "0.parquet").read_bytes() == (tmp_path / "1.parquet").read_bytes()
    assert pl.read_parquet(tmp_path / "1.parquet").equals(df)


def test_worn_tables_are_those_with_many_replaced_rows_still_stored():
    """A table is written whole again once its tail (replaced rows still stored) reaches
    sqrt(2 x live rows x rows the patch replaced), and WORN_MIN_ROWS: the same tail is worn when the
    patches that grew it replace few rows each (it took many of them), not when they replace many."""
    con = duckdb.connect()
    try:
        for t in TABLES:
            con.execute(f"CREATE TABLE {t} AS SELECT range AS i, hash(range) AS row_hash FROM range(4000)")
        con.execute("DELETE FROM entities WHERE i < 1000")  # a tail of 1000 for 3000 live
        con.execute("DELETE FROM relations WHERE i < 400")  # 400 for 3600: fewer than WORN_MIN_ROWS
        # entities: sqrt(2 x 3000 x 100) = 775 <= 1000; relations: below the minimum whatever the patch
        assert duckdb_writer.worn_tables(con, {"entities": 100, "relations": 1}) == ["entities"]
        # patches of 200 entity rows: sqrt(2 x 3000 x 200) = 1095 > 1000, not worn yet
        assert duckdb_writer.worn_tables(con, {"entities": 200}) == []
        saved = duckdb_writer.WORN_MIN_ROWS
        duckdb_writer.WORN_MIN_ROWS = 300
        try:
            # relations: sqrt(2 x 3600 x 20) = 379 <= 400 worn; after patches of 30 rows (465) not yet
            assert duckdb_writer.worn_tables(con, {"entities": 100, "relations": 20}) == ["entities", "relations"]
            assert duckdb_writer.worn_tables(con, {"entities": 100, "relations": 30}) == ["entities"]
        finally:
            duckdb_writer.WORN_MIN_ROWS = saved
        order = con.execute("SELECT i FROM entities").fetchall()
        con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
        duckdb_writer.rewrite_tables(con, ["entities"], "incremental (entities written whole again)")
        assert con.execute("SELECT i FROM entities").fetchall() == order and len(order) == 3000
        assert con.execute("SELECT value FROM meta").fetchall() == [('"incremental (entities written whole again)"',)]
    finally:
        con.close()


def test_tables_written_whole_in_a_patch_equal_a_full_rebuild_spare_or_copy(tmp_path, monkeypatch):
    """A patch writes the tables that many replaced rows wore (DuckDB's checkpoint writes every row
    appended since a row group was written, so each publish took longer than the last) whole again
    after its checkpoint (every table here, whatever it holds), in a transaction that also says so
    in the file's meta."""
    monkeypatch.setattr(duckdb_writer, "WORN_MIN_ROWS", 0)
    monkeypatch.setattr(duckdb_writer, "WORN_LOT", 0.0)  # every tail is worn, even none
    before, after = _inputs(), _edit(_inputs())
    path, ref = tmp_path / "index.duckdb", tmp_path / "ref.duckdb"
    _publish(path, before)
    bases = []
    for inp in (after, before, after):
        res = _publish(path, inp, max_fraction=1.0)
        assert res.mode == "delta" and res.reason == f"incremental ({', '.join(TABLES)} written whole again)", (
            res.reason
        )
        assert read_meta(path)["build_reason"] == res.reason == res.meta["build_reason"]
        bases.append("spare" if "spare" in res.phases else "copy")
        _equals_a_full_rebuild(path, inp, ref)
    assert bases == ["copy", "spare", "spare"]
    # a tail below the threshold leaves the tables as they are
    monkeypatch.setattr(duckdb_writer, "WORN_MIN_ROWS", 10**9)
    res = _publish(path, before, max_fraction=1.0)
    assert res.mode == "delta" and res.reason == "incremental", res.reason
    monkeypatch.setattr(duckdb_writer, "WORN_MIN_ROWS", 0)
    # a file about to be compacted is not rewritten first (the copy writes every table afresh)
    drop_spare(path)
    res = _publish(path, after, max_fraction=1.0, compact_above=0.0, compact_min_blocks=0)
    assert res.compacted and "written whole" not in res.reason, res.reason
    _equals_a_full_rebuild(path, after, ref)


def test_a_hub_record_keeps_its_first_source_ids_and_the_documents_that_hold_them(monkeypatch):
    """The graph keeps every chunk an entity comes from; its index record the first SOURCE_IDS_KEPT
    (a hub's thousands were rewritten by every edit that touched it), and of its documents those
    holding them: a chunk several documents hold names only those the entity lists."""
    from graphrag_pipeline.index import records

    monkeypatch.setattr(records, "SOURCE_IDS_KEPT", 2)
    entities = pl.DataFrame(
        {
            "key": ["hub", "small", "lost"],
            "description": ["h", "s", "l"],
            "source_ids": [["c1", "c2", "c3", "c4"], ["c3"], ["x1", "x2", "x3"]],
            "doc_ids": [["d1", "d2", "d3"], ["d2"], ["d5", "d6", "d7"]],
        }
    )
    chunks = pl.DataFrame(
        {"chunk_id": ["c1", "c1", "c1", "c2", "c3", "c4"], "doc_id": ["d3", "d1", "d9", "d3", "d2", "d3"]}
    )
    got = records.kept_sources(entities, chunks)
    assert got.columns == entities.columns and got["key"].to_list() == ["hub", "small", "lost"]
    assert got.row(0, named=True) == {
        "key": "hub",
        "description": "h",
        "source_ids": ["c1", "c2"],
        "doc_ids": ["d1", "d3"],
    }
    assert got.row(1, named=True) == entities.row(1, named=True)
    # chunks not found (no chunk rows): the first documents
    assert got.row(2, named=True)["doc_ids"] == ["d5", "d6"] and got.row(2, named=True)["source_ids"] == ["x1", "x2"]
    assert records.kept_sources(entities.slice(1, 1), chunks).equals(entities.slice(1, 1))
    # relations keep as many
    inp = _inputs()
    edges = inp["edges"].with_columns(pl.lit(["a", "b", "c"]).alias("source_ids"))
    rows = records.build_index_rows(inp["nodes"], edges, inp["communities"], [], inp["chunks"])
    assert rows.relations["source_ids"].list.len().max() == 2


def test_report_documents_rank_by_members_then_path_order_as_a_plain_count_does():
    """A report's documents, counted on arrays, are those a plain count gives: the documents most
    members name first, ties in path order, at most REPORT_MAX_DOCUMENTS; a member listed twice
    counts twice, a member without a node and a document without chunks not at all; a report
    without members has none. Random graphs, with many ties, large and small reports."""
    import random

    from graphrag_pipeline.index.records import REPORT_MAX_DOCUMENTS, _report_documents

    rng = random.Random(11)
    for trial in range(40):
        n_docs = rng.choice([3, 12, 60, 400])
        docs = [f"d{i:03d}" for i in range(n_docs)]
        chunked = [d for d in docs if rng.random() > 0.1]
        path = {d: f"corpus/{rng.randint(0, 10**6):07d}-{d}.txt" for d in chunked}
        keys = [f"k{i:02d}" for i in range(rng.randint(1, 40))]
        node_docs = {k: rng.sample(docs, rng.randint(0, min(n_docs, 30))) for k in keys}
        nodes = pl.DataFrame(
            {"key": keys, "doc_ids": [node_docs[k] for k in keys]},
            schema={"key": pl.Utf8, "doc_ids": pl.List(pl.Utf8)},
        )
        members = [
            [rng.choice([*keys, "no-such-node"]) for _ in range(rng.randint(0, 60 if trial % 4 == 0 else 6))]
            for _ in range(rng.randint(1, 12))
        ]
        out = pl.DataFrame({"entity_keys": members}, schema={"entity_keys": pl.List(pl.Utf8)}).with_row_index("_i")
        chunks = pl.DataFrame({"doc_id": chunked, "doc": [path[d] for d in chunked]})
        got = _report_documents(out, nodes, chunks, None).sort("_i")["documents"].to_list()
        order = {d: i for i, d in enumerate(sorted(chunked, key=lambda d: (path[d], d)))}
        expected = []
        for m in members:
            count: dict[str, int] = {}
            for k in m:
                for d in node_docs.get(k, []):
                    if d in path:
                        count[d] = count.get(d, 0) + 1
            ranked = sorted(count, key=lambda d: (-count[d], order[d]))[:REPORT_MAX_DOCUMENTS]
            expected.append([path[d] for d in ranked])
        assert got == expected, trial


def _relations(n: int, seed: int, *, sources: int = 400, words: int = 12, by_source: bool = True) -> pl.DataFrame:
    """n relations of distinct targets from `sources` source keys (in their order when `by_source`),
    with descriptions of up to `words` words."""
    rng = random.Random(seed)
    keys = [f"s{rng.randrange(sources):03d}" for _ in range(n)]
    return pl.DataFrame(
        {
            "source_key": sorted(keys) if by_source else keys,
            "target_key": [f"t{i}" for i in range(n)],
            "source": ["S"] * n,
            "target": ["T"] * n,
            "description": [("word " * rng.randrange(0, words)).strip() for _ in range(n)],
            "keywords": ["k"] * n,
            "weight": [float(rng.randrange(1, 9)) for _ in range(n)],
            "source_ids": [[f"c{j}" for j in range(rng.randrange(0, 4))] for _ in range(n)],
        }
    )


def test_relation_hashes_are_taken_per_edge_file_from_the_memo_and_equal_hashing_every_row(tmp_path):
    from graphrag_pipeline.index.records import COLUMNS, ROW_HASH_MEMO_SCHEME, RowHashMemo, row_hashes
    from graphrag_pipeline.storage.files import write_parquet
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store

    cols = COLUMNS["relations"]
    df = _relations(3000, 5)
    sizes = [700, 0, 450, 1, 848, 1001]  # end to end: 3,000 rows (one file empty, one of one row)
    segments = [(f"file{i}", n) for i, n in enumerate(sizes)]
    memo = RowHashMemo(segments=segments)
    assert memo.relation_hashes(df).equals(row_hashes(df, cols)) and memo.hashed == 3000 and memo.changed

    # the file of rows 1151-1998 rewritten (a new identity): only its rows are hashed
    edited = df.with_columns(
        pl.when(pl.int_range(pl.len()).is_between(1200, 1300))
        .then(pl.lit("rewritten"))
        .otherwise(pl.col("description"))
        .alias("description")
    )
    memo.segments = [*segments[:4], ("file4b", 848), segments[5]]
    got = memo.relation_hashes(edited)
    assert got.equals(row_hashes(edited, cols)) and not got.equals(row_hashes(df, cols))
    assert (
        memo.hashed == 848
        and memo.changed
        and set(memo.known) == {"file0", "file1", "file2", "file3", "file4b", "file5"}
    )

    # read back from the store: nothing hashed when the same files are read again
    store = Store(Paths(tmp_path))
    store.paths.graph_dir.mkdir(parents=True, exist_ok=True)
    store.write_row_hashes("search_index", memo)
    back = store.read_row_hashes("search_index")
    back.segments = memo.segments
    assert back.relation_hashes(edited).equals(got) and back.hashed == 0 and not back.changed
    store.write_row_hashes("elasticsearch_index", back)  # unchanged: not written
    assert not list(tmp_path.rglob("row-hashes.elasticsearch_index*"))

    # a known file whose rows do not add up is hashed again; segments that do not cover the table: all is
    back.segments = [("file0", 699), ("file0b", 1), *memo.segments[1:]]
    assert back.relation_hashes(edited).equals(got) and back.hashed == 700
    back.segments = memo.segments[:-1]
    assert back.relation_hashes(edited).equals(got) and back.hashed == 3000 and back.known == {} and back.changed
    store.write_row_hashes("search_index", back)  # an empty memo: its files are removed
    assert not list(tmp_path.rglob("row-hashes.*")) and store.read_row_hashes("search_index").known == {}

    # another hash scheme, or files that do not agree, are not used
    store.write_row_hashes("search_index", memo)
    hashes_file, segments_file = store._row_hash_files("search_index")
    segments_df = pl.read_parquet(segments_file)
    write_parquet(segments_df.with_columns(pl.lit("struct-polars-0.0|x").alias("scheme")), segments_file)
    assert store.read_row_hashes("search_index").known == {}
    write_parquet(segments_df.with_columns(pl.col("rows") + 1), segments_file)
    assert store.read_row_hashes("search_index").known == {}
    segments_file.write_bytes(b"not parquet")
    assert store.read_row_hashes("search_index").known == {}
    assert segments_df["scheme"].unique().to_list() == [ROW_HASH_MEMO_SCHEME]


def test_an_update_hashes_only_the_relations_of_the_edge_files_it_rewrote(home, corpus, instance, monkeypatch):
    """Through the CLI, with small edge slices: a one-document edit hashes the relations of the
    slices the merge rewrote and reads the reports it wrote, and every published relation's hash is
    that of its content."""
    from graphrag_pipeline.index.records import COLUMNS, row_hashes
    from graphrag_pipeline.storage import sliced_graph
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store
    from graphrag_pipeline_tests.conftest import cli

    monkeypatch.setattr(sliced_graph, "SLICE_EDGES", 48)
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    inst = instance()
    first = _metadata(inst, "search_index")
    assert first["relations_hashed"] == first["relations"] > 500
    store = Store(Paths(home))
    before = store.edge_segments("resolved_graph", {})
    reportable = store.read_communities().filter(pl.col("size") >= 2)["community_id"].to_list()
    assert first["reports_read"] == len(reportable) == first["reportable_communities"]
    files = {cid: store.report_identity(cid) for cid in reportable}
    doc = corpus / "curie_radioactivity.md"
    doc.write_text(
        doc.read_text(encoding="utf-8") + "\n\nIn 1921 Marie Curie toured the United States with Irene Curie.\n",
        encoding="utf-8",
    )
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    second = _metadata(inst, "search_index")
    assert second["mode"] == "delta" and second["relations"] >= first["relations"]
    # exactly the rows of the edge files that are new since the first build
    after = store.edge_segments("resolved_graph", {})
    rewritten = sum(n for identity, n in after if identity not in dict(before))
    assert len(after) > 10 and 0 < rewritten < second["relations"]
    assert second["relations_hashed"] == rewritten
    # and the reports read are those whose file is new (written by this build)
    reportable = store.read_communities().filter(pl.col("size") >= 2)["community_id"].to_list()
    written = [cid for cid in reportable if files.get(cid) != store.report_identity(cid)]
    assert 0 < second["reports_read"] == len(written) < len(reportable) / 2
    con = duckdb.connect(str(home / "index" / "search_index.duckdb"), read_only=True)
    try:
        stored = con.sql(f"SELECT {', '.join(COLUMNS['relations'])}, row_hash FROM relations").pl()
    finally:
        con.close()
    assert stored["row_hash"].equals(row_hashes(stored, COLUMNS["relations"]).alias("row_hash"))


def test_report_rows_are_read_only_from_report_files_written_since_and_equal_reading_every_report(tmp_path):
    from graphrag_pipeline.index.records import (
        REPORT_ROWS_MEMO_SCHEMA,
        collect_report_rows,
        collect_reports,
        report_base_rows,
    )
    from graphrag_pipeline.storage.files import write_parquet
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store

    inp = _inputs()
    store = Store(Paths(tmp_path))
    for folder in (store.paths.reports_dir, store.paths.graph_dir):
        folder.mkdir(parents=True, exist_ok=True)
    for report in inp["reports"].values():
        store.write_report(report)
    comms = inp["communities"]
    reads = []

    def read(cid):
        reads.append(cid)
        return store.read_report(cid)

    def expected(communities):
        reports, missing = collect_reports(communities, store.read_report)
        return report_base_rows(reports), missing

    memo = store.read_report_rows("search_index")  # none yet
    rows, missing = collect_report_rows(comms, store.report_identity, read, memo)
    want, _ = expected(comms)
    assert rows.equals(want) and missing == [] and memo.read == len(reads) == want.height > 20 and memo.changed
    store.write_report_rows("search_index", memo)

    # read back: nothing read again; one report rewritten, one removed, the communities in another order
    memo = store.read_report_rows("search_index")
    reads.clear()
    again, _ = collect_report_rows(comms, store.report_identity, read, memo)
    assert again.equals(want) and reads == [] and memo.read == 0 and not memo.changed
    changed = inp["reports"]["L0-012"]
    changed.title = "A new title"
    store.write_report(changed)
    (store.paths.reports_dir / "L1-024.json").unlink()
    shuffled = comms.sample(fraction=1.0, shuffle=True, seed=3)
    rows, missing = collect_report_rows(shuffled, store.report_identity, read, memo)
    want, want_missing = expected(shuffled)
    assert rows.equals(want) and missing == want_missing == ["L1-024"] and reads == ["L0-012"]
    assert "A new title" in rows["title"].to_list() and memo.changed and memo.read == 1
    assert memo.rows.height == want.height and set(memo.rows.columns) == set(REPORT_ROWS_MEMO_SCHEMA)

    # a memo of another scheme, or damaged, is not used
    store.write_report_rows("search_index", memo)
    path = store._report_rows_file("search_index")
    write_parquet(pl.read_parquet(path).with_columns(pl.lit("report-rows-0").alias("scheme")), path)
    assert store.read_report_rows("search_index").rows is None
    path.write_bytes(b"damaged")
    assert store.read_report_rows("search_index").rows is None
