"""Splitting a document into token windows whose ids survive edits elsewhere in the document.

Plain fixed windows shift every later chunk when one paragraph grows. Here the text is first cut
into paragraph units (long paragraphs into lines, sentences, then token windows), and units are
packed into chunks of at most `max_tokens`. A chunk also ends after a unit whose content hash
picks it as a cut point (once the chunk holds `min_tokens`), so boundaries are anchored to content:
an edit changes its own chunk and, through the overlap, at most the next one; later chunks get the
same text and therefore the same id (the hash of their text). A unit is picked with a probability
proportional to its token count (one cut every ~0.4 x max_tokens on average), and `min_tokens` is
small (max_tokens // 10): with a large minimum, or with most chunks ending because they are full,
a boundary depends on where the previous chunk ended and an edit shifts every later boundary.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from .tokens import encoding

_PARAGRAPHS = re.compile(r"\n\s*\n")
# zero-width, so joining the pieces with "" gives back the text (no spaces inserted in Chinese)
_SENTENCE_END = re.compile(r"(?<=[.!?;])(?=\s)|(?<=[。！？；])")
_ANCHOR_SPACING = 0.4  # mean tokens between content-chosen cut points, as a fraction of max_tokens


@dataclass(frozen=True)
class Chunk:
    id: str
    position: int
    text: str
    tokens: int


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


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
            # token windows, ended on a character boundary (a CJK character often spans
            # several tokens) and re-counted, since a window's text may re-encode differently
            ids = enc.encode(piece, disallowed_special=())
            start = 0
            while start < len(ids):
                end = min(start + max_tokens, len(ids))
                while True:
                    raw = enc.decode_bytes(ids[start:end])
                    window = raw.decode("utf-8", errors="replace")
                    n = len(enc.encode(window, disallowed_special=()))
                    if end - start <= 1 or (_is_utf8(raw) and n <= max_tokens):
                        break
                    end -= 1
                units.append((window, n))
                start = end
            return
        if len(parts) <= 1:
            add(piece, level + 1)
            return
        buf: list[str] = []
        buf_n = 0
        sep = "\n" if level == 0 else ""
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


def _is_anchor(unit: str, tokens: int, spacing: float) -> bool:
    """Content-chosen cut point, picked with probability tokens / spacing."""
    return int(hashlib.md5(unit.encode("utf-8")).hexdigest()[:8], 16) < (1 << 32) * tokens / spacing


def _tail(ids: list[int], overlap: int) -> str:
    """The last tokens of a chunk body, repeated at the start of the next chunk.

    At most overlap - 1 tokens (one is left for the "\n\n" joining it to the next body), starting
    on a character boundary; a shorter body is repeated whole.
    """
    if not overlap or not ids:
        return ""
    enc = encoding()
    for k in range(min(overlap - 1, len(ids)), 0, -1):
        tail = enc.decode_bytes(ids[-k:]).decode("utf-8", errors="ignore").strip()
        if len(enc.encode(tail, disallowed_special=())) < overlap:
            return tail
    return ""


def chunk_text(text: str, max_tokens: int = 1200, overlap: int = 100, min_tokens: int | None = None) -> list[Chunk]:
    """Chunks of at most max_tokens (+ overlap from the previous chunk's tail)."""
    if max_tokens <= 0:
        raise ValueError("max_tokens must be positive")
    overlap = max(0, min(overlap, max_tokens // 2))
    min_tokens = max_tokens // 10 if min_tokens is None else min_tokens
    spacing = max(1.0, _ANCHOR_SPACING * max_tokens)
    enc = encoding()
    units = _split_units(text, max_tokens)
    groups: list[list[str]] = []
    current: list[str] = []
    size = 0
    for unit, n in units:
        cost = n + 1 if current else n  # + the "\n\n" joining it to the previous unit
        if current and size + cost > max_tokens:
            groups.append(current)
            current, size, cost = [], 0, n
        current.append(unit)
        size += cost
        if size >= min_tokens and _is_anchor(unit, n, spacing):
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
        previous_tail = _tail(ids, overlap)
        chunks.append(Chunk(chunk_id(chunk), position, chunk, len(enc.encode(chunk, disallowed_special=()))))
    return chunks
