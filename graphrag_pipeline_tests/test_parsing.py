"""Tests for graphrag_pipeline.extract.parsing: LLM extraction answers (tuple and JSON), yes/no checks,
numbered entity-resolution answers -- with the messy output real models produce."""

from __future__ import annotations

import pytest

from graphrag_pipeline.extract.parsing import ParseResult, parse_extraction, parse_numbered_answers, parse_yes_no


def ents(result: ParseResult) -> dict[str, tuple[str, str]]:
    """name -> (type, description)"""
    return {e.name: (e.type, e.description) for e in result.extraction.entities}


def rels(result: ParseResult) -> dict[tuple[str, str], tuple[str, list[str], float]]:
    """(source, target) -> (description, keywords, weight)"""
    return {(r.source, r.target): (r.description, r.keywords, r.weight) for r in result.extraction.relations}


DARWIN = '("entity"<|>"CHARLES DARWIN"<|>"PERSON"<|>"English naturalist who sailed on HMS Beagle")'
BEAGLE = '("entity"<|>HMS BEAGLE<|>SHIP<|>Royal Navy survey ship)'
SAILED = (
    '("relationship"<|>"CHARLES DARWIN"<|>"HMS BEAGLE"<|>"Darwin sailed as naturalist on the Beagle"'
    '<|>"voyage, naturalist"<|>9)'
)

# ---------------------------------------------------------------------------------------------
# realistic full answers
# ---------------------------------------------------------------------------------------------

LIGHT_ANSWER = """\
("entity"<|>"Charles Darwin"<|>"person"<|>"Charles Darwin was an English naturalist whose observations during the voyage of HMS Beagle shaped his theory of evolution.")##
("entity"<|>"HMS Beagle"<|>"ship"<|>"HMS Beagle was a Royal Navy survey ship that carried Darwin around the world between 1831 and 1836.")##
("entity"<|>"Galápagos Islands"<|>"geo"<|>"The Galápagos Islands are a Pacific archipelago where Darwin studied finches and tortoises.")##
("entity"<|>"Robert FitzRoy"<|>"person"<|>"Robert FitzRoy was the captain of HMS Beagle.")##
("relationship"<|>"Charles Darwin"<|>"HMS Beagle"<|>"Darwin sailed aboard HMS Beagle as the expedition's naturalist."<|>"voyage, naturalist role"<|>9)##
("relationship"<|>"Charles Darwin"<|>"Galápagos Islands"<|>"Darwin's observations on the Galápagos informed his theory."<|>"field research, evolution"<|>8)##
("relationship"<|>"Robert FitzRoy"<|>"HMS Beagle"<|>"FitzRoy commanded HMS Beagle during the second survey voyage."<|>"command, navigation"<|>7)##
("content_keywords"<|>"evolution, natural selection, scientific voyage, Galápagos")<|COMPLETE|>
"""

GENERAL_ANSWER = """\
("entity"<|>MARTIN SMITH<|>PERSON<|>Martin Smith is the chair of the Central Institution)
##
("entity"<|>CENTRAL INSTITUTION<|>ORGANIZATION<|>The Central Institution is the Federal Reserve of Verdantis, setting interest rates)
##
("relationship"<|>MARTIN SMITH<|>CENTRAL INSTITUTION<|>Martin Smith is the Chair of the Central Institution and will answer questions at a press conference<|>9)
##
("entity"<|>MARKET STRATEGY COMMITTEE<|>ORGANIZATION<|>The committee makes key decisions about interest rates)
"""

GLEANING = """
MANY entities and relationships were missed in the last extraction. Remember to ONLY emit entities that match any of the previously extracted types. Add them below using the same format:
("entity"<|>VERDANTIS<|>GEO<|>Verdantis is the country whose central bank is the Central Institution)
##
("entity"<|>martin smith<|>PERSON<|>Martin Smith will hold a press conference on Thursday)
##
("relationship"<|>CENTRAL INSTITUTION<|>VERDANTIS<|>The Central Institution is the central bank of Verdantis<|>8)
##
("relationship"<|>MARKET STRATEGY COMMITTEE<|>CENTRAL INSTITUTION<|>The committee belongs to the Central Institution<|>high)
<|COMPLETE|>
"""


def test_full_light_answer():
    r = parse_extraction(LIGHT_ANSWER, "chunk-1")
    assert (r.ok, r.records, r.malformed) == (True, 8, 0)
    e = ents(r)
    assert set(e) == {"Charles Darwin", "HMS Beagle", "Galápagos Islands", "Robert FitzRoy"}
    assert e["HMS Beagle"][0] == "SHIP" and e["Charles Darwin"][0] == "PERSON"
    assert e["Robert FitzRoy"][1] == "Robert FitzRoy was the captain of HMS Beagle."
    rs = rels(r)
    assert rs[("Charles Darwin", "HMS Beagle")] == (
        "Darwin sailed aboard HMS Beagle as the expedition's naturalist.",
        ["voyage", "naturalist role"],
        9.0,
    )
    assert rs[("Robert FitzRoy", "HMS Beagle")][2] == 7.0
    assert r.extraction.content_keywords == ["evolution", "natural selection", "scientific voyage", "Galápagos"]
    assert r.extraction.dropped_relations == 0
    assert {e.source_id for e in r.extraction.entities} | {x.source_id for x in r.extraction.relations} == {"chunk-1"}


