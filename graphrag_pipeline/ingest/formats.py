"""PDF, DOCX, PPTX and XLSX files to plain text, with where each page, slide, sheet or heading starts.

Libraries (see README "Document formats" for why): PDFium through `pypdfium2` for PDF (per-page
text, a clear password error, no Python PDF parser's slowness), `python-docx`, `python-pptx` and
`openpyxl` for the Office formats. They are imported when such a file is read, so a corpus of text
files never pays for them.

A file that cannot be converted raises `FormatError` with a status and a reason a user can act on:
`encrypted` (password-protected), `no_text` (pages but no text layer: a scanned PDF), `corrupt`
(not a valid file of its kind, e.g. a text file named `.pdf`, or a cut-off download),
`too_large` (a DOCX/PPTX/XLSX package that would unpack to more than `package_limit`: a zip bomb).
"""

from __future__ import annotations

import datetime as dt
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from graphrag_pipeline.ingest.documents import normalise_text

BINARY_FORMATS = {".pdf": "pdf", ".docx": "docx", ".pptx": "pptx", ".xlsx": "xlsx"}
_NAMES = {"pdf": "PDF", "docx": "DOCX", "pptx": "PPTX", "xlsx": "XLSX"}
# an OLE compound file: what an encrypted DOCX/PPTX/XLSX is (the package sits inside, encrypted)
_CFB_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# An Office package's XML is several times the text it carries (tags, run formatting, cell
# references: typically 5-20x), so a package may unpack to PACKAGE_FACTOR times the text limit;
# the floor keeps a small text limit from refusing ordinary files whose pictures count at their size.
PACKAGE_FACTOR = 32
PACKAGE_FLOOR = 64 * 1024 * 1024


class FormatError(Exception):
    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status  # encrypted | no_text | corrupt | too_large
        self.reason = reason


@dataclass(frozen=True)
class Section:
    start: int  # character offset in the document's text where it begins
    page: int | None  # 1-based page (PDF) or slide (PPTX)
    label: str | None  # sheet name (XLSX), heading (DOCX) or slide title (PPTX)


@dataclass
class Converted:
    text: str
    sections: list[Section]
    truncated: str = ""  # what the text limit left out, when it did


@dataclass
class _Builder:
    """The document's text built part by part: each part normalised on its own (so offsets stay
    exact), parts joined by a blank line, a section started whenever the page or label changes,
    and the text stopped at `max_bytes` UTF-8 bytes (a part is cut at a character boundary)."""

    max_bytes: int
    parts: list[str] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    length: int = 0
    size: int = 0
    full: bool = False

    def add(self, text: str, page: int | None = None, label: str | None = None) -> bool:
        """Adds a part; False once the limit is reached (the caller stops reading)."""
        if self.full:
            return False
        text = normalise_text(text)
        if not text:
            return True
        sep = "\n\n" if self.parts else ""
        room = self.max_bytes - self.size - len(sep)
        data = text.encode("utf-8")
        if len(data) > room:
            self.full = True
            text = data[: max(room, 0)].decode("utf-8", errors="ignore").rstrip()
            if not text:
                return False
        if not self.sections or (self.sections[-1].page, self.sections[-1].label) != (page, label):
            self.sections.append(Section(self.length + len(sep), page, label))
        self.parts.append(sep + text)
        self.length += len(sep) + len(text)
        self.size += len(sep) + len(text.encode("utf-8"))
        return not self.full

    def text(self) -> str:
        return "".join(self.parts)


def convert(path: Path, kind: str, max_bytes: int) -> Converted:
    """The text of a file of `kind` (a value of BINARY_FORMATS), at most `max_bytes` UTF-8 bytes
    of it. Raises FormatError for a file that has no usable text, OSError when it cannot be read."""
    _check_signature(Path(path), kind)
    if kind != "pdf":
        _check_package(Path(path), kind, max_bytes)
    out = _Builder(max_bytes)
    where = _READERS[kind](Path(path), out)
    truncated = ""
    if out.full:
        truncated = f"its text is over {max_bytes:,} bytes; only the first {max_bytes:,} were read ({where})"
    return Converted(out.text(), out.sections, truncated)


