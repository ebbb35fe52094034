"""Splitting a document into token windows whose ids survive edits elsewhere in the document.

Plain fixed windows shift every later chunk when one paragraph grows. Here the text is first cut
into units: paragraphs, except that a paragraph longer than `max_tokens` is cut at its line breaks
and sentence ends (and a sentence still too long into token windows). A chunk is a run of whole
units, and where a chunk ends is decided by the text around that place, not by where the
previous chunk ended:

- Every unit gets a key from the hash of its text, weighted by its size (log(u) / tokens, u
  uniform in (0, 1)), so in any group of units each has the best key with a probability
  proportional to its token count.
- Content cut: a chunk ends after a unit whose key beats every unit with at most `min_tokens`
  tokens between the two (neighbours always compete), if it lies at least `min_tokens` tokens from
  both ends of the document. Two content cuts are therefore more than `min_tokens` apart (each
  would have to beat the other), and about 2 x `min_tokens` apart on average. A document under
  about 2 x `min_tokens` tokens (and within `max_tokens`) is one chunk.
- A stretch between content cuts (or after the last one) longer than `max_tokens` is split: while
  the rest is too long, a piece ends after the best-keyed unit ending `max_tokens - min_tokens` to
  `max_tokens` tokens into it. That choice reads only the text from the piece's start, and every
  other candidate lies within `min_tokens` of the winner and cannot beat it; so text appended to
  the document can neither move a piece nor make a candidate a content cut, and appending changes
  only the last chunk.

Why: an edit changes keys and distances only within `min_tokens` of it, and content cuts are
more than that apart, so at most the one or two content cuts nearest the edit move (and, in a
stretch split for length, the pieces after the edit up to the next content cut may shift): the
chunk holding the edit changes, so does a neighbour across a moved cut, and so does the next chunk
when the tail it repeats as overlap changed; every other chunk keeps its text and therefore its id
(the hash of its text). The previous rule ended a chunk after a hash-picked unit once the chunk held a minimum, so
each cut depended on where the previous one fell. With its small minimum (max_tokens // 10) chunks
averaged ~870 tokens at the default maximum: ~25 % more chunks (LLM extraction calls) than
nano-graphrag's 1,200-token windows with 100 tokens of overlap. With a minimum near a nano window
the average is right, but an edit that moves one cut shifts the next ones: with a 1,000-token
minimum and a cut point every ~250 tokens after it, 7 % of edits of a paragraph of at most 300
tokens changed more than three chunk ids (up to 19).

The default `min_tokens` is 0.3 x `max_tokens` (600 at the default 2,000). Measured with cl100k
tokens, overlap 100, against nano-graphrag's count per document (1 up to 1,200 tokens, else
ceil((tokens - 100) / 1,100)): the Linux kernel documentation (3,183 files) gets 6,268 chunks vs
nano's 7,359 (the previous rule 9,278); the Canterbury corpus texts alice29, asyoulik, lcet10 and
plrabn12 get 33/32/68/109 vs 36/32/81/110; the bundled sample corpus 9 vs 12. Chunk bodies of
documents over 8,000 tokens average 1,213 tokens (Linux docs) and 1,095-1,294 (Canterbury).
Of 7,040 random single-paragraph edits of 44 long documents (append words, replace, insert,
delete a paragraph) 80 % changed one chunk id, 17 % two, 2 % three and 0.5 % more, nearly all
edits of a large paragraph (of the 6,908 edits of a paragraph of at most 300 tokens, 4 changed
four ids, none more). None of 3,800 appended paragraphs changed an earlier id.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from functools import lru_cache

from graphrag_pipeline.ingest.tokens import encoding
from graphrag_pipeline.settings import default as setting_default

_PARAGRAPHS = re.compile(r"\n\s*\n")
# separators inside a long paragraph; each match becomes the text joining two units, so a chunk
# reproduces the original text between its units (no space inserted between Chinese sentences)
_LINE_BREAK = re.compile(r"[^\S\n]*\n\s*")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])\s*")
_PARAGRAPH_SEP = "\n\n"
_MIN_FRACTION = 0.3  # default min_tokens as a fraction of max_tokens


@dataclass(frozen=True)
class Chunk:
    id: str
    position: int
    text: str
    tokens: int
    # where the chunk's own text (without the overlap repeated from the previous chunk) lies in the
    # document's text, as character offsets [start, end): pages and sections are found from them
    start: int = 0
    end: int = 0


@dataclass(frozen=True)
class _Unit:
    text: str  # without surrounding whitespace (except token windows, kept verbatim)
    tokens: int
    sep: str  # joins it to the previous unit inside a chunk: "\n\n" between paragraphs
    join: int  # tokens counted for sep (at least 1)
    start: int = 0  # character offset of text in the document


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _count(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))


def chunk_id(text: str) -> str:
    return "chunk-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def _pieces(text: str, pattern: re.Pattern) -> list[tuple[str, str, int]]:
    """(separator before it, piece, its offset) for the non-empty pieces of text between matches of pattern."""
    out: list[tuple[str, str, int]] = []
    sep = ""
    pos = 0
    for m in pattern.finditer(text):
        if m.start() > pos:
            out.append((sep, text[pos : m.start()], pos))
            sep = ""
        sep += m.group()
        pos = m.end()
    if pos < len(text):
        out.append((sep, text[pos:], pos))
    return out


def _paragraphs(text: str) -> list[tuple[str, int]]:
    """(paragraph without surrounding whitespace, its offset) for the non-empty paragraphs."""
    out = []
    pos = 0
    for raw_start, raw_end in [(m.start(), m.end()) for m in _PARAGRAPHS.finditer(text)] + [(len(text), len(text))]:
        raw = text[pos:raw_start]
        para = raw.strip()
        if para:
            out.append((para, pos + len(raw) - len(raw.lstrip())))
        pos = raw_end
    return out


def _windows(text: str, max_tokens: int) -> list[tuple[str, int]]:
    """Token windows of at most max_tokens, ended on a character boundary (a CJK character often
    spans several tokens) and re-counted, since a window's text may re-encode differently."""
    enc = encoding()
    ids = enc.encode(text, disallowed_special=())
    out = []
    start = 0
    while start < len(ids):
        end = min(start + max_tokens, len(ids))
        while True:
            raw = enc.decode_bytes(ids[start:end])
            window = raw.decode("utf-8", errors="replace")
            n = _count(window)
            if end - start <= 1 or (_is_utf8(raw) and n <= max_tokens):
                break
            end -= 1
        out.append((window, n))
        start = end
    return out


