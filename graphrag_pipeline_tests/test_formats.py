"""PDF, DOCX, PPTX and XLSX documents: real files written by libraries independent of the readers
(fpdf2 for PDF, pandoc for DOCX and PPTX, xlsxwriter for XLSX), good and broken, read through ingest/formats.py; a PDF's
pages reach its chunks, the index and a query's sources."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pytest

from graphrag_pipeline.ingest.document_chunks import chunk_document
from graphrag_pipeline.ingest.documents import CorpusFile, read_document
from graphrag_pipeline.ingest.formats import PACKAGE_FLOOR, package_limit
from graphrag_pipeline.query.search import citations, cite
from graphrag_pipeline.storage.layout import Paths
from graphrag_pipeline.storage.store import Store
from graphrag_pipeline_tests.conftest import cli, cli_json

PAGE_TOPICS = [
    "Ada Lovelace wrote the first published algorithm for the Analytical Engine.",
    "Charles Babbage designed the Difference Engine in London.",
    "Alan Turing broke the Enigma cipher at Bletchley Park.",
]


def _pdf(path: Path, pages: list[str] | None = PAGE_TOPICS, paragraphs: int = 1, password: str = "") -> Path:
    from fpdf import FPDF
    from fpdf.enums import EncryptionMethod

    pdf = FPDF()
    pdf.set_font("helvetica", size=11)
    for text in pages or [None, None]:
        pdf.add_page()
        if text is None:  # a "scan": shapes, no text layer
            pdf.rect(20, 20, 120, 80, style="F")
            continue
        for n in range(paragraphs):
            pdf.multi_cell(0, 6, f"{text} Paragraph {n + 1} of this page.")
            pdf.ln(6)
    if password:
        pdf.set_encryption(owner_password="owner", user_password=password, encryption_method=EncryptionMethod.RC4)
    pdf.output(str(path))
    return path


def _pandoc(markdown: str, to: str, path: Path) -> Path:
    """A DOCX or PPTX written by pandoc (bundled by pypandoc_binary): a writer independent of the
    python-docx / python-pptx readers, so a reader's quirk cannot hide in its own writer's output."""
    import pypandoc

    pypandoc.convert_text(markdown, to, format="md", outputfile=str(path))
    return path


DOCX_MARKDOWN = """# Engines

Charles Babbage designed the Difference Engine.

| Name              | Year |
|-------------------|------|
| Analytical Engine | 1837 |

# Codebreaking

Alan Turing worked at Bletchley Park.
"""

# pandoc's slide rules: the slide level is the highest heading level followed directly by content
# (here `#`), each such heading starts a slide titled by it, and `---` starts an untitled slide;
# a `::: notes` div becomes the slide's speaker notes.
PPTX_MARKDOWN = """# Babbage

The Difference Engine

::: notes
Built in London from 1819.
:::

# Turing

The Bombe at Bletchley Park

---