def _check_signature(path: Path, kind: str) -> None:
    """A file whose first bytes are not its format's: said before any library sees it."""
    with open(path, "rb") as fh:
        head = fh.read(1024)
    name = _NAMES[kind]
    if kind == "pdf":
        if b"%PDF-" not in head:
            raise FormatError("corrupt", f"not a valid PDF (no %PDF- header{_looks_like_text(head)})")
        return
    if head.startswith(_CFB_MAGIC):
        raise FormatError(
            "encrypted", f"password-protected (an encrypted {name} is an OLE container), or an old binary Office file"
        )
    if not head.startswith(b"PK"):
        raise FormatError("corrupt", f"not a valid {name} (not a ZIP package{_looks_like_text(head)})")


def package_limit(max_bytes: int) -> int:
    """How many bytes a DOCX/PPTX/XLSX may unpack to, for a text limit of `max_bytes`."""
    return max(PACKAGE_FACTOR * max_bytes, PACKAGE_FLOOR)


def _check_package(path: Path, kind: str, max_bytes: int) -> None:
    """Refuses a package whose parts would unpack to more than `package_limit` before any library
    opens it: python-docx and python-pptx load every part into memory, so a zip bomb (a few KB that
    inflate to gigabytes) would exhaust it. The sizes are those the ZIP directory declares; Python's
    zipfile never inflates a part beyond its declared size (and checks its CRC), so they are a bound
    on what the readers can get."""
    try:
        with zipfile.ZipFile(path) as package:
            total = sum(info.file_size for info in package.infolist())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        raise _corrupt(kind, exc, path) from None
    limit = package_limit(max_bytes)
    if total > limit:
        raise FormatError(
            "too_large",
            f"its {_NAMES[kind]} package would unpack to {total:,} bytes, over the {limit:,} allowed "
            f"({PACKAGE_FACTOR}x GRAPHRAG_MAX_DOCUMENT_BYTES, at least {PACKAGE_FLOOR // 2**20} MiB): a zip bomb?",
        )


def _looks_like_text(head: bytes) -> str:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return ""
    return "; it is a text file with a wrong name?" if head.strip() else ""


def _corrupt(kind: str, exc: BaseException, path: Path | None = None) -> FormatError:
    detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    if path is not None:  # the message names the file already; not its full path again
        detail = detail.replace(f"'{path}'", "the file").replace(str(path), "the file")
    return FormatError("corrupt", f"not a valid {_NAMES[kind]} ({detail})")


def _pdf(path: Path, out: _Builder) -> str:
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    try:
        pdf = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as exc:
        if getattr(exc, "err_code", None) == pdfium_c.FPDF_ERR_PASSWORD:
            raise FormatError("encrypted", "password-protected (the PDF needs a password to open)") from None
        raise _corrupt("pdf", exc) from None
    try:
        pages = len(pdf)
        if not pages:
            raise FormatError("corrupt", "not a valid PDF (it has no pages)")
        read = 0
        for i in range(pages):
            try:
                page = pdf[i]
                textpage = page.get_textpage()
                text = textpage.get_text_bounded()
                textpage.close()
                page.close()
            except pdfium.PdfiumError as exc:
                raise _corrupt("pdf", exc) from None
            read = i + 1
            if not out.add(text, page=i + 1):
                break
    finally:
        pdf.close()
    if not out.parts:
        raise FormatError("no_text", f"no text layer in its {pages} page(s): a scanned PDF? (no OCR is done)")
    return f"pages 1-{read} of {pages}"


