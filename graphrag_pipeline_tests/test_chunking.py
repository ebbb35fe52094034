"""Tests for graphrag_pipeline.core.chunking: token bounds, content-hash ids, edit stability."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from graphrag_pipeline.core.chunking import chunk_id, chunk_text
from graphrag_pipeline.core.tokens import count_tokens

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho "
         "sigma tau upsilon phi chi psi omega Newton Darwin London Cambridge").split()


def paragraphs(n: int, seed: int = 0, lo: int = 20, hi: int = 80) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))
        end = rng.choice([".", "", "!", ")", ""])  # some paragraphs end without punctuation
        out.append(f"Paragraph {i} {words}{end}")
    return out


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


@pytest.mark.parametrize("max_tokens,overlap", [(1200, 100), (300, 50)])
@pytest.mark.parametrize("seed", [0, 1])
def test_editing_one_middle_paragraph_changes_at_most_three_chunks(max_tokens, overlap, seed):
    paras = paragraphs(150, seed=seed)
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