Grace Hopper wrote the first compiler.
"""


def _docx(path: Path) -> Path:
    return _pandoc(DOCX_MARKDOWN, "docx", path)


def _pptx(path: Path) -> Path:
    return _pandoc(PPTX_MARKDOWN, "pptx", path)


def _xlsx(path: Path) -> Path:
    import xlsxwriter

    book = xlsxwriter.Workbook(str(path))
    people = book.add_worksheet("People")
    for r, row in enumerate([("Name", "Born"), ("Ada Lovelace", 1815), ("Alan Turing", 1912)]):
        people.write_row(r, 0, row)
    places = book.add_worksheet("Places")
    places.write_row(0, 0, ["Bletchley Park", "Buckinghamshire"])
    book.close()
    return path


def _cut(src: Path, dest: Path, keep: float = 0.4) -> Path:
    """A download cut short: the first part of a real file."""
    data = src.read_bytes()
    dest.write_bytes(data[: int(len(data) * keep)])
    return dest


# -- PDF ---------------------------------------------------------------------------------------------------------------


def test_pdf_text_is_read_page_by_page(tmp_path):
    doc = read_document(_pdf(tmp_path / "a.pdf"))
    assert doc.status == "ok" and doc.usable and doc.encoding == "pdf"
    for text in PAGE_TOPICS:
        assert text in " ".join(doc.text.split())
    assert [s.page for s in doc.sections] == [1, 2, 3]
    for section, text in zip(doc.sections, PAGE_TOPICS):
        assert doc.text[section.start :].startswith(text[:20])


def test_pdf_page_numbers_reach_the_chunks(tmp_path):
    path = _pdf(tmp_path / "long.pdf", paragraphs=8)
    out = chunk_document("long.pdf", CorpusFile("long.pdf", "long.pdf", path), 10**7, 120, 10)
    rows = out.chunks.sort("position").to_dicts()
    assert len(rows) >= 6
    for row in rows:
        assert 1 <= row["page_start"] <= row["page_end"] <= 3
        # the chunk's own text names the pages it spans (each paragraph says its page's topic)
        for page, text in enumerate(PAGE_TOPICS, 1):
            if text[:25] in " ".join(row["text"].split()[-30:]):  # its last words lie on its last page
                assert row["page_end"] >= page
    assert rows[0]["page_start"] == 1 and rows[-1]["page_end"] == 3
    assert [r["page_start"] for r in rows] == sorted(r["page_start"] for r in rows)
    assert {r["page_start"] for r in rows} == {1, 2, 3}


def test_encrypted_pdf_is_skipped_as_password_protected(tmp_path):
    doc = read_document(_pdf(tmp_path / "secret.pdf", password="s3cret"))
    assert doc.status == "encrypted" and not doc.usable and doc.text == ""
    assert "secret.pdf skipped: password-protected" in doc.message


def test_scanned_pdf_without_text_layer_is_skipped(tmp_path):
    doc = read_document(_pdf(tmp_path / "scan.pdf", pages=None))
    assert doc.status == "no_text" and not doc.usable
    assert "no text layer" in doc.message and "scanned PDF" in doc.message and "2 page(s)" in doc.message


def test_corrupt_pdf_and_text_named_pdf_are_skipped(tmp_path):
    cut = read_document(_cut(_pdf(tmp_path / "whole.pdf"), tmp_path / "cut.pdf", 0.2))
    assert cut.status == "corrupt" and "cut.pdf skipped: not a valid PDF" in cut.message
    (tmp_path / "notes.pdf").write_text("Just some notes, saved with the wrong name.\n", encoding="utf-8")
    text = read_document(tmp_path / "notes.pdf")
    assert text.status == "corrupt" and "no %PDF- header" in text.message and "text file" in text.message


def test_pdf_text_limit_cuts_the_text_not_the_file(tmp_path):
    doc = read_document(_pdf(tmp_path / "a.pdf"), max_bytes=150)
    assert doc.status == "truncated" and doc.usable
    assert len(doc.text.encode("utf-8")) <= 150 and PAGE_TOPICS[0] in doc.text
    assert "only the first 150 were read (pages 1-2 of 3)" in doc.message
    assert PAGE_TOPICS[2] not in doc.text


# -- DOCX, PPTX, XLSX -----------------------------------------------------------------------------------------------


def test_docx_paragraphs_tables_and_headings(tmp_path):
    doc = read_document(_docx(tmp_path / "a.docx"))
    assert doc.status == "ok" and doc.encoding == "docx"
    assert "Charles Babbage designed the Difference Engine." in doc.text
    assert "Analytical Engine | 1837" in doc.text
    labels = {s.label: doc.text[s.start :] for s in doc.sections}
    assert labels["Engines"].startswith("Engines") and labels["Codebreaking"].startswith("Codebreaking")
    assert all(s.page is None for s in doc.sections)
    out = chunk_document("a.docx", CorpusFile("a.docx", "a.docx", tmp_path / "a.docx"), 10**7, 2000, 100)
    assert out.chunks["section"].to_list() == ["Engines"] and out.chunks["page_start"].to_list() == [None]


def test_pptx_slides_are_pages(tmp_path):
    doc = read_document(_pptx(tmp_path / "deck.pptx"))
    assert doc.status == "ok" and "The Bombe at Bletchley Park" in doc.text
    assert "Built in London from 1819." in doc.text  # speaker notes are read with their slide
    assert [(s.page, s.label) for s in doc.sections] == [(1, "Babbage"), (2, "Turing"), (3, None)]
    assert doc.text[doc.sections[1].start :].startswith("Turing")
    assert doc.text[doc.sections[2].start :] == "Grace Hopper wrote the first compiler."


def test_xlsx_sheets_are_sections(tmp_path):
    doc = read_document(_xlsx(tmp_path / "book.xlsx"))
    assert doc.status == "ok"
    assert "Ada Lovelace | 1815" in doc.text and "Bletchley Park | Buckinghamshire" in doc.text
    assert [s.label for s in doc.sections] == ["People", "Places"]
    assert doc.text[doc.sections[1].start :].startswith("Places")


@pytest.mark.parametrize("make,suffix", [(_docx, ".docx"), (_pptx, ".pptx"), (_xlsx, ".xlsx")])
def test_broken_office_files_are_skipped_with_a_reason(tmp_path, make, suffix):
    name = suffix[1:].upper()
    whole = make(tmp_path / f"whole{suffix}")
    cut = read_document(_cut(whole, tmp_path / f"cut{suffix}"))
    assert cut.status == "corrupt" and f"cut{suffix} skipped: not a valid {name}" in cut.message
    (tmp_path / f"text{suffix}").write_text("plain words\n", encoding="utf-8")
    text = read_document(tmp_path / f"text{suffix}")
    assert text.status == "corrupt" and "not a ZIP package" in text.message and "text file" in text.message
    # a ZIP that is not this format (a package of another kind)
    other = {".docx": _xlsx, ".pptx": _docx, ".xlsx": _pptx}[suffix](tmp_path / "other.zip")
    wrong = tmp_path / f"wrong{suffix}"
    wrong.write_bytes(other.read_bytes())
    assert read_document(wrong).status == "corrupt"
    assert read_document(whole).status == "ok"


def _pad(src: Path, dest: Path, size: int) -> Path:
    """`src` (a real Office package) with one more part of `size` zero bytes, deflated: at tens of
    MiB it is a zip bomb of a few hundred KB."""
    import shutil
    import zipfile

    shutil.copyfile(src, dest)
    with zipfile.ZipFile(dest, "a", compression=zipfile.ZIP_DEFLATED) as package:
        with package.open("media/padding.bin", "w", force_zip64=True) as part:
            block = bytes(1024 * 1024)
            for _ in range(size // len(block)):
                part.write(block)
            part.write(bytes(size % len(block)))
    return dest


def test_package_limit_follows_the_text_limit():
    assert package_limit(20 * 1024 * 1024) == 640 * 1024 * 1024  # the default text limit: 640 MiB unpacked
    assert package_limit(150) == PACKAGE_FLOOR == 64 * 1024 * 1024


@pytest.mark.parametrize("make,suffix", [(_docx, ".docx"), (_pptx, ".pptx"), (_xlsx, ".xlsx")])
def test_office_zip_bomb_is_refused_before_it_is_opened(tmp_path, make, suffix):
    whole = make(tmp_path / f"whole{suffix}")
    bomb = _pad(whole, tmp_path / f"bomb{suffix}", PACKAGE_FLOOR + 1024 * 1024)
    assert bomb.stat().st_size < 1024 * 1024  # it inflates over a hundred times
    doc = read_document(bomb, max_bytes=10_000)
    assert doc.status == "too_large" and not doc.usable and doc.text == ""
    assert f"bomb{suffix} skipped: its {suffix[1:].upper()} package would unpack to" in doc.message
    assert "a zip bomb?" in doc.message and "GRAPHRAG_MAX_DOCUMENT_BYTES" in doc.message
    # the same package under the bound reads (a larger text limit raises it: 32 x 10 MB > 65 MiB)
    assert read_document(bomb, max_bytes=10_000_000).status == "ok"
    # only the unpacked total is judged: a package with a small extra part reads
    assert read_document(_pad(whole, tmp_path / f"small{suffix}", 1024 * 1024), max_bytes=10_000).status == "ok"


def test_old_chunk_files_without_page_columns_still_read(tmp_path):
    store = Store(Paths(tmp_path / "home"))
    old = pl.DataFrame(
        {"chunk_id": ["c1"], "doc_id": ["a.txt"], "doc": ["a.txt"], "position": [0], "text": ["x"], "tokens": [1]}
    )
    folder = store.paths.doc_dir("chunks")
    folder.mkdir(parents=True, exist_ok=True)
    old.write_parquet(folder / "a.txt.parquet")
    for table in (store.read_chunks("a.txt"), store.read_all_chunks(["a.txt"]), store.scan_all_chunks(["a.txt"])):
        assert table["chunk_id"].to_list() == ["c1"]
        assert table["page_start"].to_list() == [None] and table["section"].to_list() == [None]


def test_cite_names_pages_and_citations_parse_it():
    source = {"doc": "report.pdf", "chunk": 2, "chunk_id": "c", "pages": "3-4"}
    assert cite(source) == "[doc: report.pdf, chunk 2, p. 3-4]"
    assert citations("as shown [doc: report.pdf, chunk 2, p. 3-4] and [doc: a.txt, chunk 1]") == [
        ("report.pdf", 2),
        ("a.txt", 1),
    ]


# -- end to end --------------------------------------------------------------------------------------------------------


def test_mixed_corpus_build_puts_pdf_pages_in_the_index_and_sources(home, tmp_path, monkeypatch):
    corpus = tmp_path / "mixed"
    corpus.mkdir()
    _pdf(corpus / "engines.pdf", paragraphs=8)
    _pdf(corpus / "secret.pdf", password="pw")
    _pdf(corpus / "scan.pdf", pages=None)
    _cut(_docx(tmp_path / "x.docx"), corpus / "broken.docx")
    _docx(corpus / "notes.docx")
    _pptx(corpus / "deck.pptx")
    _xlsx(corpus / "people.xlsx")
    (corpus / "plain.txt").write_text("Grace Hopper wrote the first compiler.\n", encoding="utf-8")
    monkeypatch.setenv("GRAPHRAG_CHUNK_TOKENS", "120")
    monkeypatch.setenv("GRAPHRAG_CHUNK_OVERLAP", "10")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    for name, reason in [
        ("secret.pdf", "password-protected"),
        ("scan.pdf", "no text layer"),
        ("broken.docx", "not a valid DOCX"),
    ]:
        assert name in out and reason in out, (name, out)
        info = json.loads((home / "tables" / "chunks" / f"{name}.json").read_text())
        assert info["chunks"] == 0 and reason in info["message"]
    con = duckdb.connect(str(home / "index" / "search_index.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT doc, page_start, page_end, section FROM chunks ORDER BY doc, position").fetchall()
    finally:
        con.close()
    docs = {r[0] for r in rows}
    assert docs == {"engines.pdf", "notes.docx", "deck.pptx", "people.xlsx", "plain.txt"}
    pdf_pages = [(r[1], r[2]) for r in rows if r[0] == "engines.pdf"]
    assert pdf_pages[0][0] == 1 and pdf_pages[-1][1] == 3 and all(a <= b for a, b in pdf_pages)
    assert {r[3] for r in rows if r[0] == "people.xlsx"} == {"People"}  # one chunk: the section where it starts
    assert {(r[1], r[2]) for r in rows if r[0] == "plain.txt"} == {(None, None)}

    result = cli_json("query", "Alan Turing broke the Enigma cipher at Bletchley Park", "--mode", "naive", "--json")
    pdf_sources = [s for c in result["chunks"] for s in c["sources"] if s["doc"] == "engines.pdf"]
    assert pdf_sources, result["chunks"]
    assert any(s["pages"] in ("3", "2-3") for s in pdf_sources), pdf_sources
    assert f"p. {pdf_sources[0]['pages']}]" in result["context"]
    code, text_out = cli("query", "Alan Turing broke the Enigma cipher at Bletchley Park", "--mode", "naive")
    assert code == 0 and "engines.pdf, chunk" in text_out and ", p. " in text_out


# -- a home written before the page columns -------------------------------------------------------------------------

_PAGE_COLUMNS = ("page_start", "page_end", "section")


def _age_home(home: Path) -> None:
    """Turns a home into one an earlier version wrote: chunk files (with their recorded checksums)
    and the DuckDB index's chunks table without the page columns, the index at schema 3."""
    from graphrag_pipeline.storage.files import write_parquet

    folder = home / "tables" / "chunks"
    for table in folder.glob("*.parquet"):
        old = pl.read_parquet(table).drop(_PAGE_COLUMNS)
        digest = write_parquet(old, table, checksum=True)
        info_file = table.with_suffix(".json")
        info = json.loads(info_file.read_text())
        info["checksums"][".parquet"] = digest
        info_file.write_text(json.dumps(info))
        assert set(pl.read_parquet_schema(table)) & set(_PAGE_COLUMNS) == set()
    con = duckdb.connect(str(home / "index" / "search_index.duckdb"))
    try:
        for column in _PAGE_COLUMNS:
            con.execute(f"ALTER TABLE chunks DROP COLUMN {column}")
        con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
        con.execute("CHECKPOINT")
    finally:
        con.close()