def _docx(path: Path, out: _Builder) -> str:
    import docx
    from docx.table import Table

    try:
        document = docx.Document(str(path))
        blocks = list(document.iter_inner_content())
    except Exception as exc:  # python-docx raises KeyError, ValueError, lxml errors... for broken packages
        raise _corrupt("docx", exc, path) from None
    heading = None
    for block in blocks:
        if isinstance(block, Table):
            text = _table_text([[cell.text for cell in row.cells] for row in block.rows])
        else:
            text = block.text
            style = (block.style.name if block.style is not None else "") or ""
            if style.startswith("Heading") or style == "Title":
                heading = normalise_text(text).replace("\n", " ") or heading
        if not out.add(text, label=heading):
            break
    if not out.parts:
        raise FormatError("no_text", "no text in the document")
    return f"up to the section {heading!r}" if heading else "from the start"


def _table_text(rows: list[list[str]]) -> str:
    lines = []
    for row in rows:
        cells = [c.strip().replace("\n", " ") for c in dict.fromkeys(row)]  # merged cells repeat
        if any(cells):
            lines.append(" | ".join(cells))
    return "\n".join(lines)


def _shape_texts(shapes) -> list[str]:
    texts = []
    for shape in shapes:
        if shape.shape_type is not None and hasattr(shape, "shapes"):  # a group
            texts.extend(_shape_texts(shape.shapes))
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            texts.append(shape.text_frame.text)
        elif getattr(shape, "has_table", False) and shape.has_table:
            texts.append(_table_text([[cell.text for cell in row.cells] for row in shape.table.rows]))
    return texts


def _pptx(path: Path, out: _Builder) -> str:
    import pptx

    try:
        slides = list(pptx.Presentation(str(path)).slides)
    except Exception as exc:  # python-pptx raises KeyError, ValueError, lxml errors... for broken packages
        raise _corrupt("pptx", exc, path) from None
    read = 0
    for n, slide in enumerate(slides, 1):
        try:
            texts = _shape_texts(slide.shapes)
            if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
                texts.append(slide.notes_slide.notes_text_frame.text)
            title = slide.shapes.title.text if slide.shapes.title is not None else ""
        except Exception as exc:
            raise _corrupt("pptx", exc, path) from None
        read = n
        label = normalise_text(title).replace("\n", " ") or None
        if not out.add("\n\n".join(t for t in texts if t.strip()), page=n, label=label):
            break
    if not out.parts:
        raise FormatError("no_text", f"no text on its {len(slides)} slide(s)")
    return f"slides 1-{read} of {len(slides)}"


def _cell(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dt.datetime) and value.time() == dt.time():
        return value.date().isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return str(value)


def _xlsx(path: Path, out: _Builder) -> str:
    import openpyxl

    try:
        book = openpyxl.load_workbook(str(path), read_only=True, data_only=True)
    except Exception as exc:  # InvalidFileException, KeyError, BadZipFile, XML errors
        raise _corrupt("xlsx", exc, path) from None
    sheet = ""
    try:
        for ws in book.worksheets:
            sheet = ws.title
            lines = [ws.title]  # the sheet's name heads its first rows (the text names it too)
            rows = 0
            for row in ws.iter_rows(values_only=True):
                cells = [_cell(v).strip() for v in row if v is not None and str(v).strip()]
                if cells:
                    lines.append(" | ".join(cells))
                    rows += 1
                if len(lines) >= 50:  # a paragraph of rows at a time: chunks end between row groups
                    if not out.add("\n".join(lines), label=sheet):
                        return f"up to the sheet {sheet!r}"
                    lines = []
            if rows and lines and not out.add("\n".join(lines), label=sheet):
                return f"up to the sheet {sheet!r}"
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise _corrupt("xlsx", exc, path) from None
    finally:
        book.close()
    if not out.parts:
        raise FormatError("no_text", "no cells with values")
    return f"up to the sheet {sheet!r}"


_READERS = {"pdf": _pdf, "docx": _docx, "pptx": _pptx, "xlsx": _xlsx}