def test_full_general_answer_with_gleaning_continuation():
    r = parse_extraction(GENERAL_ANSWER + GLEANING, "c7")
    assert r.ok and r.malformed == 0
    assert r.records == 8
    e = ents(r)
    assert set(e) == {"MARTIN SMITH", "CENTRAL INSTITUTION", "MARKET STRATEGY COMMITTEE", "VERDANTIS"}
    # the gleaned record for "martin smith" is the same entity: its description is appended
    assert e["MARTIN SMITH"][1] == (
        "Martin Smith is the chair of the Central Institution\nMartin Smith will hold a press conference on Thursday"
    )
    rs = rels(r)
    desc, kws, w = rs[("MARTIN SMITH", "CENTRAL INSTITUTION")]
    assert desc.endswith("will answer questions at a press conference") and kws == [] and w == 9.0
    assert rs[("CENTRAL INSTITUTION", "VERDANTIS")][2] == 8.0
    assert rs[("MARKET STRATEGY COMMITTEE", "CENTRAL INSTITUTION")][2] == 1.0  # "high" is no number
    # the gleaning instruction text itself yields nothing
    assert not any("MANY" in n for n in e)


def test_chinese_answer():
    text = """以下是提取结果：
("entity"<|>"郑和"<|>"人物"<|>"明朝航海家，率领船队七次下西洋。")##
("entity"<|>"明朝"<|>"组织"<|>"中国历史上的朝代，支持郑和的远航。")##
（"entity"<|>「宝船」<|>"船只"<|>"郑和船队中最大的船。"）##
("relationship"<|>"郑和"<|>"明朝"<|>"郑和奉明朝皇帝之命出使西洋。"<|>"航海，外交；朝贡"<|>9)##
("relationship"<|>"郑和"<|>"宝船"<|>"郑和乘坐宝船远航。"<|>"船队、远航"<|>"8/10")##
("content_keywords"<|>"郑和下西洋，航海，明朝外交")<|COMPLETE|>"""
    r = parse_extraction(text, "zh")
    assert r.ok and r.records == 6 and r.malformed == 0
    e = ents(r)
    assert e["郑和"] == ("人物", "明朝航海家，率领船队七次下西洋。")
    assert e["宝船"][0] == "船只"
    rs = rels(r)
    assert rs[("郑和", "明朝")] == ("郑和奉明朝皇帝之命出使西洋。", ["航海", "外交", "朝贡"], 9.0)
    assert rs[("郑和", "宝船")][1:] == (["船队", "远航"], 8.0)
    assert r.extraction.content_keywords == ["郑和下西洋", "航海", "明朝外交"]


def test_truncated_answer_cut_mid_record():
    text = (
        DARWIN
        + "##\n"
        + BEAGLE
        + "##\n"
        + '("entity"<|>"ROBERT FITZROY"<|>"PERSON"<|>"Captain of the Beagle (later gov'
    )
    r = parse_extraction(text, "c")
    assert r.ok and r.records == 2 and r.malformed == 1
    assert set(ents(r)) == {"CHARLES DARWIN", "HMS BEAGLE"}
    # cut right after a ')' inside a quoted description: still recognised as truncated
    r2 = parse_extraction(DARWIN + "##\n" + '("entity"<|>"ROBERT FITZROY"<|>"PERSON"<|>"Captain (1805)', "c")
    assert (r2.records, r2.malformed) == (1, 1) and set(ents(r2)) == {"CHARLES DARWIN"}
    # a truncated relationship cannot keep a half description either
    r3 = parse_extraction(
        DARWIN + "##" + BEAGLE + '##("relationship"<|>"CHARLES DARWIN"<|>"HMS BEAGLE"<|>"Darwin sai', "c"
    )
    assert r3.extraction.relations == [] and r3.malformed == 1


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\n",
        "I'm sorry, I cannot help with that.",
        "lorem ipsum <|> dolor ## sit",
        "[citation needed]",
        "{not json at all",
    ],
)
def test_garbage_and_empty_are_not_ok(text):
    r = parse_extraction(text, "c")
    assert not r.ok
    assert r.records == 0 and r.extraction.entities == [] and r.extraction.relations == []


def test_explicit_empty_answer_is_ok():
    assert parse_extraction("<|COMPLETE|>", "c").ok
    assert parse_extraction("```\n<|COMPLETE|>\n```", "c").ok
    assert parse_extraction("##\n<|COMPLETE|>", "c").ok
    assert parse_extraction("No entities were found in this text.\n<|COMPLETE|>", "c").ok
    r = parse_extraction('{"entities": [], "relationships": []}', "c")
    assert r.ok and r.records == 0
    # the completion marker after record-like text that could not be parsed is not "empty on purpose"
    assert not parse_extraction('("entity" "X" "PERSON" "desc")<|COMPLETE|>', "c").ok
    assert not parse_extraction('("entity"~"X"~"PERSON"~"desc")<|COMPLETE|>', "c").ok
    assert not parse_extraction('"X"<|>"PERSON"<|>"no record type"\n<|COMPLETE|>', "c").ok


# ---------------------------------------------------------------------------------------------
# quoting, layout, delimiters
# ---------------------------------------------------------------------------------------------


def test_quote_styles_and_stray_spaces():
    text = (
        "(\"entity\"<|>  'ALAN TURING'  <|>'PERSON'<|>'Mathematician who said \"machines can think\"')##\n"
        "( “entity” <|> “BLETCHLEY PARK” <|> “LOCATION” <|> “Codebreaking centre” )##\n"
        "(entity<|>‘ENIGMA’<|>‘MACHINE’<|>‘German cipher device’)##\n"
        "(\"relationship\"<|>ALAN TURING<|>'ENIGMA'<|>“Turing helped break Enigma”<|>‘cryptanalysis’<|> 10 )"
    )
    r = parse_extraction(text, "c")
    assert r.records == 4 and r.malformed == 0
    e = ents(r)
    assert e["ALAN TURING"] == ("PERSON", 'Mathematician who said "machines can think"')
    assert e["BLETCHLEY PARK"] == ("LOCATION", "Codebreaking centre")
    assert e["ENIGMA"] == ("MACHINE", "German cipher device")
    assert rels(r)[("ALAN TURING", "ENIGMA")] == ("Turing helped break Enigma", ["cryptanalysis"], 10.0)


