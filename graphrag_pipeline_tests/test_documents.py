"""Tests for graphrag_pipeline.ingest.documents: partition keys, corpus scanning, reading files."""

from __future__ import annotations

import hashlib
import random
import re
import unicodedata
from pathlib import Path

import pytest

from graphrag_pipeline.ingest.documents import (
    DocumentText,
    find_corpus_files,
    html_to_text,
    markdown_to_text,
    partition_key,
    read_document,
    scan_corpus,
)
from graphrag_pipeline.storage.files import atomic_path

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"

ZH_PARAGRAPH = (
    "郑和是明朝著名的航海家，他率领庞大的船队七次下西洋，到达了东南亚、南亚、西亚和东非的许多国家和地区。"
    "这些航行促进了中国与世界各国的经济文化交流，也留下了许多珍贵的航海记录。"
)

# a key may contain letters/digits (any script), ".", "_", "-" and the "~" before a hash
_KEY_CHARS = re.compile(r"^[\w.\-~]+$")


# ---------------------------------------------------------------------------------------------
# partition_key
# ---------------------------------------------------------------------------------------------


def test_partition_key_maps_folders_to_double_dash_and_is_stable():
    assert partition_key("a/b.txt") == "a--b.txt"
    assert partition_key("notes.md") == "notes.md"
    # the same path always yields the same key, whatever its spelling of separators/normal form
    assert partition_key("a/b.txt") == partition_key("/a/b.txt/")
    nfd = unicodedata.normalize("NFD", "café/résumé.txt")
    nfc = unicodedata.normalize("NFC", "café/résumé.txt")
    assert nfd != nfc and partition_key(nfd) == partition_key(nfc)


def test_partition_key_appends_hash_of_the_path_when_lossy():
    digest = hashlib.sha1(b"a--b.txt").hexdigest()[:8]
    assert partition_key("a--b.txt") == f"a--b.txt~{digest}"
    digest = hashlib.sha1(b"a b.txt").hexdigest()[:8]
    assert partition_key("a b.txt") == f"a_b.txt~{digest}"


def test_partition_key_of_plain_paths_follows_the_general_rule():
    """Plain ASCII paths take a short cut (no normalising, no replacement); it must give exactly the
    key the general rule gives, and leave every other path to that rule."""
    import graphrag_pipeline.ingest.documents as documents

    rng = random.Random(7)
    alphabet = "ab-_.Z9/"
    paths = ["a/b.txt", "x-y/z_1.md", "a.b/c.d", "a" * 119 + ".md", "a/" * 40 + "b.md", "-a/b", "_/x.txt"]
    paths += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 14))) for _ in range(3000)]
    paths += ["a" * n + "/b.txt" for n in range(100, 125)]
    general = documents._PLAIN_PATH
    taken = 0
    for path in paths:
        fast = partition_key(path)
        documents._PLAIN_PATH = re.compile(r"(?!)")  # never matches: the general rule alone
        try:
            assert fast == partition_key(path), path
        finally:
            documents._PLAIN_PATH = general
        taken += bool(general.fullmatch(path))
    assert 500 < taken < len(paths)  # both ways were exercised


def test_partition_key_is_injective_on_confusable_paths():
    paths = [
        "a/b.txt",
        "a--b.txt",
        "a_b.txt",
        "a b.txt",
        "a?b.txt",
        "a/b_txt",
        "a/b.txt.md",
        "a-/b.txt",
        "a/-b.txt",
        "a-/-b.txt",
        "a---b.txt",
        "a\\b.txt",
        "A/b.txt",
        "x/y/z.md",
        "x--y/z.md",
        "x/y--z.md",
        "x--y--z.md",
        "中文/文件.txt",
        "中文--文件.txt",
        "中文_文件.txt",
        "中文 文件.txt",
        ".hidden.txt",
        "_hidden.txt",
        "hidden.txt",
    ]
    keys = [partition_key(p) for p in paths]
    assert len(set(keys)) == len(paths), {
        k: [p for p in paths if partition_key(p) == k] for k in keys if keys.count(k) > 1
    }


