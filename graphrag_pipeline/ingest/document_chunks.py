"""One corpus file to its chunk table and info record, as the `chunks` asset stores them.

A file that vanished or cannot be read since the scan does not stop its neighbours: the outcome
says why it was skipped, and what should be logged about it.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import polars as pl

from graphrag_pipeline.ingest.chunking import chunk_text
from graphrag_pipeline.ingest.documents import CorpusFile, file_hash, read_document
from graphrag_pipeline.storage.store import CHUNK_ROWS


@dataclass
class ChunkedDocument:
    key: str
    document: str  # its path in the corpus (the key when the file is gone)
    chunks: pl.DataFrame | None  # None: nothing to store
    info: dict
    row: dict | None = None  # the preview row of a document that was read
    skipped: str = ""  # why the document yields no chunks
    truncated: str = ""  # why only its beginning was chunked
    log: list[tuple[str, str]] = field(default_factory=list)  # (level "info"/"warning", message)


def document_note(document: str, note: str) -> str:
    """A note about a document as one line that names it once: a note that begins with the file's
    name ("a.txt skipped: binary content") gets the document's corpus path in place of the name,
    any other note the path in front ("docs/a.txt: ...")."""
    name = document.rsplit("/", 1)[-1]
    if name and note.startswith(name) and note[len(name) : len(name) + 1] in (" ", ":"):
        return document + note[len(name) :]
    return f"{document}: {note}"


def chunk_place(sections: list, start: int, end: int) -> tuple[int | None, int | None, str | None]:
    """(first page, last page, section label) of the text [start, end) of a document whose
    `sections` (formats.Section, by offset) say where pages and labels begin; all None without any.
    The label is the one in force where the chunk starts."""
    if not sections:
        return None, None, None
    starts = [s.start for s in sections]
    first = sections[max(0, bisect_right(starts, start) - 1)]
    last = sections[max(0, bisect_right(starts, max(start, end - 1)) - 1)]
    pages = [s.page for s in sections if first.start <= s.start <= last.start and s.page is not None]
    return (min(pages) if pages else None), (max(pages) if pages else None), first.label


def chunk_document(
    key: str, f: CorpusFile | None, max_document_bytes: int, chunk_tokens: int, chunk_overlap: int
) -> ChunkedDocument:
    """The chunks of the corpus file ``f`` (None: no longer in the corpus) under partition ``key``."""
    if f is None:
        return ChunkedDocument(
            key,
            key,
            pl.DataFrame(schema=CHUNK_ROWS),
            {"relpath": None, "content_hash": None, "status": "missing", "chunks": 0},
            skipped="file no longer in the corpus",
            log=[("warning", f"{key}: file no longer in the corpus; skipped (its partition will be removed)")],
        )
    try:
        content_hash = file_hash(f.path)
    except OSError as exc:  # gone or unreadable since the scan: its neighbours go on
        # stored as a document without chunks (content unknown: the next build tries it again), so
        # a materialized partition always has its files and a reader can tell lost files from it
        return ChunkedDocument(
            key,
            f.relpath,
            pl.DataFrame(schema=CHUNK_ROWS),
            {"relpath": f.relpath, "content_hash": None, "status": "unreadable", "chunks": 0},
            skipped=f"cannot read it: {exc.strerror or exc}",
            log=[("warning", f"{f.relpath}: cannot read it ({exc.strerror or exc}); skipped")],
        )
    doc = read_document(f.path, max_document_bytes)
    log = []
    if doc.message:
        # a skipped or cut document is a warning (the build prints it once, from the metadata's notices)
        level = "warning" if not doc.usable or doc.status == "truncated" else "info"
        log.append((level, document_note(f.relpath, doc.message)))
    pieces = chunk_text(doc.text, chunk_tokens, chunk_overlap) if doc.usable else []
    places = [chunk_place(doc.sections, c.start, c.end) for c in pieces]
    df = pl.DataFrame(
        {
            "chunk_id": [c.id for c in pieces],
            "doc_id": [key] * len(pieces),
            "doc": [f.relpath] * len(pieces),
            "position": [c.position for c in pieces],
            "text": [c.text for c in pieces],
            "tokens": [c.tokens for c in pieces],
            "page_start": [p[0] for p in places],
            "page_end": [p[1] for p in places],
            "section": [p[2] for p in places],
        },
        schema=CHUNK_ROWS,
    )
    tokens = int(df["tokens"].sum()) if df.height else 0
    out = ChunkedDocument(
        key,
        f.relpath,
        df,
        {
            "relpath": f.relpath,
            "content_hash": content_hash,
            "status": doc.status,
            "message": doc.message,
            "encoding": doc.encoding,
            "chunks": df.height,
            "tokens": tokens,
        },
        row={"document": f.relpath, "status": doc.status, "chunks": df.height, "tokens": tokens},
        log=log,
    )
    if not doc.usable:
        out.skipped = doc.message
    elif doc.status == "truncated":
        out.truncated = doc.message
    return out