@pytest.mark.parametrize("sep", ["##", "\n", "##\n", "\n##\n", "", " ## ", "\n\n"])
def test_record_separators(sep):
    text = DARWIN + sep + BEAGLE + sep + SAILED
    r = parse_extraction(text, "c")
    assert r.records == 3 and r.malformed == 0
    assert set(ents(r)) == {"CHARLES DARWIN", "HMS BEAGLE"}
    assert ents(r)["HMS BEAGLE"][1] == "Royal Navy survey ship"
    assert rels(r)[("CHARLES DARWIN", "HMS BEAGLE")][2] == 9.0


def test_stray_record_delimiters_at_start_and_end():
    r = parse_extraction("##\n##" + DARWIN + "####" + BEAGLE + "##\n##\n<|COMPLETE|>", "c")
    assert r.records == 2 and r.malformed == 0
    assert ents(r)["CHARLES DARWIN"][1] == "English naturalist who sailed on HMS Beagle"


def test_record_spanning_several_lines():
    text = (
        '("entity"<|>\n  "CHARLES DARWIN"<|>\n  "PERSON"<|>\n  "Naturalist (1809-1882)\nwho wrote On the Origin of Species"\n)##\n'
        + BEAGLE
    )
    r = parse_extraction(text, "c")
    assert r.records == 2
    assert ents(r)["CHARLES DARWIN"][1] == "Naturalist (1809-1882)\nwho wrote On the Origin of Species"


def test_markdown_fences_bullets_and_bold():
    text = f"""Here are the entities:

```text
- {DARWIN}
* {BEAGLE}
1. **{SAILED}**
2. ("content_keywords"<|>"evolution; voyage")
```

<|COMPLETE|>"""
    r = parse_extraction(text, "c")
    assert (r.records, r.malformed) == (4, 0)
    assert set(ents(r)) == {"CHARLES DARWIN", "HMS BEAGLE"}
    assert rels(r)[("CHARLES DARWIN", "HMS BEAGLE")][1:] == (["voyage", "naturalist"], 9.0)
    assert r.extraction.content_keywords == ["evolution", "voyage"]


def test_chatter_before_between_and_after_records():
    text = (
        "Sure! Here are the entities:\n\n" + DARWIN + "\n" + BEAGLE + "\n\n"
        "## Relationships\nNow the relationships between them (as requested):\n"
        + SAILED
        + "\n\nLet me know if you need anything else."
    )
    r = parse_extraction(text, "c")
    assert r.records == 3 and r.malformed == 0
    assert ents(r)["HMS BEAGLE"][1] == "Royal Navy survey ship"  # the heading did not leak into it
    assert rels(r)[("CHARLES DARWIN", "HMS BEAGLE")][0] == "Darwin sailed as naturalist on the Beagle"


def test_missing_completion_marker_and_text_after_it():
    r = parse_extraction(DARWIN + "##" + BEAGLE + "##" + SAILED, "c")
    assert r.ok and r.records == 3
    text = DARWIN + "##" + BEAGLE + "<|COMPLETE|>\n" + '("entity"<|>"IGNORED"<|>"PERSON"<|>"after the end")\nThanks!'
    r = parse_extraction(text, "c")
    assert r.records == 2 and "IGNORED" not in ents(r)
    # the completion marker in another case is still the marker
    assert "IGNORED" not in ents(parse_extraction(DARWIN + "<|complete|>" + '("entity"<|>IGNORED<|>X<|>y)', "c"))


def test_tuple_delimiter_with_spaces_and_custom_delimiters():
    r = parse_extraction('("entity" <|> "CHARLES DARWIN" <|>  "PERSON"  <|> "Naturalist" )', "c")
    assert ents(r) == {"CHARLES DARWIN": ("PERSON", "Naturalist")}
    # newer LightRAG style: <|#|> tuple delimiter, no parentheses, records one per line
    text = (
        "entity<|#|>Charles Darwin<|#|>Person<|#|>Naturalist\n"
        "entity<|#|>HMS Beagle<|#|>Ship<|#|>Survey ship\n"
        "relation<|#|>Charles Darwin<|#|>HMS Beagle<|#|>Darwin sailed on the Beagle<|#|>voyage, naturalist<|#|>8\n"
        "<|COMPLETE|>"
    )
    r = parse_extraction(text, "c", tuple_delimiter="<|#|>")
    assert ents(r) == {"Charles Darwin": ("PERSON", "Naturalist"), "HMS Beagle": ("SHIP", "Survey ship")}
    assert rels(r)[("Charles Darwin", "HMS Beagle")] == ("Darwin sailed on the Beagle", ["voyage", "naturalist"], 8.0)
    assert r.records == 3 and r.malformed == 0
    r = parse_extraction(
        "(entity;;X CORP;;ORG;;A company)@@(entity;;Y;;ORG;;Another)[[END]](entity;;Z;;ORG;;no)",
        "c",
        tuple_delimiter=";;",
        record_delimiter="@@",
        completion_delimiter="[[END]]",
    )
    assert set(ents(r)) == {"X CORP", "Y"}