@lru_cache(maxsize=1024)
def _join_cost(sep: str) -> int:
    return max(1, _count(sep))


def _split_units(text: str, max_tokens: int) -> list[_Unit]:
    """Paragraphs; a paragraph over max_tokens becomes its lines, a line over it its sentences,
    and a sentence over it token windows. Every unit holds at most max_tokens tokens."""
    units: list[_Unit] = []
    for para, para_start in _paragraphs(text):
        n = _count(para)
        if n <= max_tokens:
            units.append(_Unit(para, n, _PARAGRAPH_SEP, 1, para_start))
            continue
        sep = _PARAGRAPH_SEP  # before the next unit
        for line_sep, line, line_start in _pieces(para, _LINE_BREAK):
            sep += line_sep
            for sentence_sep, sentence, sentence_start in _pieces(line, _SENTENCE_BREAK):
                sep += sentence_sep
                start = para_start + line_start + sentence_start
                n = _count(sentence)
                if n <= max_tokens:
                    units.append(_Unit(sentence, n, sep, _join_cost(sep), start))
                    sep = ""
                    continue
                for window, wn in _windows(sentence, max_tokens):
                    if window.strip():
                        units.append(_Unit(window, wn, sep, _join_cost(sep), start))
                        sep = ""
                    start += len(window)
    return units


def _key(unit: _Unit) -> float:
    """The unit's weight in the race for a cut: log(u) / tokens, u uniform from the text hash."""
    u = (int(hashlib.md5(unit.text.encode("utf-8")).hexdigest()[:13], 16) + 0.5) / 16**13
    return math.log(u) / unit.tokens


def _content_cuts(units: list[_Unit], keys: list[float], min_tokens: int) -> list[int]:
    """Indices i such that a chunk ends after units[i]: units whose key beats the key of every unit
    with at most min_tokens tokens between the two (so neighbours always compete), and that lie at
    least min_tokens tokens from both ends of the document."""
    starts, ends = [], []
    pos = 0
    for i, u in enumerate(units):
        pos += u.join if i else 0
        starts.append(pos)
        pos += u.tokens
        ends.append(pos)
    cuts = []
    for i, key in enumerate(keys):
        if ends[i] < min_tokens or pos - ends[i] < min_tokens:
            continue
        j = i - 1
        while j >= 0 and starts[i] - ends[j] <= min_tokens and keys[j] < key:
            j -= 1
        if j >= 0 and starts[i] - ends[j] <= min_tokens:
            continue  # beaten (or tied) by an earlier unit
        j = i + 1
        while j < len(units) and starts[j] - ends[i] <= min_tokens and keys[j] < key:
            j += 1
        if j < len(units) and starts[j] - ends[i] <= min_tokens:
            continue  # beaten (or tied) by a later unit
        cuts.append(i)
    return cuts