def _index_state(home: Path) -> tuple[dict, list[tuple]]:
    con = duckdb.connect(str(home / "index" / "search_index.duckdb"), read_only=True)
    try:
        meta = {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM meta").fetchall()}
        rows = con.execute("SELECT doc, page_start, page_end FROM chunks ORDER BY doc, position").fetchall()
    finally:
        con.close()
    return meta, rows


def test_a_home_written_before_page_columns_reads_and_a_later_build_republishes(home, tmp_path, monkeypatch):
    from graphrag_pipeline.index.duckdb_reader import open_index
    from graphrag_pipeline.query import query

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "plain.txt").write_text("Grace Hopper wrote the first compiler at Harvard.\n", encoding="utf-8")
    (corpus / "turing.txt").write_text(PAGE_TOPICS[2] + "\n", encoding="utf-8")
    monkeypatch.setenv("GRAPHRAG_CHUNK_TOKENS", "120")
    monkeypatch.setenv("GRAPHRAG_CHUNK_OVERLAP", "10")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    _age_home(home)

    # the old home reads: stored chunks with null pages, the old index through its compatibility path
    store = Store(Paths(home))
    for table in (store.read_all_chunks(["plain.txt", "turing.txt"]), store.scan_all_chunks(["plain.txt"])):
        assert table.columns[-3:] == list(_PAGE_COLUMNS) and table["page_start"].null_count() == table.height
    for preload in (False, True):
        with open_index(home, backend="duckdb", preload=preload) as db:
            for mode in ("naive", "local"):
                sources = query(db, PAGE_TOPICS[2], mode).sources()  # entities', relations', chunks' sources
                assert any(s["doc"] == "turing.txt" for s in sources), (preload, mode, sources)
                assert all("pages" not in s for s in sources)
    result = cli_json("query", PAGE_TOPICS[2], "--mode", "naive", "--json")
    assert result["chunks"] and "p. " not in result["context"]

    # a PDF added later: the build mixes old chunk files (no page columns) with new ones and
    # publishes a whole new index in the new schema
    _pdf(corpus / "engines.pdf", paragraphs=8)
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    meta, rows = _index_state(home)
    from graphrag_pipeline.index.duckdb_writer import SCHEMA_VERSION

    assert meta["schema_version"] == SCHEMA_VERSION and meta["build_mode"] == "full"
    assert f"schema version 3 -> {SCHEMA_VERSION}" in meta["build_reason"]
    assert {r[0] for r in rows} == {"engines.pdf", "plain.txt", "turing.txt"}
    assert {(r[1], r[2]) for r in rows if r[0] != "engines.pdf"} == {(None, None)}
    pdf_pages = [(r[1], r[2]) for r in rows if r[0] == "engines.pdf"]
    assert pdf_pages[0][0] == 1 and pdf_pages[-1][1] == 3
    result = cli_json("query", PAGE_TOPICS[2], "--mode", "naive", "--json")
    pdf_sources = [s for c in result["chunks"] for s in c["sources"] if s["doc"] == "engines.pdf"]
    assert pdf_sources and all(s["pages"] for s in pdf_sources), result["chunks"]
    code, out = cli("verify")
    assert code == 0, out