def test_plain_pipe_is_not_a_delimiter():
    r = parse_extraction('("entity"<|>"AT&T | Bell Labs"<|>"ORGANIZATION"<|>"Research lab | telecom")', "c")
    assert ents(r) == {"AT&T | Bell Labs": ("ORGANIZATION", "Research lab | telecom")}
    # a whole record written with "|" is not parsed (and is counted as malformed)
    r = parse_extraction('("entity"|"ALAN TURING"|"PERSON"|"Mathematician")##\n' + DARWIN, "c")
    assert set(ents(r)) == {"CHARLES DARWIN"} and r.malformed == 1
    # neither is a variant like "<| >"
    assert parse_extraction('("entity"<| >"ALAN TURING"<| >"PERSON"<| >"x")', "c").records == 0


def test_delimiter_inside_entity_description_is_joined_back():
    r = parse_extraction(
        '("entity"<|>"TEMPLATE ENGINE"<|>"SOFTWARE"<|>"Uses <|> as its field separator")##'
        "(entity<|>SPLITTER<|>TOOL<|>splits on <|> and joins on<|>again)",
        "c",
    )
    assert r.records == 2
    assert ents(r)["TEMPLATE ENGINE"] == ("SOFTWARE", "Uses <|> as its field separator")
    assert ents(r)["SPLITTER"] == ("TOOL", "splits on <|> and joins on<|>again")


def test_relationship_field_counts():
    base = DARWIN + "##" + BEAGLE + "##"
    four = parse_extraction(
        base + '("relationship"<|>CHARLES DARWIN<|>HMS BEAGLE<|>sailed on)', "c", default_weight=2.0
    )
    assert rels(four)[("CHARLES DARWIN", "HMS BEAGLE")] == ("sailed on", [], 2.0)
    general = parse_extraction(base + '("relationship"<|>CHARLES DARWIN<|>HMS BEAGLE<|>sailed on<|>6)', "c")
    assert rels(general)[("CHARLES DARWIN", "HMS BEAGLE")] == ("sailed on", [], 6.0)
    light_no_strength = parse_extraction(
        base + '("relationship"<|>CHARLES DARWIN<|>HMS BEAGLE<|>sailed on<|>voyage, science)', "c"
    )
    assert rels(light_no_strength)[("CHARLES DARWIN", "HMS BEAGLE")] == ("sailed on", ["voyage", "science"], 1.0)
    light = parse_extraction(base + '("relationship"<|>CHARLES DARWIN<|>HMS BEAGLE<|>sailed on<|>voyage<|>7.5)', "c")
    assert rels(light)[("CHARLES DARWIN", "HMS BEAGLE")] == ("sailed on", ["voyage"], 7.5)
    extra = parse_extraction(
        base + '("relationship"<|>CHARLES DARWIN<|>HMS BEAGLE<|>sailed on<|>the Beagle, 1831<|>voyage; science<|>8)',
        "c",
    )
    assert rels(extra)[("CHARLES DARWIN", "HMS BEAGLE")] == ("sailed on<|>the Beagle, 1831", ["voyage", "science"], 8.0)
    missing_target = parse_extraction(base + '("relationship"<|>CHARLES DARWIN)', "c")
    assert missing_target.extraction.relations == [] and missing_target.malformed == 1


def test_record_type_names_case_insensitive_and_quoted():
    text = (
        "(ENTITY<|>CHARLES DARWIN<|>PERSON<|>naturalist)##('Entity'<|>HMS BEAGLE<|>SHIP<|>ship)##"
        '("RELATIONSHIP"<|>CHARLES DARWIN<|>HMS BEAGLE<|>sailed<|>voyage<|>5)##'
        "(relation<|>HMS BEAGLE<|>CHARLES DARWIN<|>carried<|>transport<|>3)##"
        "(“high_level_keywords”<|>exploration, biology)##(Content_Keywords<|>evolution)"
    )
    r = parse_extraction(text, "c")
    assert r.records == 6 and r.malformed == 0
    assert set(ents(r)) == {"CHARLES DARWIN", "HMS BEAGLE"}
    (rel,) = r.extraction.relations  # the two records are the same undirected pair: merged
    assert rel.weight == 5.0 and rel.keywords == ["voyage", "transport"] and rel.description == "sailed\ncarried"
    assert r.extraction.content_keywords == ["exploration", "biology", "evolution"]


def test_unknown_record_type_is_malformed():
    r = parse_extraction('("event"<|>"VOYAGE"<|>"1831"<|>"Second voyage")##' + DARWIN, "c")
    assert r.records == 1 and r.malformed == 1 and set(ents(r)) == {"CHARLES DARWIN"}


@pytest.mark.parametrize(
    ("strength", "weight"),
    [
        ("9", 9.0),
        ("7.5", 7.5),
        ('"7.5"', 7.5),
        ("8/10", 8.0),
        ("0.8", 0.8),
        ("(6)", 6.0),
        ("high", 3.0),
        ('""', 3.0),
        ("", 3.0),
        ("N/A", 3.0),
        ("strong", 3.0),
        ("7,5", 7.5),
    ],
)
def test_strength_values(strength, weight):
    text = (
        DARWIN
        + "##"
        + BEAGLE
        + f'##("relationship"<|>"CHARLES DARWIN"<|>"HMS BEAGLE"<|>"sailed"<|>"voyage"<|>{strength})'
    )
    r = parse_extraction(text, "c", default_weight=3.0)
    assert rels(r)[("CHARLES DARWIN", "HMS BEAGLE")][2] == weight


# ---------------------------------------------------------------------------------------------
# entities, relations, keywords
# ---------------------------------------------------------------------------------------------


