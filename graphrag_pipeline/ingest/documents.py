"""Reading the corpus: which files are documents, their partition keys, and their text.

Bad files never raise: each read returns a `DocumentText` whose `status` says what happened
(ok, truncated, empty, binary, undecodable, unreadable; for PDF, DOCX, PPTX and XLSX also
encrypted, no_text, corrupt, too_large) with a human-readable message.
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import os
import re
import stat
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from graphrag_pipeline.settings import default as setting_default
from graphrag_pipeline.storage.files import file_sha256

SUPPORTED_SUFFIXES = {
    ".txt": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    # converted by ingest/formats.py, never through the text decoder
    ".pdf": "pdf",
    ".docx": "docx",
    ".pptx": "pptx",
    ".xlsx": "xlsx",
}
_CONVERTED = {"pdf", "docx", "pptx", "xlsx"}
DEFAULT_MAX_BYTES = setting_default("GRAPHRAG_MAX_DOCUMENT_BYTES")
_SAFE = re.compile(r"[^\w.\-]", re.UNICODE)


class _LazyPath:
    """CorpusFile.path, made from `fspath` when first read if it was given as None: a corpus is
    listed on every build, and a Path per file would cost more than the rest of the listing."""

    def __get__(self, obj, cls=None):
        if obj is None:
            raise AttributeError("path")  # no default: the field stays required
        path = obj._path
        if path is None and obj.fspath:
            path = Path(obj.fspath)
            object.__setattr__(obj, "_path", path)  # frozen, but this is the same value
        return path

    def __set__(self, obj, value):
        object.__setattr__(obj, "_path", value)


@dataclass(frozen=True)
class CorpusFile:
    key: str  # partition key
    relpath: str  # path relative to the corpus, with "/" separators, as text for display (always valid UTF-8)
    path: Path = _LazyPath()  # the real path (an undecodable name keeps its bytes here)
    # the same path as a string, when known: a corpus is stat-ed on every build, and a pathlib path
    # formats itself anew for each system call
    fspath: str = field(default="", compare=False, repr=False)


_KEY_HEAD_BYTES = 110  # a key is part of file names, which are limited to 255 bytes
_RAW_HEAD_BYTES = 100


def _head(key: str, limit: int) -> str:
    return key.encode("utf-8")[:limit].decode("utf-8", errors="ignore").lstrip(".")


def _raw_bytes(relpath: str) -> bytes:
    """The bytes of a corpus-relative path as the file system holds them."""
    try:
        return os.fsencode(relpath)
    except UnicodeEncodeError:  # a surrogate that is not an escaped byte: not from the file system
        return relpath.encode("utf-8", "surrogatepass")


def _is_text(relpath: str) -> bool:
    try:
        relpath.encode("utf-8")
        return True
    except UnicodeEncodeError:  # surrogate escapes: the name's bytes are not UTF-8
        return False


def display_path(relpath: str) -> str:
    """A path as valid UTF-8 text: bytes of a name that are not UTF-8 (surrogate escapes) are shown
    as `\\xNN`, so two such names still read differently."""
    if _is_text(relpath):
        return relpath
    try:
        raw = relpath.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = relpath.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", errors="backslashreplace")


def _raw_key(relpath: str) -> str:
    """The key of a name told apart by its bytes: the readable part, `~`, 16 hex digits of the
    SHA-256 of the raw path. Never equal to a `partition_key` of a UTF-8 name, whose hash (if
    any) has 8 digits."""
    readable = unicodedata.normalize("NFC", relpath.replace("\\", "/")).strip("/")
    key = "--".join(_SAFE.sub("_", p) for p in readable.split("/"))
    digest = hashlib.sha256(_raw_bytes(relpath)).hexdigest()[:16]
    return f"{_head(key, _RAW_HEAD_BYTES)}~{digest}"


# a path whose key is itself with `/` as `--` (what partition_key's general rule gives it): ASCII
# letters, digits, `.`, `_`, `-` in non-empty parts not starting with `.`, no `--`, `-/` or `/-`,
# a key of at most 120 bytes. Such paths (nearly every corpus's) skip normalising and the regex
# replacement: a corpus is keyed on every build
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*(?:/[A-Za-z0-9_-][A-Za-z0-9._-]*)*")
_LOSSY_PLAIN = re.compile(r"--|-/|/-")


def partition_key(relpath: str) -> str:
    """A stable, storage-safe partition key for a corpus-relative path.

    Folders become `--`; characters outside letters, digits, `.`, `_`, `-` become `_`. When that
    mapping loses information (a replaced character, `--` already in the name, a `-` next to a
    folder separator as in `a-/b` vs `a/-b`, or a backslash) a short hash of the original path is
    appended, so two paths never share a key and a key never changes. Keys longer than 120 UTF-8
    bytes are cut and hashed too: a key is part of file names, which are limited to 255 bytes.

    A name whose bytes are not UTF-8 (it reaches Python with surrogate escapes) gets `~` and 16
    hex digits of the SHA-256 of its raw bytes. Names are compared in Unicode NFC here, so the NFC
    and NFD spellings of a name give the same key: when both are in one corpus, `corpus_keys`
    (which `scan_corpus` uses) gives the one not in NFC a key of its own.
    """
    if len(relpath) + relpath.count("/") <= 120 and _PLAIN_PATH.fullmatch(relpath) and not _LOSSY_PLAIN.search(relpath):
        return relpath.replace("/", "--")
    if not _is_text(relpath):
        return _raw_key(relpath)
    original = unicodedata.normalize("NFC", relpath).strip("/")
    relpath = unicodedata.normalize("NFC", relpath.replace("\\", "/")).strip("/")
    parts = [_SAFE.sub("_", p) for p in relpath.split("/")]
    key = "--".join(parts)
    lossy = (
        any(_SAFE.search(p) for p in relpath.split("/"))
        or "--" in relpath
        or "-/" in relpath
        or "/-" in relpath
        or "\\" in original
        or key.startswith(".")
    )
    if lossy or len(key.encode("utf-8")) > 120:
        digest = hashlib.sha1(original.encode("utf-8")).hexdigest()[:8]
        key = f"{_head(key, _KEY_HEAD_BYTES)}~{digest}"
    return key


def corpus_keys(relpaths: Iterable[str]) -> dict[str, str]:
    """The partition key of every path of one corpus, all distinct.

    Each path gets `partition_key(path)`, unless another path of the corpus has the same key (the
    same name spelled in NFC and in NFD, e.g. "é.txt" as U+00E9 or as "e" + U+0301). Then the
    spelling in NFC keeps the key and each other spelling gets a key from a hash of its raw bytes
    (as an undecodable name does). So every key a name had before stays, and a name's key changes
    only while a twin spelled differently sits beside it."""
    relpaths = list(dict.fromkeys(relpaths))
    first = {rel: partition_key(rel) for rel in relpaths}
    if len(set(first.values())) == len(first):  # no twins (nearly every corpus): no list per key
        return first
    groups: dict[str, list[str]] = {}
    for rel in relpaths:
        groups.setdefault(first[rel], []).append(rel)
    keys: dict[str, str] = {}
    taken = set(groups)
    for key, members in groups.items():
        if len(members) == 1:
            keys[members[0]] = key
            continue
        members = sorted(members, key=_raw_bytes)
        canonical = [r for r in members if _is_text(r) and unicodedata.is_normalized("NFC", r)]
        keeper = canonical[0] if canonical else None
        for rel in members:
            if rel == keeper:
                keys[rel] = key
                continue
            other = _raw_key(rel)
            n = 0
            while other in taken:  # two raw hashes alike in 64 bits: not expected, but never share
                n += 1
                other = f"{_raw_key(rel)[:-16]}{hashlib.sha256(_raw_bytes(rel) + bytes([n])).hexdigest()[:16]}"
            taken.add(other)
            keys[rel] = other
    return keys


# errors pathlib's is_file() treats as "not a file" (a dangling or looping symlink, a vanished
# entry); any other error (e.g. permission denied on a symlink's target) is raised, as it did
_NOT_A_FILE = {errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP}


def _is_file(entry: os.DirEntry) -> bool:
    try:
        return entry.is_file()
    except OSError as exc:
        if exc.errno in _NOT_A_FILE:
            return False
        raise


def _supported_files(root: str) -> list[str]:
    """Relative paths (with `/`) of the supported files below `root`, hidden names and symlinked
    folders skipped (as `Path.rglob` does), sub-folders that cannot be opened skipped. os.scandir
    tells files from folders without a stat per entry: a corpus is listed on every build. An entry
    that cannot be examined raises (never a silently shorter listing: the plan would delete the
    documents left out)."""
    found: list[str] = []
    todo = [""]
    while todo:
        rel_dir = todo.pop()
        try:
            entries = os.scandir(os.path.join(root, rel_dir) if rel_dir else root)
        except (PermissionError, NotADirectoryError, FileNotFoundError):
            if not rel_dir:
                raise
            continue
        with entries:
            for entry in entries:
                name = entry.name
                if name.startswith("."):
                    continue
                rel = f"{rel_dir}/{name}" if rel_dir else name
                if entry.is_dir(follow_symlinks=False):
                    todo.append(rel)
                    continue
                dot = name.rfind(".")  # os.path.splitext's suffix of a name not starting with "."
                if dot > 0 and name[dot:].lower() in SUPPORTED_SUFFIXES and _is_file(entry):
                    found.append(rel)
    return found


def scan_corpus(corpus: Path) -> list[CorpusFile]:
    """All supported files below `corpus`, sorted by relative path (hidden files and folders skipped).

    Every file gets a key of its own (see `corpus_keys`), also when its name is not UTF-8: its
    `relpath` is then shown with `\\xNN` escapes and `path` keeps the real name for reading."""
    corpus = Path(corpus)
    if not corpus.is_dir():
        raise FileNotFoundError(f"corpus directory not found: {corpus}")
    root = os.fspath(corpus)
    found = _supported_files(root)
    keys = corpus_keys(found)
    # the raw bytes of the relative path break ties of equal display paths, as those of the full
    # path would (every path starts with the corpus); ASCII paths are their own display path and
    # bytes, in the same order
    prefix = os.path.join(root, "")  # + rel: os.path.join(root, rel), rel being relative
    if all(rel.isascii() for rel in found):
        # the path (made when first read, see _LazyPath) as a string only: a corpus is listed on every build
        return [CorpusFile(keys[rel], rel, None, prefix + rel) for rel in sorted(found)]
    order = sorted(found, key=lambda rel: (display_path(rel), _raw_bytes(rel)))
    return [CorpusFile(keys[rel], display_path(rel), None, prefix + rel) for rel in order]


_PLAIN_KEY = re.compile(r"[A-Za-z0-9._-]+")


def _plain_file(corpus: str, key: str) -> CorpusFile | None:
    """The corpus file of `key` found without listing the corpus, when that is certain: an ASCII
    key without a hash (`~`) names the path key.replace("--", "/") and no other (an ASCII name is
    already in NFC, so it keeps its key even beside a twin spelled differently). None when the key
    is not of that kind or the path is not a file `scan_corpus` would list (hidden part, unsupported
    suffix, a symlinked folder on the way)."""
    if not _PLAIN_KEY.fullmatch(key) or "---" in key:
        return None
    rel = key.replace("--", "/")
    parts = rel.split("/")
    if any(not p or p.startswith(".") for p in parts) or partition_key(rel) != key:
        return None
    if os.path.splitext(parts[-1])[1].lower() not in SUPPORTED_SUFFIXES:
        return None
    folder = corpus
    try:
        for part in parts[:-1]:
            folder = os.path.join(folder, part)
            if not stat.S_ISDIR(os.lstat(folder).st_mode):  # a symlinked folder is not descended into
                return None
        path = os.path.join(folder, parts[-1])
        if not os.path.isfile(path):
            return None
    except OSError:
        return None
    return CorpusFile(key, rel, Path(path))


def find_corpus_files(corpus: Path, keys: list[str]) -> dict[str, CorpusFile]:
    """The corpus files of `keys` (a key without a file is left out), as `scan_corpus` would name
    them. Keys whose file is certain are looked up directly; only when one is not is the corpus
    listed: an update of one document does not list a corpus of 50,000."""
    root = os.fspath(corpus)
    if not os.path.isdir(root):
        raise FileNotFoundError(f"corpus directory not found: {corpus}")
    found = {}
    for key in keys:
        f = _plain_file(root, key)
        if f is None:
            wanted = set(keys)
            return {f.key: f for f in scan_corpus(corpus) if f.key in wanted}
        found[key] = f
    return found


def file_hash(path: Path) -> str:
    """The content hash of a corpus file (SHA-256, 32 hex digits)."""
    return file_sha256(path)[:32]


@dataclass
class DocumentText:
    text: str
    status: str  # ok|truncated|empty|binary|undecodable|unreadable|encrypted|no_text|corrupt|too_large
    message: str
    encoding: str = ""  # a converted format's name (pdf, docx, ...) for those
    size_bytes: int = 0
    sections: list = field(default_factory=list)  # formats.Section starts (pages, slides, sheets, headings)

    @property
    def usable(self) -> bool:
        return self.status in ("ok", "truncated") and bool(self.text.strip())


def read_document(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> DocumentText:
    """Read one corpus file into plain text, never raising on bad content."""
    path = Path(path)
    kind = SUPPORTED_SUFFIXES.get(path.suffix.lower(), "text")
    if kind in _CONVERTED:
        return _read_converted(path, kind, max_bytes)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        return DocumentText("", "unreadable", f"cannot read {display_path(path.name)}: {exc.strerror or exc}")
    truncated = len(raw) > max_bytes
    raw = raw[:max_bytes]
    if not raw.strip():
        return DocumentText("", "empty", f"{display_path(path.name)} is empty", size_bytes=size)
    text, encoding = _decode(raw, truncated)
    if text is None:
        reason = encoding
        return DocumentText(
            "",
            reason,
            f"{display_path(path.name)} skipped: "
            f"{'binary content' if reason == 'binary' else 'cannot determine its text encoding'}",
            size_bytes=size,
        )
    if kind == "html":
        text = html_to_text(text)
    elif kind == "markdown":
        text = markdown_to_text(text)
    text = normalise_text(text)
    if not text.strip():
        return DocumentText("", "empty", f"{display_path(path.name)} has no text", encoding, size)
    if truncated:
        return DocumentText(
            text,
            "truncated",
            f"{display_path(path.name)} is {size:,} bytes; only the first {max_bytes:,} bytes were read",
            encoding,
            size,
        )
    return DocumentText(text, "ok", "", encoding, size)


def _read_converted(path: Path, kind: str, max_bytes: int) -> DocumentText:
    """A PDF, DOCX, PPTX or XLSX file through its converter. `max_bytes` limits the extracted
    text (UTF-8 bytes), not the file: cutting a PDF's bytes would leave no readable file at all."""
    from graphrag_pipeline.ingest.formats import FormatError, convert

    name = display_path(path.name)
    try:
        size = path.stat().st_size
        converted = convert(path, kind, max_bytes)
    except FormatError as exc:
        return DocumentText("", exc.status, f"{name} skipped: {exc.reason}", kind, size)
    except OSError as exc:
        return DocumentText("", "unreadable", f"cannot read {name}: {exc.strerror or exc}")
    except Exception as exc:  # a converter library's own failure on a damaged file: the document is skipped
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        return DocumentText("", "corrupt", f"{name} skipped: cannot convert it ({reason})", kind, size)
    status, message = ("truncated", f"{name}: {converted.truncated}") if converted.truncated else ("ok", "")
    return DocumentText(converted.text, status, message, kind, size, converted.sections)


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
    # UTF-8 with a few broken bytes (a bad copy, a cut paste): its characters outnumber the broken
    # bytes, which become U+FFFD; a guessed single-byte code page would turn every character into
    # two (`Ã©` for `é`) and the broken bytes into letters (`ÿþ`, `яю`)
    mended = raw.decode("utf-8-sig", errors="replace")
    broken = mended.count("\ufffd") - raw.count("\ufffd".encode())
    if 0 < broken <= sum(1 for ch in mended if ch > "\x7f" and ch != "\ufffd"):
        return mended, "utf-8"
    from charset_normalizer import from_bytes

    best = from_bytes(raw[: 1 << 20]).best()
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


def normalise_text(text: str) -> str:
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch) != "Cc")
    text = re.sub(r"[ \t\f\v]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


class _TextExtractor(HTMLParser):
    # not "head": its end tag is optional, and then everything after it would be skipped; its only
    # text-bearing children are the title (kept) and script/style/noscript/template (skipped)
    _SKIP = {"script", "style", "noscript", "template", "svg"}
    _BLOCK = {
        "p",
        "div",
        "br",
        "li",
        "ul",
        "ol",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "tr",
        "table",
        "section",
        "article",
        "blockquote",
        "pre",
        "header",
        "footer",
        "title",
        "dd",
        "dt",
    }

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