@pytest.mark.parametrize(
    "relpath",
    [
        "a/b.txt",
        "dir with spaces/file (1).md",
        "../up.txt",
        "a/.b/c.txt",
        ".env.txt",
        "x:y*z?.html",
        "郑和/下西洋.txt",
        "emoji 😀/note.md",
        "tab\tname.txt",
        "a" * 300 + ".txt",
        "长" * 80 + ".txt",
    ],
    ids=[
        "plain",
        "spaces",
        "dotdot",
        "hidden-folder",
        "dotfile",
        "punctuation",
        "chinese",
        "emoji",
        "tab",
        "long-ascii",
        "long-chinese",
    ],
)
def test_partition_key_is_storage_safe(relpath, tmp_path):
    key = partition_key(relpath)
    assert "/" not in key and "\\" not in key
    assert not key.startswith(".")
    assert _KEY_CHARS.match(key), key
    assert len(key.encode("utf-8")) <= 120
    # usable as a file name with the longest suffix the store appends, written atomically
    with atomic_path(tmp_path / f"{key}.relations.parquet", ".parquet") as tmp:
        tmp.write_bytes(b"x")
    assert (tmp_path / f"{key}.relations.parquet").read_bytes() == b"x"


def test_partition_key_keeps_chinese_names_readable():
    assert partition_key("郑和/下西洋.txt") == "郑和--下西洋.txt"
    assert partition_key("印刷术与造纸.md") == "印刷术与造纸.md"


def test_partition_key_long_names_are_cut_hashed_and_distinct():
    a = "a" * 200 + "-one.txt"
    b = "a" * 200 + "-two.txt"
    ka, kb = partition_key(a), partition_key(b)
    assert ka != kb
    assert ka.startswith("a" * 100) and re.search(r"~[0-9a-f]{8}$", ka)
    assert len(ka) <= 120
    # a long Chinese name is measured in UTF-8 bytes (file names are limited to 255 bytes)
    za, zb = "长" * 80 + "一.txt", "长" * 80 + "二.txt"
    kza, kzb = partition_key(za), partition_key(zb)
    assert kza != kzb
    assert len(kza.encode("utf-8")) <= 120 and kza.startswith("长" * 30)
    assert "\ufffd" not in kza


# ---------------------------------------------------------------------------------------------
# scan_corpus
# ---------------------------------------------------------------------------------------------


def _touch(root: Path, rel: str, text: str = "x") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_scan_corpus_skips_hidden_and_unsupported_and_sorts(tmp_path):
    for rel in [
        "b.md",
        "a.txt",
        "sub/z.txt",
        "sub/deeper/y.html",
        "c.markdown",
        "d.htm",
        "E.TXT",
        ".hidden.txt",
        ".git/config.txt",
        "sub/.secret/x.md",
        "notes.pdf",
        "slides.PPTX",
        "old.doc",
        "image.png",
        "README",
        "data.json",
    ]:
        _touch(tmp_path, rel)
    (tmp_path / "folder.txt").mkdir()  # a directory with a supported suffix is not a document
    files = scan_corpus(tmp_path)
    rels = [f.relpath for f in files]
    expected = ["E.TXT", "a.txt", "b.md", "c.markdown", "d.htm", "notes.pdf", "slides.PPTX", "sub/deeper/y.html"]
    assert rels == sorted([*expected, "sub/z.txt"])
    for f in files:
        assert f.key == partition_key(f.relpath)
        assert f.path == tmp_path / f.relpath and f.path.is_file()


def test_scan_corpus_missing_directory_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        scan_corpus(tmp_path / "nope")


