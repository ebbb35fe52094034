"""Tests for graphrag_pipeline.ingest.chunking: token bounds, content-hash ids, edit stability."""

from __future__ import annotations

import math
import random
import re
import statistics
from pathlib import Path

import pytest

from graphrag_pipeline.ingest.chunking import chunk_id, chunk_text
from graphrag_pipeline.ingest.documents import read_document, scan_corpus
from graphrag_pipeline.ingest.tokens import count_tokens

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho "
    "sigma tau upsilon phi chi psi omega Newton Darwin London Cambridge"
).split()
# common English words, for prose with an ordinary number of tokens per word
VOCAB = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but "
    "have an they had one were their all we there been has more if will when who would so what about "
    "into than them can only other time new some could these two may first then do any like my now over "
    "such our man even most made after also did many before must through back years where much your way "
    "well down should because each just those people how too little state good very make world still "
    "own see men work long get here between both life being under never day same another know while last "
    "might us great old year off come since against go came right used take three river harbour council "
    "merchant voyage letter village garden winter library engine railway museum journey country history "
    "mountain island market window evening morning teacher captain doctor soldier painter writer"
).split()
DEFAULT_MAX, DEFAULT_OVERLAP = 2000, 100  # GRAPHRAG_CHUNK_TOKENS, GRAPHRAG_CHUNK_OVERLAP


def paragraphs(n: int, seed: int = 0, lo: int = 20, hi: int = 80) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))
        end = rng.choice([".", "", "!", ")", ""])  # some paragraphs end without punctuation
        out.append(f"Paragraph {i} {words}{end}")
    return out


def prose_paragraphs(n_tokens: int, seed: int, lo: int = 2, hi: int = 8) -> list[str]:
    """Paragraphs of lo-hi sentences of 6-24 common words, about n_tokens tokens in all."""
    rng = random.Random(seed)
    paras: list[str] = []
    total = 0
    while total < n_tokens:
        sentences = []
        for _ in range(rng.randint(lo, hi)):
            words = " ".join(rng.choice(VOCAB) for _ in range(rng.randint(6, 24)))
            sentences.append(words.capitalize() + rng.choice([".", ".", ".", "?", "!"]))
        paras.append(" ".join(sentences))
        total += count_tokens(paras[-1]) + 1
    return paras


def nano_windows(tokens: int) -> int:
    """How many chunks nano-graphrag makes of a document: 1,200-token windows, 100 tokens overlap."""
    return 1 if tokens <= 1200 else math.ceil((tokens - 100) / 1100)


def chinese_text() -> str:
    """The Chinese sample document as one block: no blank lines, no newlines."""
    return (CORPUS / "zheng_he_voyages_zh.txt").read_text(encoding="utf-8").replace("\n", "")


def squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


def assert_within_bounds(chunks, max_tokens: int, overlap: int) -> None:
    for c in chunks:
        n = count_tokens(c.text)
        assert c.tokens == n
        assert n <= max_tokens + overlap, (c.position, n)


def changed_ids(old, new) -> tuple[int, int]:
    """(new ids not in the old chunking, old ids gone from the new chunking)"""
    a, b = {c.id for c in old}, {c.id for c in new}
    return len(b - a), len(a - b)


# ---------------------------------------------------------------------------------------------
# basics
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "\n\n\n", " \t\n \n"])
def test_empty_text_has_no_chunks(text):
    assert chunk_text(text) == []


def test_invalid_max_tokens():
    with pytest.raises(ValueError):
        chunk_text("x", max_tokens=0)


def test_short_text_is_one_chunk_with_its_text():
    chunks = chunk_text("A short document.\n\nWith two paragraphs.")
    assert len(chunks) == 1
    assert chunks[0].text == "A short document.\n\nWith two paragraphs."
    assert chunks[0].position == 0


def test_chunk_ids_are_content_hashes():
    text = "\n\n".join(paragraphs(60))
    chunks = chunk_text(text, 200, 40)
    assert len(chunks) > 3
    for c in chunks:
        assert c.id == chunk_id(c.text)
        assert re.fullmatch(r"chunk-[0-9a-f]{24}", c.id)
    assert chunk_id("same text") == chunk_id("same text")
    assert chunk_id("same text") != chunk_id("same text.")
    # the same text inside a different document gets the same id
    other = chunk_text("\n\n".join(paragraphs(60)) + "\n\nA different ending.", 200, 40)
    assert [c.id for c in other[:-1]] == [c.id for c in chunks[: len(other) - 1]]


def test_deterministic():
    text = "\n\n".join(paragraphs(80, seed=3))
    a, b = chunk_text(text, 300, 50), chunk_text(text, 300, 50)
    assert [(c.id, c.position, c.text, c.tokens) for c in a] == [(c.id, c.position, c.text, c.tokens) for c in b]
    assert [c.position for c in a] == list(range(len(a)))


# ---------------------------------------------------------------------------------------------
# bounds
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_tokens,overlap", [(1200, 100), (300, 50), (100, 20), (60, 0)])
def test_every_chunk_within_max_plus_overlap(max_tokens, overlap):
    text = "\n\n".join(paragraphs(150, seed=1))
    chunks = chunk_text(text, max_tokens, overlap)
    assert len(chunks) >= count_tokens(text) // (max_tokens + overlap)
    assert_within_bounds(chunks, max_tokens, overlap)


