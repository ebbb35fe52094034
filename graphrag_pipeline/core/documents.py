"""Reading the corpus: which files are documents, their partition keys, and their text.

Bad files never raise: each read returns a `DocumentText` whose `status` says what happened
(ok, truncated, empty, binary, undecodable, unreadable) with a human-readable message.
"""

from __future__ import annotations

import codecs
import hashlib
import re
import unicodedata
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

SUPPORTED_SUFFIXES = {".txt": "text", ".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html"}
DEFAULT_MAX_BYTES = 20 * 1024 * 1024
_SAFE = re.compile(r"[^\w.\-]", re.UNICODE)


@dataclass(frozen=True)
class CorpusFile:
    key: str  # partition key
    relpath: str  # path relative to the corpus, with "/" separators
    path: Path


def partition_key(relpath: str) -> str:
    """A stable, storage-safe partition key for a corpus-relative path.

    Folders become `--`; characters outside letters, digits, `.`, `_`, `-` become `_`. When that
    mapping loses information (a replaced character, `--` already in the name, a `-` next to a
    folder separator as in `a-/b` vs `a/-b`, or a backslash) a short hash of the original path is
    appended, so two paths never share a key and a key never changes. Keys longer than 120 UTF-8
    bytes are cut and hashed too: a key is part of file names, which are limited to 255 bytes.
    """
    original = unicodedata.normalize("NFC", relpath).strip("/")
    relpath = unicodedata.normalize("NFC", relpath.replace("\\", "/")).strip("/")
    parts = [_SAFE.sub("_", p) for p in relpath.split("/")]
    key = "--".join(parts)
    lossy = (any(_SAFE.search(p) for p in relpath.split("/")) or "--" in relpath or "-/" in relpath
             or "/-" in relpath or "\\" in original or key.startswith("."))
    if lossy or len(key.encode("utf-8")) > 120:
        digest = hashlib.sha1(original.encode("utf-8")).hexdigest()[:8]
        head = key.encode("utf-8")[:110].decode("utf-8", errors="ignore")
        key = f"{head.lstrip('.')}~{digest}"
    return key


def scan_corpus(corpus: Path) -> list[CorpusFile]:
    """All supported files below `corpus`, sorted by relative path (hidden files and folders skipped)."""
    corpus = Path(corpus)
    if not corpus.is_dir():
        raise FileNotFoundError(f"corpus directory not found: {corpus}")
    files = []
    for path in corpus.rglob("*"):
        rel = path.relative_to(corpus)
        if any(part.startswith(".") for part in rel.parts):
            continue
        if path.suffix.lower() in SUPPORTED_SUFFIXES and path.is_file():
            relpath = rel.as_posix()
            files.append(CorpusFile(partition_key(relpath), relpath, path))
    files.sort(key=lambda f: f.relpath)
    return files


def file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:32]


@dataclass
class DocumentText:
    text: str
    status: str  # ok | truncated | empty | binary | undecodable | unreadable
    message: str
    encoding: str = ""
    size_bytes: int = 0

    @property
    def usable(self) -> bool:
        return self.status in ("ok", "truncated") and bool(self.text.strip())