def test_scan_corpus_of_empty_directory_is_empty(tmp_path):
    assert scan_corpus(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# read_document
# ---------------------------------------------------------------------------------------------


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_read_plain_utf8(tmp_path):
    doc = read_document(_write(tmp_path, "a.txt", b"Hello world.\r\n\r\n\r\n\r\nSecond  para.\n"))
    assert doc.status == "ok" and doc.usable and doc.message == ""
    assert doc.text == "Hello world.\n\nSecond  para."
    assert doc.encoding == "utf-8"


@pytest.mark.parametrize("data", [b"", b"   \n\t \r\n  "])
def test_read_empty_and_whitespace_only(tmp_path, data):
    doc = read_document(_write(tmp_path, "e.txt", data))
    assert doc.status == "empty" and doc.text == "" and not doc.usable
    assert "e.txt" in doc.message


def test_read_missing_file_is_unreadable_not_an_exception(tmp_path):
    doc = read_document(tmp_path / "missing.txt")
    assert doc.status == "unreadable" and not doc.usable and "missing.txt" in doc.message


def test_read_binary_png_header(tmp_path):
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00\x00\x00\x01\x00\x08\x06" + bytes(range(256))
    doc = read_document(_write(tmp_path, "image.txt", png))
    assert doc.status == "binary" and doc.text == "" and not doc.usable
    assert "binary" in doc.message


@pytest.mark.parametrize("seed", range(5))
def test_read_undecodable_high_bytes(tmp_path, seed):
    rng = random.Random(seed)
    data = bytes(rng.randrange(0x80, 0x100) for _ in range(4000))
    assert b"\x00" not in data
    doc = read_document(_write(tmp_path, "noise.txt", data))
    assert doc.status == "undecodable" and doc.text == "" and not doc.usable
    assert "encoding" in doc.message


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be"])
def test_read_utf16_with_bom(tmp_path, codec):
    text = "Hello 世界\nSecond line with émoji 😀"
    data = text.encode(codec)
    if codec != "utf-16":  # these codecs write no BOM themselves
        data = ("\ufeff" + text).encode(codec)
    doc = read_document(_write(tmp_path, "u16.txt", data))
    assert doc.status == "ok" and doc.encoding == "utf-16"
    assert doc.text == text


def test_read_truncated_utf16_cut_inside_a_code_unit_or_surrogate_pair(tmp_path):
    text = "Hello 世界 😀 " * 20
    data = text.encode("utf-16")  # BOM + UTF-16-LE
    path = _write(tmp_path, "u16.txt", data)
    emoji_at = data.index("😀".encode("utf-16-le"))
    for max_bytes in (101, emoji_at + 2, emoji_at + 3):  # odd length; half a surrogate pair
        doc = read_document(path, max_bytes=max_bytes)
        assert doc.status == "truncated", (max_bytes, doc)
        assert text.startswith(doc.text) and len(doc.text) > 5
        assert "\ufffd" not in doc.text


def test_read_utf8_with_bom(tmp_path):
    doc = read_document(_write(tmp_path, "bom.md", "\ufeff# Title\n\nBody text.".encode("utf-8")))
    assert doc.status == "ok"
    assert doc.text == "Title\n\nBody text."
    assert "\ufeff" not in doc.text


@pytest.mark.parametrize("codec", ["gb18030", "gbk"])
def test_read_gb_encoded_chinese(tmp_path, codec):
    data = ZH_PARAGRAPH.encode(codec)
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")  # really not UTF-8: the charset detector must do the work
    doc = read_document(_write(tmp_path, "zh.txt", data))
    assert doc.status == "ok"
    assert doc.text == ZH_PARAGRAPH
    assert doc.encoding.lower().replace("_", "") in {"gb18030", "gbk", "gb2312"}


def test_read_larger_than_max_bytes_is_truncated(tmp_path):
    data = ("word " * 1000).encode()
    doc = read_document(_write(tmp_path, "big.txt", data), max_bytes=1000)
    assert doc.status == "truncated" and doc.usable
    assert len(doc.text.encode()) <= 1000 and len(doc.text) >= 990
    assert ("word " * 1000).startswith(doc.text)
    assert f"{len(data):,}" in doc.message and "1,000" in doc.message
    assert doc.size_bytes == len(data)


def test_utf8_with_a_few_broken_bytes_stays_utf8_and_other_code_pages_are_still_guessed(tmp_path):
    text = "Ein schönes Café in Zürich, naïve façade: größer als gedacht. " * 20
    data = text.encode() + b"broken \xff\xfe and \x80\x81 bytes\n" + text.encode()
    doc = read_document(_write(tmp_path, "mostly.txt", data))
    assert doc.status == "ok" and doc.encoding == "utf-8"
    assert doc.text.count("schönes Café") == 40 and "broken \ufffd\ufffd and \ufffd\ufffd bytes" in doc.text
    # a legacy code page has no UTF-8 characters to outnumber its bytes: it is still detected
    legacy = ("Привет, мир. Это обычный текст в кодировке Windows-1251. " * 20).encode("cp1251")
    doc = read_document(_write(tmp_path, "ru.txt", legacy))
    assert doc.status == "ok" and doc.text.startswith("Привет, мир.") and "\ufffd" not in doc.text


def test_read_truncated_in_the_middle_of_a_multibyte_character(tmp_path):
    path = _write(tmp_path, "cut.txt", ("ab" + "é" * 10).encode())
    doc = read_document(path, max_bytes=5)  # a b c3 a9 c3|a9
    assert doc.status == "truncated" and doc.text == "abé"
    zh = "中文" * 100
    doc = read_document(_write(tmp_path, "zh.txt", zh.encode()), max_bytes=100)  # 33 chars + 1 byte
    assert doc.status == "truncated" and doc.text == zh[:33]
    assert "\ufffd" not in doc.text


HTML = """<!DOCTYPE html>
<html><head>
<meta charset="utf-8">
<title>Babbage &amp; Lovelace</title>
<style>.x { color: red } STYLE_TEXT</style>
<script>var SCRIPT_TEXT = "<p>not a paragraph</p>";</script>
</head>
<body>
<!-- COMMENT_TEXT -->
<h1>The Analytical Engine</h1>
<p>Ada &amp; Charles wrote about 5 &lt; 6 &eacute;l&eacute;gant &#8212; engines.</p>
<noscript>NOSCRIPT_TEXT</noscript>
<ul><li>first item</li><li>second item</li></ul>
</body></html>
"""


def test_html_drops_script_style_head_and_decodes_entities(tmp_path):
    doc = read_document(_write(tmp_path, "page.html", HTML.encode()))
    assert doc.status == "ok"
    for hidden in (
        "STYLE_TEXT",
        "SCRIPT_TEXT",
        "not a paragraph",
        "COMMENT_TEXT",
        "NOSCRIPT_TEXT",
        "color: red",
        "charset",
        "<",
        ">",
    ):
        assert hidden not in doc.text.replace("5 < 6", ""), hidden
    assert doc.text.split("\n\n")[0] == "Babbage & Lovelace"  # the title comes first
    assert "Ada & Charles wrote about 5 < 6 élégant \u2014 engines." in doc.text
    paragraphs = doc.text.split("\n\n")
    assert "The Analytical Engine" in paragraphs and "first item" in paragraphs and "second item" in paragraphs


def test_html_with_omitted_head_end_tag_keeps_the_body():
    # </head> and <body> are optional in HTML
    text = html_to_text("<html><head><title>T</title><meta charset=utf-8><body><p>Body text</p></body></html>")
    assert "Body text" in text
    text = html_to_text("<!doctype html><title>Only a title</title><p>para one<p>para two")
    assert text.split() == ["Only", "a", "title", "para", "one", "para", "two"]


def test_html_title_is_not_repeated_when_the_body_starts_with_it():
    text = html_to_text("<title>Same</title><h1>Same</h1><p>x</p>")
    assert text.count("Same") == 1


def test_html_svg_title_is_not_the_page_title():
    text = html_to_text("<title>Page</title><p>Search <svg><title>magnifier icon</title></svg> here</p>")
    assert "magnifier" not in text
    assert text.startswith("Page\n")


def test_markdown_markup_is_removed(tmp_path):
    md = (
        "# Heading One\n\n"
        "### Sub *heading*\n\n"
        "Some **bold**, *emphasis*, __strong__ and `code` with a [link text](https://example.com/x) "
        "and an ![alt text](img.png).\n\n"
        "> quoted line\n\n"
        "- item one\n* item two\n\n"
        "```python\nprint('x')\n```\n"
    )
    doc = read_document(_write(tmp_path, "n.md", md.encode()))
    assert doc.status == "ok"
    lines = doc.text.split("\n")
    assert lines[0] == "Heading One"
    assert "Sub heading" in lines
    assert "Some bold, emphasis, strong and code with a link text and an alt text." in lines
    assert "quoted line" in lines and "item one" in lines and "item two" in lines
    assert "print('x')" in lines
    for markup in ("#", "**", "__", "`", "](", "https://example.com", "> ", "- item", "* item", "```"):
        assert markup not in doc.text, markup


def test_markdown_to_text_keeps_plain_text_untouched():
    plain = "A plain line with snake_case and 3 * 4 = 12.\nSecond line."
    assert markdown_to_text(plain) == plain


def test_document_text_usable():
    assert DocumentText("x", "ok", "").usable
    assert DocumentText("x", "truncated", "m").usable
    assert not DocumentText("   ", "ok", "").usable
    assert not DocumentText("x", "binary", "m").usable


# ---------------------------------------------------------------------------------------------
# the sample corpus
# ---------------------------------------------------------------------------------------------


def test_sample_corpus_reads_cleanly():
    files = scan_corpus(CORPUS)
    rels = [f.relpath for f in files]
    assert len(files) >= 7
    assert any(r.endswith(".html") for r in rels)
    assert any(r.endswith(".md") for r in rels) and any(r.endswith(".txt") for r in rels)
    for f in files:
        doc = read_document(f.path)
        assert doc.status == "ok", (f.relpath, doc.message)
        assert len(doc.text) > 500
        assert "\ufffd" not in doc.text


def test_sample_html_drops_marked_style_and_script_blocks():
    html_files = [f for f in scan_corpus(CORPUS) if f.relpath.endswith((".html", ".htm"))]
    raw = html_files[0].path.read_text(encoding="utf-8")
    # the markers really are in the file, inside <style> and <script>
    assert "STYLE_BLOCK_SHOULD_BE_IGNORED" in raw and "SCRIPT_BLOCK_SHOULD_BE_IGNORED" in raw
    marked = [f for f in html_files if "STYLE_BLOCK_SHOULD_BE_IGNORED" in f.path.read_text(encoding="utf-8")]
    assert marked
    for f in marked:
        doc = read_document(f.path)
        assert doc.status == "ok"
        assert "SHOULD_BE_IGNORED" not in doc.text
        assert "Phantom Person" not in doc.text  # the script's string literal
        assert "font-family" not in doc.text
        assert "Charles Babbage" in doc.text


def test_sample_chinese_documents_decode():
    zh = [f for f in scan_corpus(CORPUS) if f.relpath.endswith(("_zh.txt", "_zh.md"))]
    assert len(zh) >= 2
    for f in zh:
        doc = read_document(f.path)
        assert doc.status == "ok"
        assert "郑和" in doc.text or "纸" in doc.text
        if f.relpath.endswith(".md"):
            assert not re.search(r"^#", doc.text, re.M)


def test_find_corpus_files_names_what_scan_corpus_names(tmp_path):
    corpus = tmp_path / "corpus"
    names = [
        "a.txt",
        "notes/b.md",
        "deep/er/c.html",
        "with space.txt",  # lossy: a hashed key, found by listing
        "dash-name.txt",
        "x--y.txt",  # "--" in the name: hashed
        "Kelvin.txt",
        "\u212aelvin.txt",  # KELVIN SIGN: NFC "Kelvin.txt", a twin of the ASCII name
        ".hidden/d.txt",
        "skip.doc",
        "caf\u00e9.txt",
    ]
    for n in names:
        p = corpus / n
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(n, encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "e.txt").write_text("e", encoding="utf-8")
    (corpus / "linked").symlink_to(elsewhere, target_is_directory=True)  # not descended into, like rglob
    scanned = {f.key: f for f in scan_corpus(corpus)}
    keys = sorted(scanned)
    for key in keys:  # one at a time: the direct lookup when the key allows it
        found = find_corpus_files(corpus, [key])
        assert found[key].relpath == scanned[key].relpath and found[key].path == scanned[key].path
    found = find_corpus_files(corpus, keys)  # some keys need the listing: all come from it
    assert {k: (f.relpath, f.path) for k, f in found.items()} == {k: (f.relpath, f.path) for k, f in scanned.items()}
    # keys of files scan_corpus does not list are not found either
    for ghost in (".hidden--d.txt", "linked--e.txt", "skip.doc", "missing.txt"):
        assert find_corpus_files(corpus, [ghost]) == {}
    assert "Kelvin.txt" in scanned and scanned["Kelvin.txt"].relpath == "Kelvin.txt"


def test_scan_corpus_skips_a_looping_or_dangling_symlink_and_lists_the_rest_of_its_folder(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    for n in ("a.md", "c.md", "d.md", "e.md"):
        (corpus / "sub" / n).write_text(n, encoding="utf-8")
    (corpus / "sub" / "b.md").symlink_to("b.md")  # a symlink to itself: is_file() raises ELOOP
    (corpus / "sub" / "bb.md").symlink_to(tmp_path / "nowhere.md")  # dangling
    assert [f.relpath for f in scan_corpus(corpus)] == ["sub/a.md", "sub/c.md", "sub/d.md", "sub/e.md"]