def test_all_text_is_kept_without_overlap():
    text = "\n\n".join(paragraphs(150, seed=2))
    chunks = chunk_text(text, 200, 0)
    assert "\n\n".join(c.text for c in chunks) == text


def test_huge_paragraph_without_newlines_is_split_into_windows():
    rng = random.Random(5)
    text = " ".join(rng.choice(WORDS) for _ in range(12000))  # no newline, no sentence end
    assert count_tokens(text) > 12000
    chunks = chunk_text(text, 1200, 100)
    assert len(chunks) >= 10
    assert_within_bounds(chunks, 1200, 100)
    plain = chunk_text(text, 1200, 0)
    assert squeeze("".join(c.text for c in plain)) == squeeze(text)
    assert max(c.tokens for c in plain) > 1000  # windows, not tiny pieces


def test_huge_paragraph_of_sentences_is_split_at_sentence_ends():
    rng = random.Random(6)
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20))).capitalize() + "." for _ in range(600)]
    text = " ".join(sentences)
    chunks = chunk_text(text, 300, 0)
    assert len(chunks) > 10
    assert_within_bounds(chunks, 300, 0)
    for c in chunks:
        assert c.text.endswith(".")  # cut between sentences
    assert squeeze("".join(c.text for c in chunks)) == squeeze(text)


def test_chinese_without_blank_lines_is_split():
    text = chinese_text()
    assert "\n" not in text and count_tokens(text) > 1000
    chunks = chunk_text(text, 200, 40)
    assert len(chunks) > 5
    assert_within_bounds(chunks, 200, 40)
    for c in chunks:
        assert "\ufffd" not in c.text  # no character cut in half
        assert " " not in c.text  # no space inserted between Chinese sentences
    plain = chunk_text(text, 200, 0)
    assert "".join(c.text.replace("\n\n", "") for c in plain) == text
    assert all(c.text.endswith(("。", "；", "！", "？")) for c in plain[:-1])


def test_chinese_without_punctuation_is_cut_on_character_boundaries():
    text = re.sub(r"[，。；、！？：“”（）《》\d]", "", chinese_text())
    chunks = chunk_text(text, 150, 30)
    assert len(chunks) > 5
    assert_within_bounds(chunks, 150, 30)
    for c in chunks:
        assert "\ufffd" not in c.text
    plain = chunk_text(text, 150, 0)
    assert "".join(c.text.replace("\n\n", "") for c in plain) == text


# ---------------------------------------------------------------------------------------------
# overlap
# ---------------------------------------------------------------------------------------------


def _overlap_prefix(previous: str, current: str) -> str:
    """The prefix of `current` that repeats the end of `previous`, up to a blank line."""
    for m in re.finditer("\n\n", current):
        head = current[: m.start()]
        if head and previous.endswith(head):
            return head
    return ""


@pytest.mark.parametrize("source", ["english", "chinese"])
def test_each_chunk_starts_with_the_tail_of_the_previous(source):
    text = "\n\n".join(paragraphs(100, seed=4)) if source == "english" else chinese_text()
    overlap = 40
    chunks = chunk_text(text, 200, overlap)
    assert len(chunks) > 5
    assert chunks[0].text == chunk_text(text, 200, 0)[0].text  # the first chunk has no overlap
    prev_body = chunks[0].text
    for prev, cur in zip(chunks, chunks[1:]):
        head = _overlap_prefix(prev.text, cur.text)
        assert head, (prev.position, cur.text[:80])
        assert count_tokens(head) < overlap
        # the last tokens of the previous body, or all of it when it is short
        assert prev_body.endswith(head)
        assert count_tokens(head) >= overlap // 2 or head == prev_body.strip()
        prev_body = cur.text[len(head) + 2 :]


def test_no_overlap_when_disabled():
    text = "\n\n".join(paragraphs(100, seed=4))
    chunks = chunk_text(text, 200, 0)
    for prev, cur in zip(chunks, chunks[1:]):
        assert not _overlap_prefix(prev.text, cur.text)


# ---------------------------------------------------------------------------------------------
# stability under edits
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "max_tokens,overlap,n_paragraphs", [(1200, 100, 150), (300, 50, 150), (DEFAULT_MAX, DEFAULT_OVERLAP, 300)]
)
@pytest.mark.parametrize("seed", [0, 1])
def test_editing_one_middle_paragraph_changes_at_most_three_chunks(max_tokens, overlap, n_paragraphs, seed):
    paras = paragraphs(n_paragraphs, seed=seed)
    old = chunk_text("\n\n".join(paras), max_tokens, overlap)
    assert len(old) >= 8
    for j in range(60, 91, 5):
        for edit in ("append", "replace"):
            edited = list(paras)
            if edit == "append":
                edited[j] += " with a few freshly added words"
            else:
                edited[j] = edited[j].replace(" ", " edited ", 1)
            new = chunk_text("\n\n".join(edited), max_tokens, overlap)
            added, removed = changed_ids(old, new)
            assert 1 <= added <= 3 and removed <= 3, (j, edit, added, removed)
            assert new[0].id == old[0].id
            assert new[-1].id == old[-1].id
            assert_within_bounds(new, max_tokens, overlap)