def _split_stretch(sizes: list[int], keys: list[float], max_tokens: int, min_tokens: int) -> list[int]:
    """Ends (exclusive) of the pieces of a stretch without content cuts (sizes include the joins).

    While the rest holds more than max_tokens, a piece ends after the best-keyed unit (the later one
    on a tie) whose end lies max_tokens - min_tokens to max_tokens tokens into the piece, or with no
    unit ending there, after the last one that fits. A choice depends only on the text from the
    piece's start, so a stretch that grows at its end keeps its pieces; and every other candidate
    is within min_tokens of the chosen unit and cannot beat it, so appended text can never turn one
    of them into a content cut.
    """
    ends: list[int] = []
    start = 0
    remaining = sum(sizes)
    while remaining > max_tokens and len(sizes) - start > 1:
        best, best_key, fits = -1, -math.inf, start
        done = 0
        for i in range(start, len(sizes) - 1):
            done += sizes[i]
            if done > max_tokens and i > start:
                break
            fits = i
            if done >= max_tokens - min_tokens and keys[i] >= best_key:
                best, best_key = i, keys[i]
        cut = (best if best >= 0 else fits) + 1
        remaining -= sum(sizes[start:cut])
        ends.append(cut)
        start = cut
    ends.append(len(sizes))
    return ends


def _groups(units: list[_Unit], max_tokens: int, min_tokens: int) -> list[list[_Unit]]:
    """Units grouped into chunk bodies: content cuts, long stretches split (see the module doc)."""
    if not units:
        return []
    keys = [_key(u) for u in units]
    bounds = [i + 1 for i in _content_cuts(units, keys, min_tokens)]
    if not bounds or bounds[-1] != len(units):
        bounds.append(len(units))
    groups = []
    start = 0
    for stop in bounds:
        stretch = units[start:stop]
        sizes = [u.tokens + (u.join if i else 0) for i, u in enumerate(stretch)]
        lo = 0
        for hi in _split_stretch(sizes, keys[start:stop], max_tokens, min_tokens):
            groups.append(stretch[lo:hi])
            lo = hi
        start = stop
    return groups


def _body(group: list[_Unit]) -> str:
    return group[0].text + "".join(u.sep + u.text for u in group[1:])


def _fit(group: list[_Unit], max_tokens: int) -> list[tuple[str, list[int], int, int]]:
    """(body, its token ids, its start and end offsets in the document) for the group, halved in the
    rare case that joining units made the body longer than the sum of their counts allowed for."""
    body = _body(group)
    ids = encoding().encode(body, disallowed_special=())
    if len(ids) <= max_tokens or len(group) == 1:
        return [(body, ids, group[0].start, group[-1].start + len(group[-1].text))]
    half = len(group) // 2
    return _fit(group[:half], max_tokens) + _fit(group[half:], max_tokens)


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


def chunk_text(
    text: str,
    max_tokens: int = setting_default("GRAPHRAG_CHUNK_TOKENS"),
    overlap: int = setting_default("GRAPHRAG_CHUNK_OVERLAP"),
    min_tokens: int | None = None,
) -> list[Chunk]:
    """Chunks of at most max_tokens (+ overlap from the previous chunk's tail).

    min_tokens (default 0.3 x max_tokens) is the reach of the window a unit must win to end a
    chunk, so the least size of a chunk between two content cuts; those fall ~2 x min_tokens apart.
    """
    if max_tokens <= 0:
        raise ValueError("max_tokens must be positive")
    overlap = max(0, min(overlap, max_tokens // 2))
    min_tokens = round(_MIN_FRACTION * max_tokens) if min_tokens is None else min_tokens
    min_tokens = max(1, min(min_tokens, max_tokens // 2))
    groups = _groups(_split_units(text, max_tokens), max_tokens, min_tokens)
    bodies = [piece for group in groups for piece in _fit(group, max_tokens)]
    chunks: list[Chunk] = []
    previous_tail = ""
    for position, (body, ids, start, end) in enumerate(bodies):
        chunk = (previous_tail + "\n\n" + body) if previous_tail else body
        n = _count(chunk)
        if n > max_tokens + overlap:  # the tail and body merged into more tokens than counted
            chunk, n = body, len(ids)
        chunks.append(Chunk(chunk_id(chunk), position, chunk, n, start, end))
        previous_tail = _tail(ids, overlap)
    return chunks