def test_entities_differing_in_case_or_quotes_are_one():
    text = (
        '("entity"<|>"Charles Darwin"<|>"PERSON"<|>"English naturalist")##'
        '("entity"<|>CHARLES DARWIN<|>PERSON<|>English naturalist)##'
        '("entity"<|>\'charles  darwin\'<|>""<|>"Author of On the Origin of Species")##'
        '("entity"<|>“Charles Darwin”<|>PERSON<|>)'
    )
    r = parse_extraction(text, "c")
    assert r.records == 4
    (e,) = r.extraction.entities
    assert e.name == "Charles Darwin" and e.type == "PERSON"
    assert e.description == "English naturalist\nAuthor of On the Origin of Species"


def test_entity_type_cleaning_and_empty_fields():
    text = (
        '("entity"<|>"Royal Navy"<|>"military organization"<|>"British navy")##'
        '("entity"<|>"Beagle Channel"<|>""<|>"A strait in Tierra del Fuego")##'
        '("entity"<|>""<|>"PERSON"<|>"nameless")##'
        '("entity"<|>"   "<|>"PERSON"<|>"blank name")##'
        '("entity"<|>"LONELY NAME")##'
        '("entity"<|>"First voyage"<|>"event")'
    )
    r = parse_extraction(text, "c")
    e = ents(r)
    assert e["Royal Navy"][0] == "MILITARY_ORGANIZATION"
    assert e["Beagle Channel"][0] == "UNKNOWN"
    assert e["First voyage"] == ("EVENT", "")
    assert len(e) == 3 and r.records == 3 and r.malformed == 3


def test_relations_to_unknown_entities_and_self_relations_are_dropped():
    text = (
        DARWIN + "##" + BEAGLE + "##" + SAILED + "##"
        '("relationship"<|>"CHARLES DARWIN"<|>"EMMA WEDGWOOD"<|>"married"<|>"family"<|>9)##'
        '("relationship"<|>"ALFRED WALLACE"<|>"HMS BEAGLE"<|>"never sailed on it"<|>"none"<|>1)##'
        '("relationship"<|>"Charles Darwin"<|>"charles darwin"<|>"himself"<|>"self"<|>5)'
    )
    r = parse_extraction(text, "c")
    assert r.records == 6  # all parsed ...
    assert list(rels(r)) == [("CHARLES DARWIN", "HMS BEAGLE")]  # ... but only one kept
    assert r.extraction.dropped_relations == 3


def test_relation_endpoints_use_entity_display_names_and_may_precede_entities():
    text = '("relationship"<|>"charles darwin"<|>"hms beagle"<|>"sailed"<|>"voyage"<|>4)##' + DARWIN + "##" + BEAGLE
    r = parse_extraction(text, "c")
    assert list(rels(r)) == [("CHARLES DARWIN", "HMS BEAGLE")] and r.extraction.dropped_relations == 0


def test_keyword_splitting():
    text = (
        DARWIN + "##" + BEAGLE + "##"
        '("relationship"<|>"CHARLES DARWIN"<|>"HMS BEAGLE"<|>"sailed"<|>" voyage ;science,, naturalist ; voyage,"<|>9)##'
        '("content_keywords"<|>"evolution;  natural selection ,, ; Beagle voyage")##'
        '("content_keywords"<|>evolution<|>"finches")'
    )
    r = parse_extraction(text, "c")
    assert rels(r)[("CHARLES DARWIN", "HMS BEAGLE")][1] == ["voyage", "science", "naturalist"]
    assert r.extraction.content_keywords == ["evolution", "natural selection", "Beagle voyage", "finches"]


def test_repeated_relation_in_one_answer_is_kept_once():
    text = (
        DARWIN + "##" + BEAGLE + "##" + SAILED + "##" + SAILED + "##"
        '("relationship"<|>"HMS BEAGLE"<|>"CHARLES DARWIN"<|>"The Beagle carried Darwin"<|>"transport"<|>6)'
    )
    r = parse_extraction(text, "c")
    (rel,) = r.extraction.relations
    assert rel.weight == 9.0 and rel.keywords == ["voyage", "naturalist", "transport"]
    assert rel.description == "Darwin sailed as naturalist on the Beagle\nThe Beagle carried Darwin"


# ---------------------------------------------------------------------------------------------
# JSON answers
# ---------------------------------------------------------------------------------------------


def test_json_answer():
    text = """Here is the extraction in JSON:
```json
{
  "entities": [
    {"name": "Charles Darwin", "type": "person", "description": "English naturalist"},
    {"entity_name": "HMS Beagle", "entity_type": "SHIP", "entity_description": "Survey ship"},
    {"name": "", "type": "PERSON", "description": "no name"}
  ],
  "relationships": [
    {"source": "Charles Darwin", "target": "HMS Beagle", "description": "sailed on", "keywords": ["voyage", "science"], "weight": "8"},
    {"src_id": "HMS Beagle", "tgt_id": "Galapagos", "description": "visited", "keywords": "travel", "strength": 5}
  ],
  "content_keywords": "evolution, voyage"
}
```"""
    r = parse_extraction(text, "c")
    assert r.ok and r.records == 5 and r.malformed == 1
    assert ents(r) == {"Charles Darwin": ("PERSON", "English naturalist"), "HMS Beagle": ("SHIP", "Survey ship")}
    assert rels(r) == {("Charles Darwin", "HMS Beagle"): ("sailed on", ["voyage", "science"], 8.0)}
    assert r.extraction.dropped_relations == 1  # Galapagos is not an entity of this answer
    assert r.extraction.content_keywords == ["evolution", "voyage"]


