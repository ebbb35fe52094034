"""Tests for the `fast` (no LLM) extraction method."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from graphrag_pipeline.core.extract_fast import extract_fast, split_sentences
from graphrag_pipeline.core.records import Extraction, entity_key

REPO = Path(__file__).resolve().parents[1]

DARWIN = (
    "Charles Darwin was born in Shrewsbury in 1809. "
    "He studied at the University of Cambridge, where he met John Stevens Henslow. "
    "In 1831 Darwin joined HMS Beagle under Captain Robert FitzRoy. "
    "The voyage lasted almost five years. "
    "Suddenly the weather changed near the Galapagos Islands. "
    "FitzRoy's temper was famous, and Darwin's notebooks filled quickly. "
    "The Royal Society awarded Darwin the Copley Medal in 1864. "
    "Darwin and FitzRoy argued about slavery in Brazil."
)

ZHENG_HE = (
    "郑和是明朝著名的航海家，原姓马，云南昆阳人。"
    "永乐三年，明成祖命郑和率领船队从南京出发，前往西洋。"
    "随行的费信著有《星槎胜览》，记录了沿途见闻。"
    "郑和后来在南京去世。"
)


def by_key(x: Extraction) -> dict:
    return {e.key: e for e in x.entities}


def relation(x: Extraction, a: str, b: str):
    """The relation between names a and b, in either direction, or None."""
    want = {entity_key(a), entity_key(b)}
    found = [r for r in x.relations if {entity_key(r.source), entity_key(r.target)} == want]
    assert len(found) <= 1
    return found[0] if found else None


# ---------------------------------------------------------------------------- English


def test_english_entities_and_types():
    ents = by_key(extract_fast(DARWIN, "c1"))
    assert {"charles darwin", "darwin", "shrewsbury", "john stevens henslow", "hms beagle", "brazil"} <= set(ents)
    assert ents["university of cambridge"].type == "ORGANIZATION"
    assert ents["royal society"].type == "ORGANIZATION"
    assert ents["captain robert fitzroy"].type == "PERSON"
    assert ents["galapagos islands"].type == "GEO"
    assert all(e.type == e.type.upper() and e.type for e in ents.values())
    assert all(e.source_id == "c1" for e in ents.values())


def test_stop_words_are_not_entities_and_leading_the_is_removed():
    ents = by_key(extract_fast(DARWIN, "c1"))
    for word in ("the", "he", "in", "suddenly", "the royal society", "the voyage", "voyage"):
        assert word not in ents
    assert ents["royal society"].name == "Royal Society"


def test_sentence_initial_single_word_needs_a_mid_sentence_occurrence():
    text = "Storms battered the ship. Darwin was ill. Later, Captain FitzRoy visited Darwin."
    ents = by_key(extract_fast(text, "c"))
    assert "storms" not in ents  # only ever capitalized at a sentence start
    assert "darwin" in ents  # also seen mid-sentence
    assert "later" not in ents
    # a sentence-initial adverb is not part of the name that follows
    ents = by_key(extract_fast("Curiously Darwin returned to England.", "c"))
    assert "darwin" in ents and "curiously darwin" not in ents
    # the same word without a mid-sentence occurrence is dropped
    assert "darwin" not in by_key(extract_fast("Darwin was ill. Captain FitzRoy sailed.", "c"))


def test_possessive_is_stripped():
    x = extract_fast(DARWIN, "c1")
    names = [e.name for e in x.entities]
    assert "FitzRoy" in names
    assert not any(n.endswith(("'s", "\u2019s")) for n in names)
    ents = by_key(extract_fast("He met Darwin\u2019s friend near King's College in London.", "c"))
    assert "darwin" in ents
    assert ents["king's college"].type == "ORGANIZATION"  # possessive inside a name is kept


def test_connectors_honorifics_acronyms_and_hyphens():
    text = (
        "The Government Code and Cypher School moved to Bletchley Park. "
        "Later Mr. Darcy met Dr. Watson and NASA engineers near the Royal Society of London. "
        "It was Jean-Paul Sartre who quoted Charles de Gaulle."
    )
    ents = by_key(extract_fast(text, "c"))
    assert ents["government code and cypher school"].type == "ORGANIZATION"
    assert ents["royal society of london"].type == "ORGANIZATION"
    assert ents["mr. darcy"].type == "PERSON"
    assert ents["dr. watson"].type == "PERSON"
    assert {"nasa", "jean-paul sartre", "charles de gaulle", "bletchley park"} <= set(ents)
    # "and" does not glue two separate names together
    ents = by_key(extract_fast("Later Darwin and FitzRoy argued.", "c"))
    assert {"darwin", "fitzroy"} <= set(ents) and "darwin and fitzroy" not in ents


def test_months_and_weekdays_alone_are_not_entities():
    ents = by_key(extract_fast("They met on Monday in March, and again in May near Lisbon.", "c"))
    assert "lisbon" in ents
    assert not {"monday", "march", "may"} & set(ents)
    ents = by_key(extract_fast("They sailed in December Darwin said.", "c"))
    assert "darwin" in ents and "december darwin" not in ents


def test_the_only_joins_epithets_and_of_the():
    ents = by_key(extract_fast("Later FitzRoy gave Darwin the Beagle logbook.", "c"))
    assert {"darwin", "beagle"} <= set(ents) and "darwin the beagle" not in ents
    ents = by_key(extract_fast("Later Alexander the Great met the Duke of the Abruzzi.", "c"))
    assert {"alexander the great", "duke of the abruzzi"} <= set(ents)


def test_event_and_quoted_work_types():
    text = 'Napoleon lost at the Battle of Waterloo. Later Darwin wrote "On the Origin of Species" in Kent.'
    ents = by_key(extract_fast(text, "c"))
    assert ents["battle of waterloo"].type == "EVENT"
    assert ents["on the origin of species"].type == "WORK"


def test_relation_weight_counts_sentences():
    x = extract_fast(DARWIN, "c1")
    r = relation(x, "Darwin", "FitzRoy")
    assert r is not None
    assert r.weight == 2.0  # two sentences mention both
    assert r.description == "FitzRoy's temper was famous, and Darwin's notebooks filled quickly."
    assert r.source == "FitzRoy"  # first in that sentence
    assert r.source_id == "c1"
    assert relation(x, "Charles Darwin", "Shrewsbury").weight == 1.0
    assert relation(x, "Charles Darwin", "Shrewsbury").keywords == ["born"]


def test_relation_keywords_are_lowercase_content_words():
    x = extract_fast("Later, after breakfast, Darwin politely argued with FitzRoy about slavery in Brazil.", "c")
    r = relation(x, "Darwin", "FitzRoy")
    assert r.keywords == ["politely", "argued", "slavery"]  # words between the names come first
    for r in x.relations:
        assert len(r.keywords) <= 3
        assert all(k == k.lower() and len(k) >= 4 for k in r.keywords)
        assert not {"darwin", "fitzroy", "brazil", "with", "about"} & set(r.keywords)


def test_no_relation_across_sentences_or_to_itself():
    x = extract_fast(DARWIN, "c1")
    assert relation(x, "Charles Darwin", "John Stevens Henslow") is None
    assert relation(x, "Shrewsbury", "Brazil") is None
    assert all(entity_key(r.source) != entity_key(r.target) for r in x.relations)
    x = extract_fast("Later Darwin met Darwin in Paris.", "c")
    assert [(r.source, r.target) for r in x.relations] == [("Darwin", "Paris")]


def test_sentence_splitting_keeps_abbreviations_and_decimals():
    text = "Mr. Darcy met Dr. Watson at 3.5 miles from St. Paul. Later it rained! Did it? Yes\nNo"
    sentences = [text[a:b] for a, b in split_sentences(text)]
    assert sentences == [
        "Mr. Darcy met Dr. Watson at 3.5 miles from St. Paul.",
        "Later it rained!",
        "Did it?",
        "Yes",
        "No",
    ]
    assert relation(extract_fast(text, "c"), "Mr. Darcy", "Dr. Watson") is not None
    assert len(split_sentences("天气很好。我们出发！真的吗？是的；走吧")) == 5


def test_entity_description_first_and_second_sentence():
    ents = by_key(extract_fast(DARWIN, "c1"))
    assert ents["darwin"].description == (
        "In 1831 Darwin joined HMS Beagle under Captain Robert FitzRoy. "
        "FitzRoy's temper was famous, and Darwin's notebooks filled quickly."
    )
    assert ents["shrewsbury"].description == "Charles Darwin was born in Shrewsbury in 1809."
    long_text = "Later Darwin met FitzRoy " + "and talked " * 100 + "for hours. Darwin slept."
    x = extract_fast(long_text, "c")
    assert all(len(e.description) <= 300 for e in x.entities)
    assert all(len(r.description) <= 300 for r in x.relations)
    assert by_key(x)["darwin"].description.startswith("Later Darwin met FitzRoy and talked")


def test_entities_ranked_by_frequency_and_content_keywords():
    x = extract_fast(DARWIN, "c1")
    assert [e.name for e in x.entities[:2]] == ["Darwin", "FitzRoy"]
    assert x.content_keywords == [e.name for e in x.entities[:5]]
    assert len(x.content_keywords) == 5


def test_dense_sentence_only_links_near_neighbours():
    names = ["Alba", "Bern", "Cork", "Doha", "Erfurt", "Fresno", "Genoa", "Hanoi"]
    x = extract_fast("Later we visited " + ", ".join(names) + " by train.", "c")
    assert [e.name for e in x.entities] == names
    pos = {n: i for i, n in enumerate(names)}
    assert all(abs(pos[r.source] - pos[r.target]) <= 2 for r in x.relations)
    assert all(pos[r.source] < pos[r.target] for r in x.relations)
    assert relation(x, "Alba", "Bern") and relation(x, "Genoa", "Hanoi")
    assert len(x.relations) == 9  # 7 adjacent pairs + the two ends' second neighbours
    # six or fewer entities: every pair
    x = extract_fast("Later we visited " + ", ".join(names[:6]) + " by train.", "c")
    assert len(x.relations) == 15


# ---------------------------------------------------------------------------- Chinese


def test_chinese_entities_and_relation():
    x = extract_fast(ZHENG_HE, "zh")
    ents = by_key(x)
    assert ents["郑和"].type == "PERSON"
    assert ents["南京"].type == "GEO"
    assert ents["明成祖"].type == "PERSON"
    r = relation(x, "郑和", "南京")
    assert r is not None and r.weight == 2.0
    assert r.description == "永乐三年，明成祖命郑和率领船队从南京出发，前往西洋。"
    assert "率领" in r.keywords
    assert all(len(e.name) >= 2 for e in x.entities)
    assert x.entities[0].name == "郑和"


def test_chinese_book_title_is_work():
    ents = by_key(extract_fast(ZHENG_HE, "zh"))
    assert ents["星槎胜览"].type == "WORK"
    assert "星槎" not in ents and "胜览" not in ents


def test_mixed_chinese_and_english():
    text = "郑和从南京出发。Later Charles Darwin sailed on HMS Beagle，也读过《星槎胜览》。"
    x = extract_fast(text, "mix")
    ents = by_key(x)
    assert {"郑和", "南京", "charles darwin", "hms beagle", "星槎胜览"} <= set(ents)
    r = relation(x, "Charles Darwin", "星槎胜览")
    assert r is not None
    assert r.keywords[0] == "sailed"
    for r in x.relations:  # words inside the book title are not keywords
        assert not {"星槎", "胜览"} & set(r.keywords)
    assert relation(x, "郑和", "Charles Darwin") is None


# ---------------------------------------------------------------------------- robustness


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\t ",
        "...!!!???。。；",
        "\x00\x01\x02\xff" * 500,
        bytes(range(256)).decode("latin-1") * 20,
        "A" * 200_000,
        "Supercalifragilistic" * 5000 + " Darwin",
        "😀🚀 " * 2000,
        "שלום עולם. مرحبا بالعالم! Привет мир.",
        "\ud800\udfff lone surrogates \ud800 Darwin",
        "《》《 》“”\"\" 's ’s Mr. . . Dr.",
        "-".join(["Ab"] * 1000),
        "Ab. " * 10_000,
    ],
)
def test_degenerate_inputs_never_raise(text):
    x = extract_fast(text, "odd")
    assert isinstance(x, Extraction)
    assert len(x.entities) <= 60
    for e in x.entities:
        assert e.name and len(e.description) <= 300 and e.source_id == "odd"
    for r in x.relations:
        assert r.source != r.target and len(r.description) <= 300


def test_empty_text_gives_empty_extraction():
    assert extract_fast("", "c") == Extraction()
    assert extract_fast("!!!", "c", max_entities=0) == Extraction()


def test_deterministic_across_calls_and_hash_seeds():
    text = DARWIN + "\n" + ZHENG_HE
    assert extract_fast(text, "c").to_dict() == extract_fast(text, "c").to_dict()
    script = (
        "import json, sys\n"
        "from graphrag_pipeline.core.extract_fast import extract_fast\n"
        "print(json.dumps(extract_fast(sys.stdin.read(), 'c').to_dict(), ensure_ascii=False))\n"
    )
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
        proc = subprocess.run(
            [sys.executable, "-c", script], input=text, capture_output=True, text=True, env=env, cwd=REPO, check=True
        )
        assert proc.stderr == ""  # jieba stays silent
        outputs.append(json.loads(proc.stdout))
    assert outputs[0] == outputs[1] == extract_fast(text, "c").to_dict()


def test_max_entities_cap_counts_dropped_relations():
    full = extract_fast(DARWIN, "c1")
    assert full.dropped_relations == 0
    capped = extract_fast(DARWIN, "c1", max_entities=3)
    assert [e.name for e in capped.entities] == [e.name for e in full.entities[:3]]
    kept = {e.name for e in capped.entities}
    assert all(r.source in kept and r.target in kept for r in capped.relations)
    expected_kept = [r for r in full.relations if r.source in kept and r.target in kept]
    assert capped.relations == expected_kept
    assert capped.dropped_relations == len(full.relations) - len(expected_kept) > 0
    none = extract_fast(DARWIN, "c1", max_entities=0)
    assert none.entities == [] and none.relations == []
    assert none.dropped_relations == len(full.relations)


def test_one_megabyte_of_english_is_fast():
    text = (DARWIN + "\n") * (1_000_000 // (len(DARWIN) + 1) + 1)
    start = time.perf_counter()
    x = extract_fast(text, "big")
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0
    assert relation(x, "Darwin", "FitzRoy").weight > 1000
