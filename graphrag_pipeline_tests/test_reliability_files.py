"""Hostile file names, hand-made partition keys, damaged outputs and crash leftovers never wedge a
home, write outside it, or silently shrink its knowledge base."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import unicodedata
from pathlib import Path

import duckdb
import polars as pl
import pytest

from graphrag_pipeline.ingest.corpus_sync import plan_sync, stored_hash
from graphrag_pipeline.ingest.documents import corpus_keys, display_path, partition_key, read_document, scan_corpus
from graphrag_pipeline.storage.files import (
    DamagedFileError,
    TableMemo,
    clean_temp_files,
    copy_file,
    describe_os_error,
    file_sha256,
    parquet_problem,
    read_json,
    read_parquet,
    remembering,
    verify_parquet,
    write_json,
    write_parquet,
)
from graphrag_pipeline.storage.layout import Paths
from graphrag_pipeline.storage.store import InvalidPartitionKey, Store, check_partition_key, partition_key_problem
from graphrag_pipeline_tests.conftest import cli

_KEY_CHARS = re.compile(r"^[\w.\-~]+$")
NFC, NFD = unicodedata.normalize("NFC", "é.txt"), unicodedata.normalize("NFD", "é.txt")
LATIN1_NAME = os.fsdecode(b"caf\xe9.txt")  # "caf\udce9.txt": not UTF-8 on disk
OTHER_LATIN1_NAME = os.fsdecode(b"caf\xe8.txt")


def _previous_partition_key(relpath: str) -> str:
    """partition_key as it was before undecodable names and NFC/NFD twins were handled: every key
    it gave must stay the same (homes built with it keep their partitions)."""
    original = unicodedata.normalize("NFC", relpath).strip("/")
    relpath = unicodedata.normalize("NFC", relpath.replace("\\", "/")).strip("/")
    safe = re.compile(r"[^\w.\-]", re.UNICODE)
    parts = [safe.sub("_", p) for p in relpath.split("/")]
    key = "--".join(parts)
    lossy = (
        any(safe.search(p) for p in relpath.split("/"))
        or "--" in relpath
        or "-/" in relpath
        or "/-" in relpath
        or "\\" in original
        or key.startswith(".")
    )
    if lossy or len(key.encode("utf-8")) > 120:
        digest = hashlib.sha1(original.encode("utf-8")).hexdigest()[:8]
        head = key.encode("utf-8")[:110].decode("utf-8", errors="ignore")
        key = f"{head.lstrip('.')}~{digest}"
    return key


def _storage_safe(key: str) -> None:
    assert "/" not in key and "\\" not in key and not key.startswith("."), key
    assert _KEY_CHARS.match(key), key
    assert len(key.encode("utf-8")) <= 120, key
    assert partition_key_problem(key) is None


def _make(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.write_bytes(text.encode("utf-8"))
    except (OSError, UnicodeEncodeError) as exc:  # e.g. a file system that only takes UTF-8 names
        pytest.skip(f"this file system does not take the name {display_path(rel)!r}: {exc}")
    return path


def _hostile_corpus(root: Path) -> dict[str, str]:
    """Files whose names used to abort a build or lose a document; relpath -> a sentence of its own."""
    texts = {
        LATIN1_NAME: "Ada Lovelace translated the memoir of Luigi Menabrea about the Analytical Engine.",
        OTHER_LATIN1_NAME: "Charles Babbage designed the Difference Engine in London.",
        NFC: "Marie Curie discovered polonium with Pierre Curie in Paris.",
        NFD: "Alan Turing worked on the Bombe at Bletchley Park with Gordon Welchman.",
        os.fsdecode(b"d\xffir") + "/notes.md": "Isaac Newton presided over the Royal Society in London.",
    }
    for rel, text in texts.items():
        _make(root, rel, text)
    names = set(os.listdir(root))
    if NFC not in names or NFD not in names:
        pytest.skip("this file system does not keep NFC and NFD names apart")
    return texts


# ---------------------------------------------------------------------------------------------
# 1. file names
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "relpath",
    [
        "a/b.txt",
        "notes.md",
        "a b.txt",
        "a--b.txt",
        "a-/b.txt",
        "a\\b.txt",
        "x:y*z?.html",
        "郑和/下西洋.txt",
        "emoji 😀/note.md",
        "tab\tname.txt",
        "a" * 300 + ".txt",
        "长" * 80 + ".txt",
        NFC,
        "café/résumé.txt",
        ".env.txt",
        "ä/ö/ü.md",
        "Ελληνικά.txt",
        "ﬁle.txt",  # a compatibility ligature, NFC as it is
    ],
)
def test_keys_of_names_that_were_unambiguous_do_not_change(relpath):
    assert partition_key(relpath) == _previous_partition_key(relpath)
    assert corpus_keys([relpath]) == {relpath: _previous_partition_key(relpath)}


def test_an_undecodable_name_gets_a_hash_of_its_bytes():
    key = partition_key(LATIN1_NAME)
    assert key == "caf_.txt~" + hashlib.sha256(b"caf\xe9.txt").hexdigest()[:16]  # stable across processes
    _storage_safe(key)
    assert partition_key(OTHER_LATIN1_NAME) != key
    long = os.fsdecode(b"\xff" * 200 + b".txt")
    _storage_safe(partition_key(long))
    hidden_looking = os.fsdecode(b".\xff.txt")
    _storage_safe(partition_key(hidden_looking))
    # a folder that is not UTF-8 either, and a backslash next to it (a name character on Linux)
    keys = {partition_key(os.fsdecode(p)) for p in (b"d\xff/x.txt", b"d\xff\\x.txt", b"d\xfe/x.txt")}
    assert len(keys) == 3
    for k in keys:
        _storage_safe(k)
    assert display_path(LATIN1_NAME) == "caf\\xe9.txt"
    assert display_path(LATIN1_NAME).encode("utf-8")


def test_nfc_and_nfd_twins_get_distinct_keys_and_the_nfc_one_keeps_its_key():
    keys = corpus_keys([NFD, NFC, "a.txt"])
    assert keys[NFC] == "é.txt" == partition_key(NFC)
    assert keys[NFD] != keys[NFC] and keys[NFD].startswith("é.txt~")
    assert keys["a.txt"] == "a.txt"
    assert corpus_keys([NFC, NFD, "a.txt"]) == keys  # the order does not matter
    assert corpus_keys([NFC, NFD]) == {NFC: keys[NFC], NFD: keys[NFD]}
    _storage_safe(keys[NFD])
    # alone, an NFD name keeps the key it always had
    assert corpus_keys([NFD]) == {NFD: partition_key(NFD)}
    # twins whose readable part needs a hash, and three spellings of one name
    lossy = [unicodedata.normalize(f, "résumé 1.txt") for f in ("NFC", "NFD")]
    assert len(set(corpus_keys(lossy).values())) == 2
    ohm = ["\u1ec7.txt", "e\u0323\u0302.txt", "\u1eb9\u0302.txt"]  # ệ composed, decomposed, half-composed
    assert len(set(corpus_keys(ohm).values())) == 3 and corpus_keys(ohm)[ohm[0]] == "ệ.txt"


def test_scan_of_hostile_names_gives_distinct_keys_and_reads_every_document(tmp_path):
    corpus = tmp_path / "corpus"
    texts = _hostile_corpus(corpus)
    _make(corpus, "plain.txt", "A plain document about Gregor Mendel.")
    files = scan_corpus(corpus)
    assert len(files) == 6
    keys = [f.key for f in files]
    assert len(set(keys)) == 6
    assert "plain.txt" in keys and "é.txt" in keys
    for f in files:
        _storage_safe(f.key)
        f.relpath.encode("utf-8")  # valid text for metadata, logs, JSON, the index
        json.dumps({"relpath": f.relpath}, ensure_ascii=False).encode("utf-8")
        doc = read_document(f.path)
        assert doc.status == "ok", (f.relpath, doc.message)
    by_text = {read_document(f.path).text: f for f in files}
    for rel, text in texts.items():
        assert by_text[text].relpath == display_path(rel)
    assert {f.relpath for f in files} >= {"caf\\xe9.txt", "caf\\xe8.txt", "d\\xffir/notes.md", NFC, NFD}
    assert [f.key for f in scan_corpus(corpus)] == keys  # stable
    # messages about a file with such a name are valid text too
    (corpus / LATIN1_NAME).write_bytes(b"")
    message = read_document(corpus / LATIN1_NAME).message
    assert "caf\\xe9.txt" in message and message.encode("utf-8")


def test_write_json_never_fails_on_a_lone_surrogate(tmp_path):
    write_json({"relpath": LATIN1_NAME}, tmp_path / "x.json")
    assert read_json(tmp_path / "x.json") == {"relpath": LATIN1_NAME}


def test_build_of_a_corpus_with_hostile_names(home, corpus, instance):
    for f in list(corpus.iterdir()):
        if f.name not in ("darwin_and_wallace.txt", "curie_radioactivity.md"):
            f.unlink()
    texts = _hostile_corpus(corpus)
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    files = scan_corpus(corpus)
    assert len(files) == 2 + len(texts)
    inst = instance()
    assert sorted(inst.get_dynamic_partitions("documents")) == sorted(f.key for f in files)
    store = Store(Paths(home))
    for f in files:
        info = store.chunk_info(f.key)
        assert info["relpath"] == f.relpath and info["status"] == "ok" and info["chunks"] >= 1, f.relpath
        assert store.document_problems(f.key, "fast") == []
    con = duckdb.connect(str(home / "index" / "search_index.duckdb"), read_only=True)
    try:
        docs = {r[0] for r in con.execute("SELECT doc FROM chunks").fetchall()}
    finally:
        con.close()
    assert docs == {f.relpath for f in files}  # no document was lost
    plan = plan_sync(corpus, inst.get_dynamic_partitions("documents"), store, "fast")
    assert not plan.changed and not plan.errors


# ---------------------------------------------------------------------------------------------
# 2. partition keys never reach outside the home
# ---------------------------------------------------------------------------------------------

BAD_KEYS = [
    "/abs/path",
    "../../x",
    "../../../escaped",
    "a/b",
    "..",
    ".",
    "a\x00b",
    "x" * 300,
    "",
    ".hidden",
    "a\\b",
    "line\nbreak",
    "\udce9",
]


@pytest.mark.parametrize("key", BAD_KEYS, ids=range(len(BAD_KEYS)))
def test_an_invalid_key_is_refused_wherever_files_are_written_or_read(tmp_path, key):
    home = tmp_path / "deep" / "er" / "home"
    store = Store(Paths(home))
    before = _tree(tmp_path)
    with pytest.raises(InvalidPartitionKey) as err:
        check_partition_key(key)
    assert isinstance(err.value, ValueError)
    assert repr(key)[:60].strip("'") in str(err.value) and "invalid document partition key" in str(err.value)
    empty = pl.DataFrame({"a": [1]})
    for call in (
        lambda: store.write_chunks(key, empty, {}),
        lambda: store.write_subgraph(key, empty, empty, {}),
        lambda: store.chunk_info(key),
        lambda: store.subgraph_info(key),
        lambda: store.read_chunks(key),
    ):
        with pytest.raises(InvalidPartitionKey):
            call()
    assert _tree(tmp_path) == before  # nothing written anywhere
    problems = store.document_problems(key, "fast")
    assert len(problems) == 1 and "invalid document partition key" in problems[0]
    # readers of many documents pass over it: it cannot have files
    assert store.read_all_chunks([key]).height == 0 and store.scan_all_chunks([key]).height == 0
    ents, rels = store.read_subgraphs([key])
    assert ents.height == rels.height == 0
    assert store.signatures("chunks", [key], (".json",)) == {key: "invalid"}


def test_every_key_a_scan_makes_is_valid():
    names = [
        "a/b.txt",
        "a" * 300 + ".txt",
        "长" * 200 + ".txt",
        os.fsdecode(b"\xff" * 250),
        "😀" * 100 + ".md",
        NFD,
        ".x/y.txt",
        "tab\tname.txt",
        "line\nbreak.txt",
    ]
    for key in corpus_keys(names).values():
        assert check_partition_key(key) == key


def _tree(root: Path, skip: Path | None = None) -> set[str]:
    out = set()
    for folder, dirs, files in os.walk(root):
        if skip is not None and Path(folder) == skip:
            dirs[:] = []
            continue
        for name in dirs + files:
            out.add(os.path.relpath(os.path.join(folder, name), root))
    return out


def _failure_text(result) -> str:
    texts = []
    for event in result.all_events:
        if event.is_step_failure:
            data = event.step_failure_data
            texts.append(str(data.error.message if data.error else ""))
            if data.user_failure_data is not None:
                texts.append(str(data.user_failure_data.description))
    return "\n".join(texts)


def test_documents_job_refuses_invalid_keys_and_writes_nothing(home, corpus, instance, tmp_path):
    import dagster as dg

    (home / "dagster").mkdir(parents=True)  # the home's Dagster instance, as the CLI makes it
    shutil.copyfile(Path(__file__).resolve().parents[1] / "dagster.yaml", home / "dagster" / "dagster.yaml")
    inst = instance()
    abs_key = str(tmp_path / "abs" / "evil")
    keys = [abs_key, "/abs/path", "../../x", "../../../escaped", "a/b", "..", ".", "x" * 300]
    inst.add_dynamic_partitions("documents", keys)
    from graphrag_pipeline.definitions import defs
    from graphrag_pipeline.ingest.corpus_sync import range_tags

    abs_existed = Path("/abs").exists()
    outside = _tree(tmp_path, skip=home)
    inside = _tree(home / "tables") if (home / "tables").exists() else set()
    job = defs.resolve_job_def("documents_job")
    for key in keys:
        result = job.execute_in_process(instance=inst, tags=range_tags([key]), raise_on_error=False)
        assert not result.success, key
        text = _failure_text(result)
        assert "not valid document keys" in text and repr(key)[:60] in text, (key, text)
        assert not [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    # doc_subgraph alone refuses too (it has a retry policy: the refusal skips it)
    result = job.execute_in_process(
        instance=inst, tags=range_tags(["../../x"]), raise_on_error=False, asset_selection=[dg.AssetKey("doc_subgraph")]
    )
    assert not result.success and "'../../x'" in _failure_text(result)
    assert not [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    assert _tree(tmp_path, skip=home) == outside
    assert (_tree(home / "tables") if (home / "tables").exists() else set()) == inside
    assert Path("/abs").exists() == abs_existed
    # a range holding an invalid key among good ones is refused as a whole, before any write
    inst.add_dynamic_partitions("documents", ["darwin_and_wallace.txt"])
    result = job.execute_in_process(
        instance=inst, tags=range_tags([abs_key, "darwin_and_wallace.txt"]), raise_on_error=False
    )
    assert not result.success
    assert not (home / "tables" / "chunks" / "darwin_and_wallace.txt.json").exists()


# ---------------------------------------------------------------------------------------------
# 3. damaged files are named, detected, and repaired
# ---------------------------------------------------------------------------------------------


def _parquet(path: Path, rows: int = 2000) -> Path:
    pl.DataFrame({"a": list(range(rows)), "b": [f"text {i}" for i in range(rows)]}).write_parquet(path)
    return path


def test_read_json_names_the_file_and_the_line(tmp_path):
    path = tmp_path / "info.json"
    path.write_text('{\n "a": 1,\n "b": oops\n}', encoding="utf-8")
    with pytest.raises(DamagedFileError) as err:
        read_json(path)
    assert str(path) in str(err.value) and "is not valid JSON (line 3" in str(err.value)
    assert isinstance(err.value, ValueError) and isinstance(err.value, OSError) and err.value.path == path
    path.write_bytes(b"")
    with pytest.raises(DamagedFileError, match="empty"):
        read_json(path)
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(DamagedFileError, match="not UTF-8"):
        read_json(path)
    assert read_json(tmp_path / "missing.json", {"d": 1}) == {"d": 1}


def test_read_parquet_and_verify_parquet_name_a_truncated_file(tmp_path):
    good = _parquet(tmp_path / "good.parquet")
    verify_parquet(good)
    data = good.read_bytes()
    for size in (0, 5, len(data) // 2, len(data) - 3):
        bad = tmp_path / f"cut{size}.parquet"
        bad.write_bytes(data[:size])
        for read in (verify_parquet, read_parquet):
            with pytest.raises(DamagedFileError) as err:
                read(bad)
            assert str(bad) in str(err.value) and "is not a readable Parquet file (truncated?" in str(err.value)
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"PAR1" + b"\x00" * 100 + (50).to_bytes(4, "little") + b"PAR1")
    with pytest.raises(DamagedFileError, match="not a readable Parquet file"):
        verify_parquet(garbage)
    with pytest.raises(FileNotFoundError):
        verify_parquet(tmp_path / "missing.parquet")
    assert read_parquet(tmp_path / "missing.parquet").shape == (0, 0)
    # footer=False reads the ends only: a footer whose bytes cannot be decoded passes, as the markers
    # and the footer's length are whole (the flag was shadowed by the length, so every footer was decoded)
    verify_parquet(garbage, footer=False)
    with pytest.raises(DamagedFileError, match="its footer cannot be decoded"):
        verify_parquet(garbage, footer=True)
    with pytest.raises(DamagedFileError, match="truncated"):
        verify_parquet(tmp_path / f"cut{len(data) - 3}.parquet", footer=False)


def test_a_checksum_catches_a_byte_changed_in_the_middle(tmp_path):
    path = tmp_path / "t.parquet"
    digest = write_parquet(pl.DataFrame({"a": list(range(2000))}), path, checksum=True)
    assert digest == file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert write_parquet(pl.DataFrame({"a": [1]}), tmp_path / "u.parquet") is None
    assert parquet_problem(path, digest) is None and parquet_problem(path) is None
    _flip_middle_byte(path)
    verify_parquet(path)  # the footer is whole: only the checksum sees it
    assert "does not match the checksum" in parquet_problem(path, digest) and str(path) in parquet_problem(path, digest)
    assert parquet_problem(tmp_path / "nope.parquet") == f"{tmp_path / 'nope.parquet'} is missing"


def _flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garble(path: Path) -> None:
    path.write_text(path.read_text(encoding="utf-8")[:-10] + "\n#!", encoding="utf-8")


def _stored_document(store: Store, key: str, method: str = "fast", content: str = "h1") -> None:
    chunks = pl.DataFrame(
        {"chunk_id": ["c1"], "doc_id": [key], "doc": [key], "position": [0], "text": ["Ada Lovelace."], "tokens": [3]}
    )
    store.write_chunks(key, chunks, {"relpath": key, "content_hash": content, "status": "ok", "chunks": 1})
    ents = pl.DataFrame(
        {"key": [f"ENTITY {i}" for i in range(3000)], "n": list(range(3000))}
    )  # data outweighs the footer
    rels = pl.DataFrame({"source": ["A"] * 50, "target": ["B"] * 50, "n": list(range(50))})
    store.write_subgraph(key, ents, rels, {"content_hash": content, "method": method})


def test_document_problems_name_each_damaged_file(tmp_path):
    store = Store(Paths(tmp_path / "home"))
    for key in ("ok.txt", "cut.txt", "garbled.txt", "flipped.txt", "gone.txt", "method.txt", "mixed.txt", "bare.txt"):
        _stored_document(store, key)
    info = store.chunk_info("ok.txt")
    chunk_file = store.paths.doc_dir("chunks") / "ok.txt.parquet"
    assert info["checksums"] == {".parquet": file_sha256(chunk_file)}
    assert set(store.subgraph_info("ok.txt")["checksums"]) == {".entities.parquet", ".relations.parquet"}
    folder_c, folder_s = store.paths.doc_dir("chunks"), store.paths.doc_dir("doc_subgraph")
    _truncate(folder_c / "cut.txt.parquet")
    _garble(folder_s / "garbled.txt.json")
    _flip_middle_byte(folder_s / "flipped.txt.entities.parquet")
    (folder_s / "gone.txt.relations.parquet").unlink()
    _stored_document(store, "mixed.txt", content="h2")
    store.write_chunks("mixed.txt", store.read_chunks("mixed.txt"), {"content_hash": "h3"})
    # a document written before checksums were recorded is checked by its footers
    for folder in (folder_c, folder_s):
        info_file = folder / "bare.txt.json"
        write_json({k: v for k, v in read_json(info_file).items() if k != "checksums"}, info_file)

    assert store.document_problems("ok.txt", "fast") == [] and store.document_problems("bare.txt", "fast") == []
    expected = {
        "cut.txt": (folder_c / "cut.txt.parquet", "is not a readable Parquet file (truncated?"),
        "garbled.txt": (folder_s / "garbled.txt.json", "is not valid JSON (line"),
        "flipped.txt": (folder_s / "flipped.txt.entities.parquet", "does not match the checksum"),
        "gone.txt": (folder_s / "gone.txt.relations.parquet", "is missing"),
        "mixed.txt": (folder_s / "mixed.txt.json", "was extracted from content h2"),
    }
    for key, (file, words) in expected.items():
        problems = store.document_problems(key, "fast")
        assert len(problems) == 1 and str(file) in problems[0] and words in problems[0], (key, problems)
        assert stored_hash(store, key, "fast") is None
    assert store.document_problems("method.txt", "light") == [
        f"{folder_s / 'method.txt.json'} was extracted with method 'fast', not 'light'"
    ]
    assert stored_hash(store, "ok.txt", "fast") == "h1" and stored_hash(store, "method.txt", "light") is None
    # readers name the damaged file
    with pytest.raises(DamagedFileError, match=re.escape(str(folder_c / "cut.txt.parquet"))):
        store.read_chunks("cut.txt")
    with pytest.raises(DamagedFileError, match=re.escape(str(folder_c / "cut.txt.parquet"))):
        store.read_all_chunks(["ok.txt", "cut.txt"])
    with pytest.raises(DamagedFileError, match=re.escape(str(folder_c / "cut.txt.parquet"))):
        store.scan_all_chunks(["ok.txt", "cut.txt"])
    with pytest.raises(DamagedFileError, match=re.escape(str(folder_s / "garbled.txt.json"))):
        store.subgraph_info("garbled.txt")


def test_damaged_documents_are_found_by_the_plan_and_repaired_by_a_build(home, corpus, instance):
    for f in list(corpus.iterdir()):
        if f.name not in ("darwin_and_wallace.txt", "curie_radioactivity.md", "turing_and_bletchley_park.txt"):
            f.unlink()
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    store = Store(Paths(home))
    keys = sorted(instance().get_dynamic_partitions("documents"))
    assert len(keys) == 3 and all(store.document_problems(k, "fast") == [] for k in keys)
    chunks_dir, sub_dir = home / "tables" / "chunks", home / "tables" / "doc_subgraph"
    _truncate(chunks_dir / "darwin_and_wallace.txt.parquet")
    _garble(sub_dir / "curie_radioactivity.md.json")
    _flip_middle_byte(sub_dir / "turing_and_bletchley_park.txt.relations.parquet")
    for key, name in (
        ("darwin_and_wallace.txt", "darwin_and_wallace.txt.parquet"),
        ("curie_radioactivity.md", "curie_radioactivity.md.json"),
        ("turing_and_bletchley_park.txt", "turing_and_bletchley_park.txt.relations.parquet"),
    ):
        problems = store.document_problems(key, "fast")
        assert problems and name in problems[0], problems
    # the build's plan (with its cache of what it saw last time) finds all three stale
    cached = read_json(home / "state" / "corpus-files.json")
    plan = plan_sync(corpus, keys, store, "fast", cache=cached["files"])
    assert sorted(plan.stale) == keys
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    assert all(store.document_problems(k, "fast") == [] for k in keys)
    plan = plan_sync(corpus, keys, store, "fast")
    assert not plan.changed


# ---------------------------------------------------------------------------------------------
# 4. temporary files of killed writers, and OS errors people can read
# ---------------------------------------------------------------------------------------------


def test_clean_temp_files_removes_only_leftovers_of_atomic_writes(tmp_path):
    home = tmp_path / "home"
    target = home / "tables" / "chunks" / "a.txt.parquet"
    # a writer killed (like kill -9: no cleanup) in the middle of an atomic write
    script = (
        "import os, sys; from pathlib import Path; from graphrag_pipeline.storage.files import atomic_path\n"
        "with atomic_path(Path(sys.argv[1]), '.parquet') as tmp:\n"
        "    tmp.write_bytes(b'half')\n"
        "    os._exit(9)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(target)], cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 9
    left = [p for p in target.parent.iterdir()]
    assert len(left) == 1 and left[0].name.startswith(".a.txt.parquet.") and left[0].name.endswith(".parquet.tmp")
    leftovers = [
        home / "graph" / ".knowledge_graph.nodes.parquet.ab_cd123.parquet.tmp",
        home / "state" / ".corpus-files.json.x1y2z3w4.json.tmp",
        home / "index" / ".search_index.duckdb.k9k9k9k9.duckdb.tmp",
        home / "index" / ".search_index.duckdb.k9k9k9k9.duckdb.tmp.wal",
        home / "reports" / ".L0-1.json.abcdefgh.tmp",  # atomic_path without a suffix
    ]
    keep = [
        home / "tables" / "chunks" / "b.txt.parquet",
        home / "graph" / "knowledge_graph.nodes.parquet",
        home / "state" / ".hidden",
        home / "state" / "notes.tmp",
        home / "state" / ".a.tmp",
        home / "state" / ".x.parquet.abc.tmp",
        home / "state" / "keep.json.abcdefgh.json.tmp",
        home / "dagster" / "dagster.yaml",
    ]
    for p in leftovers + keep:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    removed = clean_temp_files(home)
    assert sorted(removed) == sorted(leftovers + left)
    assert all(not p.exists() for p in removed) and all(p.exists() for p in keep)
    assert clean_temp_files(home) == [] and clean_temp_files(tmp_path / "no-home") == []


def test_describe_os_error():
    enospc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert describe_os_error(enospc, "/h/x.parquet") == "disk full (no space left on device) while writing /h/x.parquet"
    assert describe_os_error(sqlite3.OperationalError("database or disk is full"), "/h/cache.sqlite").startswith(
        "disk full (no space left on device) while writing /h/cache.sqlite"
    )
    wrapped = RuntimeError("the write failed")
    wrapped.__cause__ = enospc
    assert describe_os_error(wrapped, "/h/y").startswith("disk full")
    assert describe_os_error(Exception("parquet: No space left on device (os error 28)"), "/h/z").startswith(
        "disk full"
    )
    assert (
        describe_os_error(PermissionError(errno.EACCES, "Permission denied"), "/h/a")
        == "permission denied while writing /h/a"
    )
    rofs = describe_os_error(OSError(errno.EROFS, os.strerror(errno.EROFS)), "/h/b")
    assert rofs.startswith("permission denied") and "read-only file system" in rofs and "/h/b" in rofs
    other = describe_os_error(FileNotFoundError(errno.ENOENT, "No such file or directory", "/h/c"))
    assert "No such file or directory" in other and "/h/c" in other
    damaged = DamagedFileError("/h/d.json is not valid JSON (line 3, column 1: Expecting value)", "/h/d.json")
    assert describe_os_error(damaged, "/h") == str(damaged)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_describe_os_error_of_a_real_full_disk():
    with pytest.raises(OSError) as err:
        with open("/dev/full", "wb") as fh:
            fh.write(b"x" * 100)
            fh.flush()
    assert describe_os_error(err.value, "/dev/full") == "disk full (no space left on device) while writing /dev/full"


def test_the_plan_after_a_build_reads_no_stored_outputs_again(home, corpus, instance, monkeypatch):
    """The build brings the plan cache up to date for the documents it processed: the next plan
    stats their outputs but reads none of them (on a big corpus that read took seconds per build)."""
    from graphrag_pipeline.ingest import corpus_sync

    for f in list(corpus.iterdir()):
        if f.name not in ("darwin_and_wallace.txt", "curie_radioactivity.md"):
            f.unlink()
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    store = Store(Paths(home))
    keys = sorted(instance().get_dynamic_partitions("documents"))
    reads = []
    real = corpus_sync.stored_hash
    monkeypatch.setattr(corpus_sync, "stored_hash", lambda *a: reads.append(a[1]) or real(*a))
    cached = read_json(home / "state" / "corpus-files.json")
    plan = plan_sync(corpus, keys, store, "fast", cache=cached["files"])
    assert not plan.changed and reads == []
    # a document edited and built: again nothing to read the time after; the cache is written once
    # (after the runs), and not at all by a build with nothing to do
    from graphrag_pipeline.storage import files

    writes = []
    real_write = files.write_json
    monkeypatch.setattr(
        files, "write_json", lambda data, target, **kw: writes.append(target.name) or real_write(data, target, **kw)
    )
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0 and "everything is up to date" in out and "corpus-files.json" not in writes, out
    edited = corpus / "darwin_and_wallace.txt"
    edited.write_text(edited.read_text(encoding="utf-8") + "\n\nA new closing paragraph.", encoding="utf-8")
    monkeypatch.setattr(corpus_sync, "stored_hash", real)
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    assert writes.count("corpus-files.json") == 1
    monkeypatch.setattr(corpus_sync, "stored_hash", lambda *a: reads.append(a[1]) or real(*a))
    cached = read_json(home / "state" / "corpus-files.json")
    plan = plan_sync(corpus, keys, store, "fast", cache=cached["files"])
    assert not plan.changed and reads == []
    # and damage after the build is still found (the output's signature changed)
    _truncate(home / "tables" / "chunks" / "curie_radioactivity.md.parquet")
    plan = plan_sync(corpus, keys, store, "fast", cache=cached["files"])
    assert plan.stale == ["curie_radioactivity.md"] and reads == ["curie_radioactivity.md"]


def test_remove_orphans_deletes_only_the_files_of_documents_no_longer_partitions(tmp_path):
    store = Store(Paths(tmp_path).ensure())
    files = {
        "chunks": ["a.txt.parquet", "a.txt.json", "gone.md.parquet", "gone.md.json", "x.json.parquet", ".hidden"],
        "doc_subgraph": [
            "a.txt.entities.parquet",
            "a.txt.relations.parquet",
            "a.txt.json",
            "gone.md.entities.parquet",
            "gone.md.relations.parquet",
            "gone.md.json",
            "x.json.json",
        ],
    }
    for asset, names in files.items():
        folder = store.paths.doc_dir(asset)
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            (folder / name).write_text("x")
    assert store.remove_orphans({"a.txt", "x.json"}) == 5
    left = {asset: sorted(os.listdir(store.paths.doc_dir(asset))) for asset in files}
    assert left == {
        "chunks": [".hidden", "a.txt.json", "a.txt.parquet", "x.json.parquet"],
        "doc_subgraph": ["a.txt.entities.parquet", "a.txt.json", "a.txt.relations.parquet", "x.json.json"],
    }
    assert store.remove_orphans({"a.txt", "x.json"}) == 0


def test_remove_orphans_of_a_folder_without_documents_yet(tmp_path):
    """A run that reaches the graph while the documents' runs have written nothing yet but a file
    in flight (a hidden temporary): no names to match is no orphan, not a failed knowledge_graph."""
    store = Store(Paths(tmp_path).ensure())
    for asset in ("chunks", "doc_subgraph"):
        store.paths.doc_dir(asset).mkdir(parents=True, exist_ok=True)
    (store.paths.doc_dir("chunks") / ".a.txt.parquet.tmp").write_text("x")
    assert store.remove_orphans({"a.txt"}) == 0
    assert store.remove_orphans(set()) == 0
    assert os.listdir(store.paths.doc_dir("chunks")) == [".a.txt.parquet.tmp"]


def test_table_memo_serves_only_the_file_it_remembers(tmp_path):
    """The in-process table memo (the CLI's build turns it on) returns the table a stage wrote to
    a file, and to a hard link of it; never a table for a file that was replaced or altered since."""
    first = pl.DataFrame({"key": ["a", "b", "c"], "weight": [1.0, 2.0, 3.0], "ids": [["x"], [], ["y", "z"]]})
    path = tmp_path / "graph.edges.parquet"
    with remembering() as memo:
        write_parquet(first, path, remember=True)
        assert read_parquet(path, remember=True) is first  # not decoded again
        assert read_parquet(path, columns=["ids", "key"], remember=True).columns == ["ids", "key"]
        assert read_parquet(path, columns=["ids", "key"], remember=True).equals(
            pl.read_parquet(path, columns=["ids", "key"])
        )
        link = tmp_path / "resolved.edges.parquet"
        copy_file(path, link)
        assert read_parquet(link, remember=True) is first  # a link shares the file's identity
        # a rewrite is a new file: the new table is read
        second = first.with_columns(pl.col("weight") * 10)
        write_parquet(second, path)
        assert read_parquet(path, remember=True).equals(second)
        # altered in place, with its size and modification time put back: not served from memory
        write_parquet(first, path, remember=True)
        before = os.stat(path)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert os.stat(path).st_size == before.st_size
        try:
            assert read_parquet(path, remember=True) is not first
        except DamagedFileError:
            pass  # the flipped byte broke the file: named as damaged, as without the memo
        assert memo.hits >= 3
    # off outside the build: every read decodes the file
    write_parquet(first, path, remember=True)
    assert read_parquet(path, remember=True) is not read_parquet(path, remember=True)


def test_graph_read_from_memory_equals_the_graph_read_from_disk(tmp_path):
    store = Store(Paths(tmp_path / "home"))
    nodes = pl.DataFrame(
        {"key": ["a", "b", "c", "d"], "name": ["A", "B", "C", "D"], "type": ["T"] * 4, "degree": [2, 2, 1, 1]}
    )
    edges = pl.DataFrame({"source_key": ["a", "a", "b"], "target_key": ["b", "c", "d"], "weight": [1.0, 2.0, 3.0]})
    from graphrag_pipeline.graph.tables import EDGE_SCHEMA, NODE_SCHEMA

    nodes = pl.DataFrame({c: nodes[c] if c in nodes.columns else None for c in NODE_SCHEMA}).cast(NODE_SCHEMA)
    edges = pl.DataFrame({c: edges[c] if c in edges.columns else None for c in EDGE_SCHEMA}).cast(EDGE_SCHEMA)
    store.write_graph("knowledge_graph", nodes, edges)
    on_disk = store.read_graph_among("knowledge_graph", ["a", "b", "d"]), store.read_graph("knowledge_graph", ["key"])
    with remembering() as memo:
        store.write_graph("knowledge_graph", nodes, edges)
        in_memory = (
            store.read_graph_among("knowledge_graph", ["a", "b", "d"]),
            store.read_graph("knowledge_graph", ["key"]),
        )
        assert memo.hits == 4, memo.hits
    for disk, memory in zip(on_disk, in_memory):
        for a, b in zip(disk, memory):
            assert a.equals(b)
    assert in_memory[0][1]["target_key"].to_list() == ["b", "d"]


def test_a_graph_missing_a_slice_is_named_and_a_graph_from_before_slicing_is_read(tmp_path):
    """A graph is a manifest and its slices (sliced_graph): a slice gone is named by the reader and
    by the build's check; a home written before slicing (one file per table) is read as it is, and
    copied on in slices."""
    from graphrag_pipeline.graph.tables import EDGE_SCHEMA, NODE_SCHEMA
    from graphrag_pipeline.storage.verify import downstream_problems

    paths = Paths(tmp_path / "home")
    store = Store(paths)
    nodes = pl.DataFrame(
        {"key": ["a", "b"], "name": ["A", "B"], "type": ["T", "T"], "degree": [1, 1], "pagerank": [0.5, 0.5]}
    )
    edges = pl.DataFrame({"source_key": ["a"], "target_key": ["b"], "source": ["A"], "target": ["B"], "weight": [1.0]})
    nodes = pl.DataFrame({c: nodes[c] if c in nodes.columns else None for c in NODE_SCHEMA}).cast(NODE_SCHEMA)
    edges = pl.DataFrame({c: edges[c] if c in edges.columns else None for c in EDGE_SCHEMA}).cast(EDGE_SCHEMA)
    # a home from before slicing: one file per table
    nodes.write_parquet(paths.graph_dir / "knowledge_graph.nodes.parquet")
    edges.write_parquet(paths.graph_dir / "knowledge_graph.edges.parquet")
    got = store.read_graph("knowledge_graph")
    assert got[0].equals(nodes) and got[1].equals(edges)
    store.copy_graph("knowledge_graph", "resolved_graph")
    assert (paths.graph_dir / "resolved_graph.manifest.json").exists()
    got = store.read_graph("resolved_graph")
    assert got[0].equals(nodes) and got[1].equals(edges)
    store.write_graph("knowledge_graph", nodes, edges)  # written again: in slices, the old files gone
    assert not (paths.graph_dir / "knowledge_graph.nodes.parquet").exists()
    assert store.graph_edge_count("knowledge_graph") == 1
    listed = store.graph_files("knowledge_graph")
    assert listed[0].name == "knowledge_graph.manifest.json" and len(listed) == 4
    edge_slice = next(f for f in listed if ".edges-" in f.name)
    edge_slice.unlink()
    with pytest.raises(FileNotFoundError, match=re.escape(str(edge_slice))):
        store.read_graph("knowledge_graph")
    (paths.graph_dir / "communities.parquet").write_bytes(b"")
    problems = downstream_problems(paths, store, [])
    assert f"{edge_slice} is missing" in problems


def test_table_memo_is_bounded_in_tables_and_bytes():
    small = pl.DataFrame({"k": list(range(100))})
    big = pl.DataFrame({"k": list(range(100_000))})
    memo = TableMemo(max_tables=2, max_bytes=4 * big.estimated_size() // 3)
    memo.enabled = 1
    memo.put(("a",), big)
    memo.put(("b",), big)  # both do not fit: the older goes
    assert list(memo._tables) == [("b",)]
    memo.put(("c",), small)
    memo.put(("d",), small)  # at most two tables
    assert list(memo._tables) == [("c",), ("d",)]
    memo.put(("e",), pl.concat([big, big]))  # larger than the budget: not kept
    assert ("e",) not in memo._tables
    memo.enabled = 0
    memo.put(("f",), small)  # off: nothing kept
    assert ("f",) not in memo._tables


def test_prefetched_tables_are_served_from_the_memo_and_a_reader_waits_for_a_prefetch_under_way(tmp_path, monkeypatch):
    """A build decodes the files an update reads whole in background threads (TableMemo.prefetch);
    a stage reading one of them gets the prefetched table (no second decoding), also when it asks
    - by another name of the same file - while the prefetch is still reading it; a damaged file is
    left to its reader, which says what is wrong; with the memo off nothing is read ahead."""
    import threading

    from graphrag_pipeline.storage.files import TABLES, DamagedFileError

    a, b, bad = tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "bad.parquet"
    write_parquet(pl.DataFrame({"k": list(range(1000))}), a)
    write_parquet(pl.DataFrame({"k": ["x", "y"]}), b)
    bad.write_bytes(b"PAR1 not a parquet file at all PAR1")
    link = tmp_path / "link-to-a.parquet"
    os.link(a, link)
    decoded: list[str] = []
    release = threading.Event()
    real_read = pl.read_parquet

    def slow_read(source, *args, **kwargs):
        decoded.append(Path(source).name)
        if Path(source).name == "a.parquet" and threading.current_thread().name == "table-prefetch":
            release.wait(10)  # the prefetch is still reading `a` when the stage asks for it
        return real_read(source, *args, **kwargs)

    monkeypatch.setattr(pl, "read_parquet", slow_read)
    TABLES.prefetch([a])  # memo off: nothing happens
    assert decoded == [] and not TABLES._prefetchers
    with remembering() as memo:
        memo.prefetch([a, bad, b])
        got: list[pl.DataFrame] = []
        reader = threading.Thread(target=lambda: got.append(read_parquet(link, remember=True)))
        reader.start()
        reader.join(0.3)
        assert reader.is_alive(), "the reader waits for the prefetch of the same file"
        release.set()
        reader.join(10)
        assert got and got[0]["k"].to_list() == list(range(1000))
        assert read_parquet(b, remember=True)["k"].to_list() == ["x", "y"]
        with pytest.raises(DamagedFileError, match="bad.parquet"):
            read_parquet(bad, remember=True)
        assert decoded.count("a.parquet") == 1 and decoded.count("b.parquet") == 1, decoded
        assert "link-to-a.parquet" not in decoded
        assert memo.hits == 2
    assert not TABLES._prefetchers and not TABLES._tables  # the build's end waits for it and empties the memo


def test_a_prefetch_that_dies_or_finds_the_memo_full_leaves_no_reader_waiting_and_evicts_nothing(tmp_path, monkeypatch):
    """A panic while decoding one file (polars raises a BaseException) leaves no reader of it
    waiting (the reader decodes it itself) and the files after it are still prefetched; a prefetch
    never evicts what the memo holds: it stops at the first table that does not fit."""
    from graphrag_pipeline.storage.files import TABLES

    files = []
    for i in range(4):
        files.append(tmp_path / f"t{i}.parquet")
        write_parquet(pl.DataFrame({"k": list(range(1000 * (i + 1)))}), files[-1])
    real_read = pl.read_parquet

    class Panic(BaseException):
        pass

    def panicking(source, *args, **kwargs):
        if Path(source).name == "t1.parquet":
            raise Panic("decoder panicked")
        return real_read(source, *args, **kwargs)

    monkeypatch.setattr(pl, "read_parquet", panicking)
    with remembering() as memo:
        memo.prefetch(files, workers=1)
        for t in memo._prefetchers:
            t.join(10)
        assert not memo._loading  # nobody waits for anything
        assert read_parquet(files[3], remember=True).height == 4000 and memo.hits == 1  # prefetched after the panic
        with pytest.raises(Panic):
            read_parquet(files[1], remember=True)  # its reader decodes it and meets the problem itself
    monkeypatch.setattr(pl, "read_parquet", real_read)
    kept = pl.DataFrame({"k": list(range(100))})
    saved = TABLES.max_tables, TABLES.max_bytes
    try:
        with remembering() as memo:
            TABLES.max_tables, TABLES.max_bytes = 3, 10**9
            memo.put(("kept",), kept)
            memo.prefetch(files, workers=1)
            for t in memo._prefetchers:
                t.join(10)
            assert ("kept",) in memo._tables and len(memo._tables) == 3  # two prefetched, then full
            assert read_parquet(files[2], remember=True).height == 3000  # left to its reader
    finally:
        TABLES.max_tables, TABLES.max_bytes = saved


def test_the_orphan_sweep_lists_the_documents_files_again_only_when_the_documents_changed(tmp_path, monkeypatch):
    import time

    from graphrag_pipeline.storage import store as store_module

    store = Store(Paths(tmp_path).ensure())
    folder = store.paths.doc_dir("chunks")
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("a.txt.parquet", "gone.md.parquet"):
        (folder / name).write_text("x")
    assert store.sweep_orphans({"a.txt"}) == 1
    (folder / "stray.md.parquet").write_text("x")  # written for no partition, by a racing run
    assert store.sweep_orphans({"a.txt"}) is None  # the same documents: nothing listed
    assert (folder / "stray.md.parquet").exists()
    assert store.sweep_orphans({"a.txt", "b.txt"}) == 1  # other documents: swept
    assert sorted(os.listdir(folder)) == ["a.txt.parquet"]
    (folder / "stray.md.parquet").write_text("x")
    assert store.sweep_orphans({"a.txt", "b.txt"}) is None
    now = time.time()
    monkeypatch.setattr(store_module.time, "time", lambda: now + store_module.ORPHAN_SWEEP_MAX_AGE + 1)
    assert store.sweep_orphans({"a.txt", "b.txt"}) == 1  # a day on: swept whatever the documents
    (folder / "stray.md.parquet").write_text("x")
    (store.paths.graph_dir / f"{store_module.ORPHAN_SWEEP_STATE}.json").write_text("{not json")
    assert store.sweep_orphans({"a.txt", "b.txt"}) == 1  # a damaged record: swept
    assert store.sweep_orphans({"a.txt", "b.txt"}) is None
    for damaged in ("[]", '{"documents": 5, "at": "soon"}'):
        (store.paths.graph_dir / f"{store_module.ORPHAN_SWEEP_STATE}.json").write_text(damaged)
        assert store.sweep_orphans({"a.txt", "b.txt"}) == 0
    monkeypatch.setattr(store_module.time, "time", lambda: now)  # the clock set back: swept
    assert store.sweep_orphans({"a.txt", "b.txt"}) == 0
    assert store.sweep_orphans({"a.txt", "b.txt"}) is None


def test_a_builds_check_reads_only_the_graph_tables_written_since_it_last_found_them_whole(tmp_path, monkeypatch):
    """downstream_problems decodes a graph table's footer again only when the table changed since an
    earlier check found it whole (VERIFIED_GRAPH_FILES); of the others it reads the ends. A table
    damaged since (in place, its size and modification time put back too), or written anew, is
    read whole; one damaged without its identity changing (blocks zeroed by a crash) fails at its ends."""
    from graphrag_pipeline.graph.tables import EDGE_SCHEMA, NODE_SCHEMA
    from graphrag_pipeline.storage import verify

    paths = Paths(tmp_path / "home")
    store = Store(paths)
    nodes = pl.DataFrame({"key": ["a", "b"], "name": ["A", "B"]})
    edges = pl.DataFrame({"source_key": ["a"], "target_key": ["b"], "weight": [1.0]})
    nodes = pl.DataFrame({c: nodes[c] if c in nodes.columns else None for c in NODE_SCHEMA}).cast(NODE_SCHEMA)
    edges = pl.DataFrame({c: edges[c] if c in edges.columns else None for c in EDGE_SCHEMA}).cast(EDGE_SCHEMA)
    store.write_graph("knowledge_graph", nodes, edges)
    store.copy_graph("knowledge_graph", "resolved_graph")
    pl.DataFrame({"community_id": ["c1"]}).write_parquet(paths.graph_dir / "communities.parquet")
    decoded: list[str] = []
    ends: list[str] = []
    real = verify.verify_parquet

    def counted(f, footer=True):
        (decoded if footer else ends).append(Path(f).name)
        return real(f, footer=footer)

    monkeypatch.setattr(verify, "verify_parquet", counted)
    record = paths.state_dir / verify.VERIFIED_GRAPH_FILES
    assert verify.downstream_problems(paths, store, []) == []
    tables = [f.name for f in verify._graph_files(paths) if f.suffix == ".parquet"]
    assert len(decoded) == 4 and set(decoded) <= set(tables) and ends == []  # the links: read once
    decoded.clear()
    assert verify.downstream_problems(paths, store, []) == []
    assert decoded == [] and len(ends) == 4
    edge_slice = next(f for f in store.graph_files("knowledge_graph") if ".edges-" in f.name)
    before = os.stat(edge_slice)
    data = bytearray(edge_slice.read_bytes())
    data[-12:-8] = b"\xff\xff\xff\x7f"  # the footer's length, same size
    edge_slice.write_bytes(bytes(data))
    os.utime(edge_slice, ns=(before.st_atime_ns, before.st_mtime_ns))  # only the status change time tells
    decoded.clear()
    problems = verify.downstream_problems(paths, store, [])
    assert decoded == [edge_slice.name] and any(str(edge_slice) in p and "footer" in p for p in problems)
    decoded.clear()
    assert verify.downstream_problems(paths, store, []) == problems  # not taken for whole: read again
    assert decoded == [edge_slice.name]
    store.write_graph("knowledge_graph", nodes, edges.with_columns(pl.lit(2.0).alias("weight")))
    store.copy_graph("knowledge_graph", "resolved_graph")  # written anew: read
    decoded.clear()
    assert verify.downstream_problems(paths, store, []) == []
    assert edge_slice.name not in decoded and any(".edges-" in name for name in decoded)
    # blocks zeroed after a crash, the record still matching the file: its ends fail
    new_slice = next(f for f in store.graph_files("knowledge_graph") if ".edges-" in f.name)
    new_slice.write_bytes(bytes(new_slice.stat().st_size))
    recorded = read_json(record)
    recorded[new_slice.name] = verify._identity(os.stat(new_slice))
    record.write_text(json.dumps(recorded))
    decoded.clear()
    problems = verify.downstream_problems(paths, store, [])
    assert new_slice.name not in decoded and any(str(new_slice) in p for p in problems)
    store.write_graph("knowledge_graph", nodes, edges)
    store.copy_graph("knowledge_graph", "resolved_graph")
    for damaged in ("[not a record", "[]", '{"x": 1}'):
        record.write_text(damaged)
        decoded.clear()
        assert verify.downstream_problems(paths, store, []) == []  # a damaged record: every table decoded
        assert len(decoded) == 4