def test_broken_json_answer_is_repaired():
    text = (
        "{'entities': [{'name': 'Ada Lovelace', 'type': 'person', 'description': 'Mathematician',}, "
        "{'name': 'Analytical Engine', 'type': 'machine'}], 'relationships': [{'source': 'Ada Lovelace', "
        "'target': 'Analytical Engine', 'description': 'wrote programs for', 'strength': 'high'}]"
    )
    r = parse_extraction(text, "c", default_weight=2.5)
    assert set(ents(r)) == {"Ada Lovelace", "Analytical Engine"}
    assert rels(r)[("Ada Lovelace", "Analytical Engine")] == ("wrote programs for", [], 2.5)


def test_json_list_of_objects():
    text = (
        '[{"name": "X CORP", "type": "ORG", "description": "a company"}, {"name": "Y LTD", "type": "ORG"}, '
        '{"source": "X CORP", "target": "Y LTD", "description": "acquired", "weight": 4}]'
    )
    r = parse_extraction(text, "c")
    assert set(ents(r)) == {"X CORP", "Y LTD"} and rels(r)[("X CORP", "Y LTD")][2] == 4.0


def test_json_list_that_names_each_record_kind_in_type():
    # {"type": "entity", ...}: the record kind is not the entity type; a relation says so in "type" too
    text = (
        '[{"type": "entity", "name": "X CORP", "entity_type": "ORG", "description": "a company"}, '
        '{"type": "entity", "name": "Y LTD"}, '
        '{"type": "relationship", "source_entity": "X CORP", "target_entity": "Y LTD", "description": "acquired"}]'
    )
    r = parse_extraction(text, "c")
    assert ents(r) == {"X CORP": ("ORG", "a company"), "Y LTD": ("UNKNOWN", "")}
    assert rels(r) == {("X CORP", "Y LTD"): ("acquired", [], 1.0)}


def test_tuples_written_with_a_pipe_instead_of_the_asked_delimiter():
    text = (
        '("entity"|"DEBIAN"|"ORGANIZATION"|"A free operating system project")##\n'
        '("entity"|"UBUNTU"|"ORGANIZATION"|"A distribution | based on Debian")##\n'
        '("relationship"|"UBUNTU"|"DEBIAN"|"Ubuntu is derived from Debian"|8)\n<|COMPLETE|>'
    )
    r = parse_extraction(text, "c")
    assert r.ok and r.records == 3 and r.malformed == 0
    assert ents(r)["UBUNTU"] == ("ORGANIZATION", "A distribution | based on Debian")
    assert rels(r) == {("UBUNTU", "DEBIAN"): ("Ubuntu is derived from Debian", [], 8.0)}


def test_tuples_written_with_commas_keep_the_commas_of_their_texts():
    text = (
        '("entity", "DEBIAN", "ORGANIZATION", "A project, run by volunteers, since 1993")\n'
        '("entity", "UBUNTU", "ORGANIZATION", "A distribution")\n'
        '("relationship", "UBUNTU", "DEBIAN", "Ubuntu takes packages, and people, from Debian", "derivation, packages", 8)\n'
        "<|COMPLETE|>"
    )
    r = parse_extraction(text, "c")
    assert r.records == 3
    assert ents(r)["DEBIAN"] == ("ORGANIZATION", "A project, run by volunteers, since 1993")
    assert rels(r) == {
        ("UBUNTU", "DEBIAN"): ("Ubuntu takes packages, and people, from Debian", ["derivation", "packages"], 8.0)
    }


def test_the_asked_delimiter_wins_over_the_others():
    # commas and pipes inside the texts of a well-formed answer change nothing
    text = '("entity"<|>"A|B, Inc."<|>"ORG"<|>"x, y | z")##\n("entity"<|>"C"<|>"ORG"<|>"w")<|COMPLETE|>'
    r = parse_extraction(text, "c")
    assert ents(r) == {"A|B, Inc.": ("ORG", "x, y | z"), "C": ("ORG", "w")}


# The ways small models (7B-class, recorded in public LLM caches) end and join records: minimal
# versions of recorded answers, each with what it must give.
TWO = '("entity"<|>"A"<|>"org"<|>"d1")##\n("entity"<|>"B"<|>"org"<|>"d2")##\n'