def test_appending_a_paragraph_keeps_earlier_ids():
    paras = paragraphs(150, seed=7)
    old = chunk_text("\n\n".join(paras), 300, 50)
    new = chunk_text("\n\n".join(paras + ["A new closing paragraph about Newton and Darwin."]), 300, 50)
    assert [c.id for c in new[: len(old) - 1]] == [c.id for c in old[:-1]]
    assert new[-1].id != old[-1].id
    assert "A new closing paragraph" in new[-1].text


@pytest.mark.parametrize("kind", ["append", "replace", "insert", "delete"])
def test_random_edits_at_the_default_settings_change_few_chunks(kind):
    paras = prose_paragraphs(40000, seed=11)
    old = chunk_text("\n\n".join(paras), DEFAULT_MAX, DEFAULT_OVERLAP)
    assert len(old) >= 25
    rng = random.Random(kind)
    changed = []
    for j in rng.sample(range(len(paras) // 4, 3 * len(paras) // 4), 15):
        edited = list(paras)
        if kind == "append":
            edited[j] += " The council met again in the winter."
        elif kind == "replace":
            edited[j] = " ".join(prose_paragraphs(120, seed=j))
        elif kind == "insert":
            edited.insert(j, " ".join(prose_paragraphs(120, seed=j)))
        else:
            del edited[j]
        new = chunk_text("\n\n".join(edited), DEFAULT_MAX, DEFAULT_OVERLAP)
        added, removed = changed_ids(old, new)
        assert 1 <= added <= 3 and removed <= 3, (j, added, removed)
        assert new[0].id == old[0].id and new[-1].id == old[-1].id
        assert_within_bounds(new, DEFAULT_MAX, DEFAULT_OVERLAP)
        changed.append(added)
    assert statistics.mean(changed) <= 1.7


def test_editing_one_sentence_of_a_long_paragraph_changes_few_chunks():
    # no blank line: the cuts are still anchored to the content of the sentences
    text = chinese_text()
    sentences = re.findall(r"[^。]*。", text)
    old = chunk_text(text, 200, 40)
    assert len(old) >= 10
    for k in range(len(sentences) // 3, 2 * len(sentences) // 3, 4):
        edited = text.replace(sentences[k], sentences[k][:-1] + "，后来又有修改。", 1)
        new = chunk_text(edited, 200, 40)
        added, removed = changed_ids(old, new)
        assert 1 <= added <= 3 and removed <= 3, (k, added, removed)
        assert new[-1].id == old[-1].id


def test_appending_at_the_default_settings_keeps_earlier_ids():
    paras = prose_paragraphs(30000, seed=5)
    old = chunk_text("\n\n".join(paras), DEFAULT_MAX, DEFAULT_OVERLAP)
    for extra in (1, 3, 10):
        more = "\n\n".join(paras + prose_paragraphs(extra * 100, seed=extra))
        new = chunk_text(more, DEFAULT_MAX, DEFAULT_OVERLAP)
        assert [c.id for c in new[: len(old) - 1]] == [c.id for c in old[:-1]]


# ---------------------------------------------------------------------------------------------
# size: no more chunks (LLM extraction calls) than nano-graphrag's 1,200/100 windows
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sentences_per_paragraph", [(1, 3), (2, 8), (6, 14)])
def test_default_settings_make_no_more_chunks_than_nano_windows(sentences_per_paragraph):
    ours = nano = 0
    long_chunks = []
    for seed, size in enumerate([900, 1800, 3000, 6000, 12000, 25000] * 2):
        text = "\n\n".join(prose_paragraphs(size, seed, *sentences_per_paragraph))
        chunks = chunk_text(text, DEFAULT_MAX, DEFAULT_OVERLAP)
        ours += len(chunks)
        nano += nano_windows(count_tokens(text))
        if size >= 12000:
            long_chunks += [c.tokens for c in chunks]
    assert ours <= nano, (ours, nano)
    assert statistics.mean(long_chunks) >= 1150  # nano's windows hold 1,200 tokens with the overlap


def test_the_bundled_corpus_gets_no_more_chunks_than_nano_windows():
    texts = [read_document(f.path).text for f in scan_corpus(CORPUS)]
    assert len(texts) >= 5
    ours = sum(len(chunk_text(t, DEFAULT_MAX, DEFAULT_OVERLAP)) for t in texts)
    assert ours <= sum(nano_windows(count_tokens(t)) for t in texts)


def test_a_document_under_twice_min_tokens_is_one_chunk():
    # content cuts lie min_tokens (600 by default) from both ends; nano makes one window up to 1,200
    for seed in range(10):
        paras = prose_paragraphs(1100, seed)
        while count_tokens("\n\n".join(paras)) >= 1200:
            paras.pop()
        assert len(chunk_text("\n\n".join(paras), DEFAULT_MAX, DEFAULT_OVERLAP)) == 1