def read_document(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> DocumentText:
    """Read one corpus file into plain text, never raising on bad content."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        return DocumentText("", "unreadable", f"cannot read {path.name}: {exc.strerror or exc}")
    truncated = len(raw) > max_bytes
    raw = raw[:max_bytes]
    if not raw.strip():
        return DocumentText("", "empty", f"{path.name} is empty", size_bytes=size)
    text, encoding = _decode(raw, truncated)
    if text is None:
        reason = encoding
        return DocumentText("", reason, f"{path.name} skipped: {'binary content' if reason == 'binary' else 'cannot determine its text encoding'}", size_bytes=size)
    kind = SUPPORTED_SUFFIXES.get(path.suffix.lower(), "text")
    if kind == "html":
        text = html_to_text(text)
    elif kind == "markdown":
        text = markdown_to_text(text)
    text = _normalise_text(text)
    if not text.strip():
        return DocumentText("", "empty", f"{path.name} has no text", encoding, size)
    if truncated:
        return DocumentText(text, "truncated", f"{path.name} is {size:,} bytes; only the first {max_bytes:,} bytes were read", encoding, size)
    return DocumentText(text, "ok", "", encoding, size)


def _decode(raw: bytes, truncated: bool) -> tuple[str | None, str]:
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            # final=False when truncated: a cut code unit or surrogate pair at the end is dropped
            return codecs.getincrementaldecoder("utf-16")().decode(raw, final=not truncated), "utf-16"
        except UnicodeDecodeError:
            pass
    if b"\x00" in raw[:8192]:
        return None, "binary"
    try:
        return raw.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError as exc:
        # a file cut in the middle of a multi-byte character is still UTF-8
        if truncated and exc.start >= len(raw) - 4:
            return raw[: exc.start].decode("utf-8-sig"), "utf-8"
    from charset_normalizer import from_bytes

    best = from_bytes(raw[:1 << 20]).best()
    if best is None or best.encoding is None:
        return None, "undecodable"
    text = raw.decode(best.encoding, errors="replace")
    if _control_ratio(text) > 0.05 or text.count("\ufffd") > max(10, len(text) // 100):
        return None, "undecodable"
    return text, best.encoding


def _control_ratio(text: str) -> float:
    sample = text[:20000]
    if not sample:
        return 0.0
    bad = sum(1 for ch in sample if unicodedata.category(ch) == "Cc" and ch not in "\n\r\t\f")
    return bad / len(sample)


def _normalise_text(text: str) -> str:
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch) != "Cc")
    text = re.sub(r"[ \t\f\v]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


class _TextExtractor(HTMLParser):
    # not "head": its end tag is optional, and then everything after it would be skipped; its only
    # text-bearing children are the title (kept) and script/style/noscript/template (skipped)
    _SKIP = {"script", "style", "noscript", "template", "svg"}
    _BLOCK = {"p", "div", "br", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "table",
              "section", "article", "blockquote", "pre", "header", "footer", "title", "dd", "dt"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip_depth = 0
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        if tag == "title" and not self._skip_depth:  # not an <svg><title> tooltip
            self._in_title = True
        elif tag in self._SKIP:
            self._skip_depth += 1
        if tag in self._BLOCK:
            self.parts.append("\n\n")

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        elif tag in self._SKIP and self._skip_depth:
            self._skip_depth -= 1
        if tag in self._BLOCK:
            self.parts.append("\n\n")

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        elif not self._skip_depth:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """Visible text of an HTML page, with block elements as paragraph breaks; the title first."""
    parser = _TextExtractor()
    try:
        parser.feed(html)
        parser.close()
    except Exception:  # malformed markup: keep whatever was parsed
        pass
    body = "".join(parser.parts)
    body = re.sub(r"[ \t]+", " ", body)
    body = re.sub(r"\n[ \t]+", "\n", body)
    title = re.sub(r"\s+", " ", parser.title).strip()
    return (title + "\n\n" + body) if title and title not in body[:500] else body


_MD_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MD_EMPH = re.compile(r"(\*\*|__|\*|`)(?=\S)(.+?)(?<=\S)\1")


def markdown_to_text(md: str) -> str:
    """Markdown reduced to prose: headings, emphasis, links and code fences lose their markup."""
    lines = []
    for line in md.split("\n"):
        s = line.rstrip()
        if s.strip().startswith("```"):
            continue
        s = re.sub(r"^\s{0,3}#{1,6}\s*", "", s)
        s = re.sub(r"^\s*>\s?", "", s)
        s = re.sub(r"^\s*[-*+]\s+", "", s)
        s = _MD_LINK.sub(r"\1", s)
        s = _MD_EMPH.sub(r"\2", s)
        lines.append(s)
    return "\n".join(lines)