@pytest.mark.parametrize(
    ("text", "entities", "relations", "keywords"),
    [
        (  # records closed with `">` instead of `")`
            '("entity"<|>"A"<|>"geo"<|>"desc one">\n("entity"<|>"B"<|>"geo"<|>"desc two">\n<|COMPLETE|>',
            {"A": ("GEO", "desc one"), "B": ("GEO", "desc two")},
            {},
            [],
        ),
        (  # `">)`, and the completion marker without its brackets (the last record is not cut)
            '("entity"<|>"A"<|>"geo"<|>"d1">)\n("content_keywords"<|>"k1, k2">)\n|COMPLETE|',
            {"A": ("GEO", "d1")},
            {},
            ["k1", "k2"],
        ),
        (  # pieces of delimiters after the closing parenthesis
            '("entity"<|>"A"<|>"org"<|>"d1.")<|\n("entity"<|>"B"<|>"org"<|>"d2.")<|##\n<|COMPLETE|>',
            {"A": ("ORG", "d1."), "B": ("ORG", "d2.")},
            {},
            [],
        ),
        (  # `|>` for `<|>` between two quoted fields
            TWO + '("relationship"<|>"A"<|>"B"<|>"rel desc."|>"kw one"<|>8)##\n<|COMPLETE|>',
            {"A": ("ORG", "d1"), "B": ("ORG", "d2")},
            {("A", "B"): ("rel desc.", ["kw one"], 8.0)},
            [],
        ),
        (  # the prompt's <placeholders> copied around the values, a delimiter before the end
            '("entity"<|><\u957f\u7f16\u7ec4><|><category><|>\u63cf\u8ff0><|>)\n<|COMPLETE|>',
            {"\u957f\u7f16\u7ec4": ("CATEGORY", "\u63cf\u8ff0")},
            {},
            [],
        ),
        (  # a description that opens with a quoted word, no completion marker
            '("entity"<|>"Organization"<|>"person"<|>"Person" is a fictional character)',
            {"Organization": ("PERSON", '"Person" is a fictional character')},
            {},
            [],
        ),
        (  # a sentence in the type's place: no type, the sentence is the description
            '("entity"<|>"Org"<|>"lamp" is an entity representing a company.")\n<|COMPLETE|>',
            {"Org": ("UNKNOWN", 'lamp" is an entity representing a company.')},
            {},
            [],
        ),
        (  # `"))` at the end of a record
            '("entity"<|>"A"<|>"person"<|>"desc."))\n<|COMPLETE|>',
            {"A": ("PERSON", "desc.")},
            {},
            [],
        ),
        (  # a Light relation without strength whose keywords are one keyword
            TWO + '("relationship"<|>"A"<|>"B"<|>"desc"<|>"partnership")##\n<|COMPLETE|>',
            {"A": ("ORG", "d1"), "B": ("ORG", "d2")},
            {("A", "B"): ("desc", ["partnership"], 1.0)},
            [],
        ),
        (  # pieces of a delimiter stuck to a keyword
            '("entity"<|>"A"<|>"geo"<|>"d")##\n("content_keywords"<|>|>power dynamics, conflict")<|COMPLETE|>',
            {"A": ("GEO", "d")},
            {},
            ["power dynamics", "conflict"],
        ),
    ],
)
def test_how_small_models_end_and_join_records(text, entities, relations, keywords):
    r = parse_extraction(text, "c")
    assert r.ok
    assert ents(r) == entities
    assert rels(r) == relations
    assert r.extraction.content_keywords == keywords


def test_a_relations_last_fields_in_a_second_group_and_a_broken_delimiter_before_a_strength():
    # real answers of a 7B model: keywords and strength written as a second group on the line, `<|`
    # for `<|>` before a strength (with the text's closing parenthesis before it), and an entity
    # that ends the same way (a score after its description)
    text = (
        '("entity"<|>"A"<|>"org"<|>"d1")\n("entity"<|>"B"<|>"org"<|>"d2.")<|4)<|\n("entity"<|>"C"<|>"org"<|>"d3")\n'
        '("relationship"<|>"A"<|>"B"<|>"rel desc.")<|>("kw_one"<|>7)\n'
        '("relationship"<|>"B"<|>"C"<|>"other desc.")<|6)\n<|COMPLETE|>'
    )
    r = parse_extraction(text, "c")
    assert r.ok and r.malformed == 0
    assert ents(r) == {"A": ("ORG", "d1"), "B": ("ORG", "d2."), "C": ("ORG", "d3")}
    assert rels(r) == {("A", "B"): ("rel desc.", ["kw_one"], 7.0), ("B", "C"): ("other desc.", [], 6.0)}


def test_what_the_second_group_rule_leaves_alone():
    # records joined by the tuple delimiter on one line stay records of their own
    r = parse_extraction(
        '("entity"<|>"A"<|>"org"<|>"d1")<|>("entity"<|>"B"<|>"org"<|>"d2")<|>'
        '("entity"<|>"C"<|>"org"<|>"d3")<|>("relationship"<|>"A"<|>"B"<|>"desc")<|>'
        '("relationship"<|>"B"<|>"C"<|>"again"<|>3)<|COMPLETE|>',
        "c",
    )
    assert ents(r) == {"A": ("ORG", "d1"), "B": ("ORG", "d2"), "C": ("ORG", "d3")}
    assert rels(r) == {("A", "B"): ("desc", [], 1.0), ("B", "C"): ("again", [], 3.0)}
    # an entity's second group is not a relation's keywords, and a number inside a description stays
    r = parse_extraction(
        '("entity"<|>"A"<|>"org"<|>"founded (1859)")##\n("entity"<|>"B"<|>"year"<|>"the year"<|>"1859")##\n'
        '("relationship"<|>"A"<|>"B"<|>"founded in")<|>("founding", "1859"<|>5)<|COMPLETE|>',
        "c",
    )
    assert ents(r)["A"] == ("ORG", "founded (1859)")
    assert ents(r)["B"] == ("YEAR", 'the year"<|>"1859')
    assert rels(r) == {("A", "B"): ("founded in", ["founding", "1859"], 5.0)}


def test_closing_marks_inside_texts_are_kept():
    # what the record-end rules must not take from a text: a path in angle brackets, an arrow, a
    # parenthesis of the description, a long fourth field of a relation (the description's rest)
    text = (
        '("entity"<|>"<linux/module.h>"<|>"header"<|>"declares module_init (and more)")##\n'
        '("entity"<|>"B"<|>"concept"<|>"maps A -> B")##\n'
        '("relationship"<|>"<linux/module.h>"<|>"B"<|>"first half"<|>"and the second half of it")##\n<|COMPLETE|>'
    )
    r = parse_extraction(text, "c")
    assert ents(r) == {
        "<linux/module.h>": ("HEADER", "declares module_init (and more)"),
        "B": ("CONCEPT", "maps A -> B"),
    }
    assert rels(r) == {("<linux/module.h>", "B"): ('first half"<|>"and the second half of it', [], 1.0)}