def test_old_and_new_chunk_files_read_together_across_read_batches(tmp_path, monkeypatch):
    """An upgraded home: most chunk files lack the page columns, a document written since has them;
    the many-file readers work in batches, and a batch of old files must join one with new ones."""
    import polars as pl

    from graphrag_pipeline.storage import store as store_module
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import CHUNK_ROWS, Store

    monkeypatch.setattr(store_module, "READ_BATCH", 2)
    store = Store(Paths(tmp_path / "home"))
    old_schema = {k: v for k, v in CHUNK_ROWS.items() if k not in ("page_start", "page_end", "section")}
    folder = store.paths.doc_dir("chunks")
    folder.mkdir(parents=True, exist_ok=True)
    keys = ["a.txt", "b.txt", "c.pdf"]
    for key in keys[:2]:
        row = {"chunk_id": [f"id-{key}"], "doc_id": [key], "doc": [key], "position": [0], "text": ["x"], "tokens": [1]}
        pl.DataFrame(row, schema=old_schema).write_parquet(folder / f"{key}.parquet")
    new = {"chunk_id": ["id-c"], "doc_id": ["c.pdf"], "doc": ["c.pdf"], "position": [0], "text": ["y"], "tokens": [1]}
    new.update(page_start=[3], page_end=[4], section=["S"])
    store.write_chunks("c.pdf", pl.DataFrame(new, schema=CHUNK_ROWS), {})
    for read in (store.read_all_chunks, store.scan_all_chunks):
        rows = read(keys).sort("doc_id")
        assert rows.columns == list(CHUNK_ROWS) and rows.height == 3
        assert rows["page_start"].to_list() == [None, None, 3] and rows["section"].to_list() == [None, None, "S"]
