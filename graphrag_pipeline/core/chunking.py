"""Splitting a document into token windows whose ids survive edits elsewhere in the document.

Plain fixed windows shift every later chunk when one paragraph grows. Here the text is first cut
into paragraph units (long paragraphs into lines, sentences, then token windows), and units are
packed into chunks of at most `max_tokens`. A chunk also ends after a unit whose content hash
picks it as a cut point (once the chunk holds `min_tokens`), so boundaries are anchored to content:
an edit changes its own chunk and, through the overlap, at most the next one; later chunks get the
same text and therefore the same id (the hash of their text).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from .tokens import encoding

_PARAGRAPHS = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s+|(?<=[。！？；])")


@dataclass(frozen=True)
class Chunk:
    id: str
    position: int
    text: str
    tokens: int


def chunk_id(text: str) -> str:
    return "chunk-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def _split_units(text: str, max_tokens: int) -> list[tuple[str, int]]:
    """Paragraph-like units of at most max_tokens tokens each, with their token counts."""
    enc = encoding()
    units: list[tuple[str, int]] = []

    def add(piece: str, level: int) -> None:
        piece = piece.strip()
        if not piece:
            return
        n = len(enc.encode(piece, disallowed_special=()))
        if n <= max_tokens:
            units.append((piece, n))
            return
        if level == 0:
            parts = piece.split("\n")
        elif level == 1:
            parts = _SENTENCE_END.split(piece)
        else:
            ids = enc.encode(piece, disallowed_special=())
            for start in range(0, len(ids), max_tokens):
                window = enc.decode(ids[start : start + max_tokens])
                units.append((window, len(ids[start : start + max_tokens])))
            return
        if len(parts) <= 1:
            add(piece, level + 1)
            return
        buf: list[str] = []
        buf_n = 0
        sep = "\n" if level == 0 else " "
        for part in parts:
            pn = len(enc.encode(part, disallowed_special=()))
            if buf and buf_n + pn > max_tokens:
                add(sep.join(buf), level + 1)
                buf, buf_n = [], 0
            buf.append(part)
            buf_n += pn
        if buf:
            add(sep.join(buf), level + 1)

    for para in _PARAGRAPHS.split(text):
        add(para, 0)
    return units


def _is_anchor(unit: str, every: int) -> bool:
    return int(hashlib.md5(unit.encode("utf-8")).hexdigest()[:8], 16) % every == 0


def chunk_text(text: str, max_tokens: int = 1200, overlap: int = 100, min_tokens: int | None = None) -> list[Chunk]:
    """Chunks of at most max_tokens (+ overlap from the previous chunk's tail)."""
    if max_tokens <= 0:
        raise ValueError("max_tokens must be positive")
    overlap = max(0, min(overlap, max_tokens // 2))
    min_tokens = max_tokens // 2 if min_tokens is None else min_tokens
    enc = encoding()
    units = _split_units(text, max_tokens)
    groups: list[list[str]] = []
    current: list[str] = []
    size = 0
    for unit, n in units:
        if current and size + n > max_tokens:
            groups.append(current)
            current, size = [], 0
        current.append(unit)
        size += n
        if size >= min_tokens and _is_anchor(unit, 3):
            groups.append(current)
            current, size = [], 0
    if current:
        groups.append(current)

    chunks: list[Chunk] = []
    previous_tail = ""
    for position, group in enumerate(groups):
        body = "\n\n".join(group)
        chunk = (previous_tail + "\n\n" + body) if previous_tail else body
        ids = enc.encode(body, disallowed_special=())
        previous_tail = enc.decode(ids[-overlap:]).strip() if overlap and len(ids) > overlap else ""
        chunks.append(Chunk(chunk_id(chunk), position, chunk, len(enc.encode(chunk, disallowed_special=()))))
    return chunks