def test_what_the_looser_rules_leave_alone():
    # names in angle brackets stay names, with their relations; a <placeholder value> is unwrapped
    # on both the entity and its relations
    r = parse_extraction(
        '("entity"<|><T><|>concept<|>a type parameter)##\n("entity"<|><Charles Darwin><|><person><|>naturalist>)##\n'
        '("relationship"<|><T><|><Charles Darwin><|>named after<|>3)<|COMPLETE|>',
        "c",
    )
    assert ents(r) == {"<T>": ("CONCEPT", "a type parameter"), "Charles Darwin": ("PERSON", "naturalist")}
    assert rels(r) == {("<T>", "Charles Darwin"): ("named after", [], 3.0)}
    # comma-separated fields without quotes: nothing to read, so the chunk is asked again (not ok)
    r = parse_extraction(
        "(entity, Bob Smith, person, born in Paris, a painter)\n(relationship, Bob Smith, Paris, born there, 8)"
        "<|COMPLETE|>",
        "c",
    )
    assert not r.ok
    # the completion marker without brackets ends an answer only at the end of a line
    r = parse_extraction(
        '("entity"<|>"A"<|>"status"<|>"a |COMPLETE| flag")##\n("entity"<|>"B"<|>"x"<|>"y")\n|COMPLETE|', "c"
    )
    assert ents(r) == {"A": ("STATUS", "a |COMPLETE| flag"), "B": ("X", "y")}
    # a word or a commented number as a General strength is a strength, not a keyword
    for strength, weight in (("high", 1.0), ("N/A", 1.0), ("8 (strong)", 8.0)):
        r = parse_extraction(TWO + f'("relationship"<|>"A"<|>"B"<|>"desc"<|>{strength})<|COMPLETE|>', "c")
        assert rels(r) == {("A", "B"): ("desc", [], weight)}, strength
    # chatter after the last record: a closing tag, a line in parentheses, a smiley
    for chatter in ("</output>", "(end of entities)", "I hope this helps :)"):
        r = parse_extraction(TWO + f'("relationship"<|>"A"<|>"B"<|>"desc"<|>7)\n{chatter}', "c")
        assert rels(r) == {("A", "B"): ("desc", [], 7.0)}, chatter
    # an answer cut right after a delimiter piece or a `>` is cut: its last record is dropped
    for cut in ('("entity"<|>"B"<|>"x"<|>"born (1859)<|', '("entity"<|>"B"<|>"x"<|>"tag <b>'):
        r = parse_extraction('("entity"<|>"A"<|>"x"<|>"d")##\n' + cut, "c")
        assert set(ents(r)) == {"A"} and r.malformed == 1, cut


def test_gleaned_records_count_when_the_first_answer_ends_without_brackets():
    from graphrag_pipeline.extract.llm import ExtractionSettings, extract_chunk
    from graphrag_pipeline.llm.client import ChatResult

    answers = [
        '("entity"<|>"Ada"<|>"person"<|>"a")##\n("entity"<|>"Bab"<|>"machine"<|>"b")\n|COMPLETE|\nDone!',
        '("entity"<|>"Cy"<|>"person"<|>"c")##\n("relationship"<|>"Ada"<|>"Cy"<|>"knew"<|>4)\n<|COMPLETE|',
    ]

    class Scripted:
        def chat(self, messages, **kw):
            return ChatResult(answers.pop(0), False, 1, 1)

    out = extract_chunk(Scripted(), "text", "c", ExtractionSettings(method="general"))
    assert {e.name for e in out.extraction.entities} == {"Ada", "Bab", "Cy"}
    assert [(r.source, r.target, r.weight) for r in out.extraction.relations] == [("Ada", "Cy", 4.0)]


# ---------------------------------------------------------------------------------------------
# yes / no and numbered answers
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("YES", True),
        ("Y", True),
        ("yes.", True),
        ("Yes, there are more entities to extract.", True),
        ('"yes"', True),
        ("**Yes**", True),
        ("  no\n", False),
        ("N", False),
        ("No.", False),
        ("There are no more entities.", False),
        ("Nothing else is missing.", False),
        ("I think there are more to add.", None),
        ("There are no more than three.", None),
        ("NO<|COMPLETE|>", False),
        ("Maybe", None),
        ("", None),
        ("Not sure", None),
        ("N/A", None),
        ("Yesterday", None),
        ("Nope", None),
        ("Yes/No", None),
        ("The answer is yes", None),
    ],
)
def test_parse_yes_no(text, expected):
    assert parse_yes_no(text) is expected


def test_numbered_answers_sentences():
    text = (
        "For Question 1, `ALPHA` and `BETA` are the same entity.##\n"
        'For Question 2, "NO LIMIT LLC" and "NO LIMITS" are different entities.##\n'
        "For Question 3, `SAME DAY INC` and `DIFFERENT DAY INC` are not the same entity.##\n"
        "For Question 4, I am not sure whether `X` and `Y` match."
    )
    assert parse_numbered_answers(text, 5) == [True, False, False, None, None]


def test_numbered_answers_compact_forms():
    text = "1. Yes\nQuestion 2: No\n3<|>yes\n**Q4**: same\n5) different\nQuestion 6:\nYes"
    assert parse_numbered_answers(text, 6) == [True, False, True, True, False, True]


def test_numbered_answers_conflicts_missing_and_out_of_range():
    text = (
        "For Question 1, `A` and `B` are the same entity. For Question 2, `C` and `D` are different entities.\n"
        "1. No\n"  # conflicts with the first answer to question 1
        "2. No\n"  # agrees with the first answer to question 2
        "Question 7: yes\n"  # there is no question 7
        "Question 0: no"
    )
    assert parse_numbered_answers(text, 4) == [None, False, None, None]
    assert parse_numbered_answers("", 2) == [None, None]
    assert parse_numbered_answers("I cannot answer these questions.", 3) == [None, None, None]
