"""Parsing LLM extraction answers (LightRAG / Microsoft GraphRAG tuple format) into records.

The prompts ask for records such as

    ("entity"<|>"CHARLES DARWIN"<|>"PERSON"<|>"English naturalist")##
    ("relationship"<|>"CHARLES DARWIN"<|>"HMS BEAGLE"<|>"sailed on"<|>"voyage"<|>9)##
    ("content_keywords"<|>"evolution, voyage")<|COMPLETE|>

Light relationships are (relationship, source, target, description, keywords, strength);
General (MS GraphRAG) relationships are (relationship, source, target, description, strength).
Real model output is messy, so the parser finds records by their start -- an opening parenthesis
(or the start of a line / a record delimiter) followed by a record type and the tuple delimiter --
rather than trusting the record delimiter.  It tolerates quotes of any kind, markdown fences,
bullets and bold, missing or stray record delimiters, chatter before/between/after records, a
missing completion marker, and the tuple delimiter with blanks around it.  Text after the
completion marker is ignored.  An answer that is JSON ({"entities": [...], "relationships": [...]},
or a flat list of records, which may name their kind in "type") instead of tuples is accepted too,
and so are tuples written with `|` or `,` between the fields instead of the asked delimiter (tried
only when the asked one gives no record; a comma separates fields only next to a quote or before
the closing strength, so the commas of a description stay in it).

Record rules:
- entity: (entity, name, type[, description...]); more than 4 fields -> the extra fields were a
  delimiter inside the description and are joined back with the delimiter text.  Empty name ->
  malformed; empty type -> "UNKNOWN"; a sentence in the type's place (quotes, more than 5 words)
  -> "UNKNOWN", the sentence the description if there is none.  Names that differ only in
  case/quotes are one entity (first display name and first known type kept; different
  descriptions appended with "\\n").
- relationship / relation: (relationship, source, target[, description[, ...]]).  4 fields: no
  strength.  5 fields: the last is the strength (General) -- unless it is not a number: then a
  keyword list (Light without strength) when it has a comma or semicolon or is at most 4 words,
  else the rest of the description.  6 or more fields: the
  last is the strength, the one before it the keywords, the rest is the description.  A strength
  that is not a number ("high", "", "N/A") is `default_weight`; "8/10" is 8.0.
- Relations to entities not extracted in the same answer, and self-relations, are dropped and
  counted in `Extraction.dropped_relations`.  A relation repeated for the same (unordered) pair in
  one answer (gleaning repeats records) is kept once: descriptions appended, keywords unioned,
  the larger weight kept.
- Record ends: `)` (also `))` after a quote, and with pieces of delimiters after it: `)<|`), or `>`
  after a quote or a word (`..."desc">`); the completion marker also without its angle brackets;
  `|>` between two quoted fields is the tuple delimiter with its `<` dropped.
- Truncation: when the answer has no completion marker, its last record is dropped (and counted
  as malformed) if it lacks its closing parenthesis or its last field opens a quote it never closes.
- content_keywords / high_level_keywords: comma/semicolon separated keywords.

Also: `parse_yes_no` for "continue extracting?" checks and `parse_numbered_answers` for
entity-resolution answers ("For Question 1, `A` and `B` are the same entity.").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from graphrag_pipeline.extract.records import Entity, Extraction, Relation, clean_name, clean_type, entity_key
from graphrag_pipeline.llm.json_answers import load_json

__all__ = ["ParseResult", "parse_extraction", "parse_yes_no", "parse_numbered_answers"]

_QUOTE_CHARS = "\"'`\u201c\u201d\u2018\u2019\u300c\u300d\u300e\u300f\u00ab\u00bb\u201e\u201a"
_OPENING = {"\u201d": "\u201c", "\u2019": "\u2018", "\u300d": "\u300c", "\u300f": "\u300e", "\u00bb": "\u00ab"}
_Q = "[" + re.escape(_QUOTE_CHARS) + "]"

_ENTITY_KINDS = {"entity"}
_RELATION_KINDS = {"relationship", "relation", "relationships", "relations"}
_KEYWORD_KINDS = {"content_keywords", "high_level_keywords"}
_KNOWN_KINDS = _ENTITY_KINDS | _RELATION_KINDS | _KEYWORD_KINDS

# tuple delimiters some models write instead of the one asked for: ("entity"|"NAME"|"TYPE"|...) and
# ("entity", "NAME", "TYPE", ...); tried only when the asked one gives no record
_OTHER_DELIMITERS = ("|", ",")

_KEYWORD_SPLIT = re.compile(r"[,;\uff0c\uff1b\u3001]")
_FENCE = re.compile(r"^[ \t]*```[^\n]*$", re.MULTILINE)
# what may precede a record start on its line: bullets, numbering, bold, quotes, blanks
_LINE_PREFIX = re.compile(r"^(?:[ \t>*`]|[-+\u2022](?=[ \t])|\d{1,3}[.)](?=[ \t]))*$")
_NUMBER = re.compile(
    r"^\(?\s*([+-]?\d+(?:[.,]\d+)?|[+-]?\.\d+)\s*\.?\s*(?:/\s*\d+(?:\.\d+)?|out\s+of\s+\d+(?:\.\d+)?)?\s*\)?$",
    re.IGNORECASE,
)


@dataclass
class ParseResult:
    extraction: Extraction
    records: int = 0  # records recognised and parsed
    malformed: int = 0  # record-like fragments that could not be parsed
    explicit_empty: bool = field(default=False, repr=False)  # the answer said "nothing" on purpose

    @property
    def ok(self) -> bool:
        """At least one valid record, or an explicit empty answer (e.g. only the completion marker)."""
        return self.records > 0 or (self.explicit_empty and self.malformed == 0)


# ---------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------


def _unquote(text: str) -> str:
    """Strip blanks, markdown bold and one pair of surrounding quotes (a lone stray closing quote too)."""
    s = text.strip()
    while len(s) >= 4 and s.startswith("**") and s.endswith("**"):
        s = s[2:-2].strip()
    opened = bool(s) and s[0] in _QUOTE_CHARS
    if opened and len(s) >= 3 and s[-1] in ")>\uff09" and s[-2] in _QUOTE_CHARS:
        s = s[:-1]  # `"text")`, `"text">`: a record's end left after the closing quote
    if opened and s[-1] not in _QUOTE_CHARS and _balanced(s):
        return s.strip()  # `"Person" is a character`: the text starts with a quoted word
    if opened:
        s = s[1:]
    if s and s[-1] in _QUOTE_CHARS:
        last = s[-1]
        if opened:
            s = s[:-1]
        else:
            opening = _OPENING.get(last)
            stray = s.count(last) > s.count(opening) if opening else s.count(last) % 2 == 1
            if stray:
                s = s[:-1]
    return s.strip()


def _plausible_type(etype: str) -> bool:
    """An entity type is a word or a short phrase: no quotes inside, at most 5 words, 60 characters."""
    t = etype.strip()
    return len(t) <= 60 and len(t.split()) <= 5 and not any(q in t for q in _QUOTE_CHARS)


_WRAPPED = re.compile(r"^<([^<>/\\.|]+)>$")


def _bracketed(text: str) -> str | None:
    """`<X>` -> `X` (no path or other bracket inside); None when the text is not in brackets."""
    m = _WRAPPED.match(text)
    return m.group(1).strip() if m else None


def _placeholder_value(text: str) -> str | None:
    """`<Charles Darwin>` -> `Charles Darwin`: a value inside the prompt's placeholder brackets
    (<entity_name>), told from a name written with brackets (`<html>`, `<T>`, `<linux/module.h>`) by
    a blank or a character outside ASCII inside; None when it is not one."""
    inner = _bracketed(text)
    return inner if inner is not None and (" " in inner or not inner.isascii()) else None


def _unwrap_entity(name: str, etype: str, description: str) -> tuple[str, str, str]:
    """An entity record whose values sit in placeholder brackets (`<name>`, `<category>`), unwrapped:
    the name when it is a placeholder value, or when the type is in brackets too; then also the
    type, and a `>` left at the end of the description (`desc>`)."""
    bare_type = _bracketed(etype)
    value = _placeholder_value(name) if bare_type is None else _bracketed(name)
    if value is None and bare_type is None:
        return name, etype, description
    name = name if value is None else value
    etype = etype if bare_type is None else bare_type
    if description.endswith(">") and "<" not in description and not description.endswith(("->", "=>")):
        description = description[:-1].rstrip()
    return name, etype, description


def _balanced(s: str) -> bool:
    """Whether the quote that opens `s` is closed further on in it."""
    opening = s[0]
    closing = next((k for k, v in _OPENING.items() if v == opening), opening)
    if closing == opening:
        return s.count(opening) % 2 == 0
    return s.count(closing) >= s.count(opening)


def _split_keywords(text: str) -> list[str]:
    out: list[str] = []
    for part in _KEYWORD_SPLIT.split(text):
        k = _unquote(_unquote(part).strip("<|>"))  # pieces of a delimiter around a keyword dropped
        if k and k not in out:
            out.append(k)
    return out


def _parse_weight(value) -> float | None:
    """A number from a strength field: 7, "7.5", "8/10" -> 8.0, "(9)"; None when it is not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value == value and abs(value) != float("inf") else None
    m = _NUMBER.match(_unquote(str(value)))
    if not m:
        return None
    return float(m.group(1).replace(",", "."))


def completion_pattern(completion_delimiter: str) -> re.Pattern:
    """The completion marker as written: exactly, anywhere; or, at the end of a line, without one or
    both of its angle brackets (`|COMPLETE|`, `<|COMPLETE|`)."""
    pattern = re.escape(completion_delimiter)
    core = completion_delimiter.strip("<>")
    if core and core != completion_delimiter:
        pattern += "|<?" + re.escape(core) + ">?(?=[ \t*`]*(?:\n|$))"
    return re.compile(pattern, re.IGNORECASE)


def strip_completion(text: str, completion_delimiter: str) -> tuple[str, bool]:
    """The answer before its completion marker (what follows is chatter), and whether it had one."""
    if not completion_delimiter:
        return text, False
    m = completion_pattern(completion_delimiter).search(text)
    if m is None:
        return text, False
    return text[: m.start()], True


# ---------------------------------------------------------------------------------------------
# tuple records
# ---------------------------------------------------------------------------------------------


@dataclass
class _Collected:
    entities: dict[str, list] = field(default_factory=dict)  # key -> [name, type, [descriptions]]
    relations: list[tuple[str, str, str, list[str], float]] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)
    records: int = 0
    malformed: int = 0

    def add_entity(self, name: str, etype: str, description: str) -> bool:
        name = clean_name(name)
        key = entity_key(name)
        if not key:
            return False
        description = description.strip()
        if not _plausible_type(etype):  # a sentence where the type goes: the description, of no known type
            description = description or etype.strip()
            etype = ""
        etype = clean_type(etype)
        slot = self.entities.get(key)
        if slot is None:
            self.entities[key] = [name, etype, [description] if description else []]
        else:
            if slot[1] == "UNKNOWN" and etype != "UNKNOWN":
                slot[1] = etype
            if description and description not in slot[2]:
                slot[2].append(description)
        return True

    def add_relation(self, source: str, target: str, description: str, keywords: list[str], weight: float) -> bool:
        source, target = clean_name(source), clean_name(target)
        if not entity_key(source) or not entity_key(target):
            return False
        self.relations.append((source, target, description.strip(), keywords, weight))
        return True

    def _endpoint(self, name: str) -> str:
        """The entity key a relation's end names; `<X>` names entity X when only X was extracted."""
        key = entity_key(name)
        inner = _bracketed(name) if key not in self.entities else None
        return entity_key(inner) if inner is not None and entity_key(inner) in self.entities else key

    def add_keywords(self, keywords: list[str]) -> None:
        for k in keywords:
            if k not in self.keywords:
                self.keywords.append(k)

    def build(self, chunk_id: str) -> Extraction:
        entities = [
            Entity(name=name, type=etype, description="\n".join(descs), source_id=chunk_id)
            for name, etype, descs in self.entities.values()
        ]
        relations: dict[tuple[str, str], Relation] = {}
        dropped = 0
        for source, target, description, keywords, weight in self.relations:
            s, t = (self._endpoint(x) for x in (source, target))
            if s not in self.entities or t not in self.entities or s == t:
                dropped += 1
                continue
            pair = (min(s, t), max(s, t))
            rel = relations.get(pair)
            if rel is None:
                relations[pair] = Relation(
                    source=self.entities[s][0],
                    target=self.entities[t][0],
                    description=description,
                    keywords=list(keywords),
                    weight=weight,
                    source_id=chunk_id,
                )
                continue
            if description and description not in rel.description.split("\n"):
                rel.description = f"{rel.description}\n{description}" if rel.description else description
            rel.keywords.extend(k for k in keywords if k not in rel.keywords)
            rel.weight = max(rel.weight, weight)
        return Extraction(
            entities=entities,
            relations=list(relations.values()),
            content_keywords=list(self.keywords),
            dropped_relations=dropped,
        )


def _record_start_pattern(tuple_delimiter: str) -> re.Pattern:
    return re.compile(
        r"(?P<paren>[(\uff08][ \t]*)?(?P<q1>"
        + _Q
        + r")?[ \t]*(?P<kind>[A-Za-z_][A-Za-z_ ]{0,40}?)[ \t]*(?P<q2>"
        + _Q
        + r")?\s*"
        + re.escape(tuple_delimiter)
        + r"[ \t]*",
        re.IGNORECASE,
    )


def _at_record_boundary(text: str, start: int, record_delimiter: str) -> bool:
    """A record without an opening parenthesis must start a line or follow a record delimiter / ')'."""
    line = text[text.rfind("\n", 0, start) + 1 : start]
    if record_delimiter and record_delimiter.strip() and record_delimiter in line:
        line = line[line.rfind(record_delimiter) + len(record_delimiter) :]
    else:
        stripped = line.rstrip(" \t*")
        if stripped.endswith((")", "\uff09")):
            line = ""
    return bool(_LINE_PREFIX.match(line))


_MENTION = re.compile(
    r"(?:[(\uff08]\s*" + _Q + r"?\s*(?:entity|relationship|relation|content_keywords|high_level_keywords)\b"
    r"|^[ \t>*`\-+\u2022]*(?:\d{1,3}[.)][ \t]*)?"
    + _Q
    + r"?(?:entity|relationship|relation|content_keywords|high_level_keywords)"
    r"\s*" + _Q + r"?\s*(?=[|<,\t]))()",
    re.IGNORECASE | re.MULTILINE,
)
# a record's end at the end of a line: `)` (after a closing quote also `))` and `">)`), then blanks or
# markdown
_PAREN = r"(?:(?<=" + _Q + r")>?[)\uff09]{1,2}|(?<![:;])[)\uff09])"
_CLOSE = re.compile(_PAREN + r"[ \t*`]*(?=\n|$)")
# where the record's end is sure (a record delimiter follows, or the answer has its completion
# marker), also: `)` with a piece of a delimiter stuck to it (`)<|`, `)<|>`, `)|`), and `>` after a
# closing quote or a word (`..."desc">`: models that end records the way <|> ends), when no `)` ends it
_CLOSE_PIECES = re.compile(_PAREN + r"(?:<\|?>?|\|>?)[ \t*`]*(?=\n|$)")
_CLOSE_ANGLE = re.compile(r"(?:(?<=" + _Q + r")|(?<=\w))>[ \t*`]*(?=\n|$)")


_PAREN_LINE = re.compile(r"[ \t>*`\-]*[(\uff08]")


def _line_start(text: str, match: re.Match) -> int:
    return text.rfind("\n", 0, match.start()) + 1


def _record_body(segment: str, record_delimiter: str, sure_end: bool = False) -> tuple[str, bool]:
    """The fields text of one record (without the closing parenthesis) and whether it was closed.

    The segment runs from after the record's first tuple delimiter to the next record start.
    It ends at the first record delimiter, and before that at the last ')' that ends a line (what
    follows on later lines is chatter, as is a later line in parentheses or ending in a smiley).
    Neither -> not closed (maybe truncated). Where the end is sure (delimited, another record
    follows, or the answer is complete), the looser ends of _CLOSE_PIECES / _CLOSE_ANGLE count too.
    """
    delimited = False
    if record_delimiter and record_delimiter.strip():
        cut = segment.find(record_delimiter)
        if cut >= 0:
            segment, delimited = segment[:cut], True
    closes = list(_CLOSE.finditer(segment))
    if not closes and (delimited or sure_end):
        closes = list(_CLOSE_PIECES.finditer(segment)) or list(_CLOSE_ANGLE.finditer(segment))
    # a later line in parentheses ("(end of entities)") is chatter, not the record's end
    closes = [c for i, c in enumerate(closes) if i == 0 or not _PAREN_LINE.match(segment, _line_start(segment, c))]
    if closes:
        return segment[: closes[-1].start()], True
    return _FENCE.sub("", segment).rstrip(" \t\r\n*`"), delimited


def _unterminated(field_text: str, closed: bool = False) -> bool:
    """A field that opens a quote and never closes it (the answer was cut inside it). In a closed
    record, a field whose first quote is closed further on (`"Person" is a character`) is whole."""
    s = field_text.strip()
    if not s or s[0] not in _QUOTE_CHARS or (len(s) > 1 and s[-1] in _QUOTE_CHARS):
        return False
    return not (closed and _balanced(s))


# A comma separates fields only where a quoted field ends or begins, or before a closing number (the
# strength): descriptions are full of commas
_COMMA_FIELDS = re.compile(r"(?<=[\"'\u201d\u2019])[ \t]*,\s*|\s*,[ \t]*(?=[\"'\u201c\u2018]|[-+]?\d+(?:\.\d+)?\s*$)")


def _separator(tuple_delimiter: str) -> re.Pattern:
    if tuple_delimiter == ",":
        return _COMMA_FIELDS
    if tuple_delimiter == "<|>":  # also "|>" between two quoted fields: the "<" dropped
        return re.compile(r"\s*(?:<\|>|(?<=" + _Q + r")\|>(?=\s*" + _Q + r"))\s*")
    return re.compile(r"\s*" + re.escape(tuple_delimiter) + r"\s*")


class _Fields(list):
    """The fields of a record, remembering where they were so that a run of fields split by a
    delimiter that really belonged to the text can be joined back exactly as written."""

    def __init__(self, body: str, tuple_delimiter: str):
        self.body = body
        self.spans: list[tuple[int, int]] = []
        pos = 0
        for m in _separator(tuple_delimiter).finditer(body):
            self.spans.append((pos, m.start()))
            pos = m.end()
        self.spans.append((pos, len(body)))
        super().__init__(body[a:b] for a, b in self.spans)
        while len(self) > 1 and not self[-1].strip():  # a delimiter before the record's end: no field
            self.pop()
            self.spans.pop()

    def joined(self, start: int, stop: int | None = None) -> str:
        """Fields start..stop-1 as one unquoted text (with the delimiters between them)."""
        spans = self.spans[start:stop]
        if not spans:
            return ""
        return _unquote(self.body[spans[0][0] : spans[-1][1]])


# `<|` for `<|>` before a relation's closing strength, with the closing parenthesis of the text
# written before it: `..."desc")<|6)` (a 7B model's habit); read as `..."desc"<|>6)`
_BROKEN_STRENGTH = re.compile(r"(?<=" + _Q + r")[)\uff09]?[ \t]*<\|(?!>)[ \t]*(?=[-+]?\d+(?:\.\d+)?[ \t]*[)\uff09])")


def _second_group(tuple_delimiter: str) -> re.Pattern:
    """A record closed after its text and its last fields written as a second group on the same line:
    `("relationship"<|>"A"<|>"B"<|>"desc")<|>("keywords"<|>7)` (a 7B model's habit)."""
    d = re.escape(tuple_delimiter)
    return re.compile(
        r"(?<=" + _Q + r")[)\uff09][ \t]*" + d + r"[ \t]*[(\uff08]"
        r"(?=(?P<group>[^\n]{0,200}?)[ \t]*" + d + r"[ \t]*[-+]?\d+(?:\.\d+)?[ \t]*[)\uff09][ \t*`]*(?:\n|$))"
    )


def _mend_groups(text: str, tuple_delimiter: str) -> str:
    """Join a relation's second group back to it (see _second_group), and mend `<|` before a strength
    (see _BROKEN_STRENGTH). A second group that names a record kind is a record of its own."""
    if ")" not in text and "\uff09" not in text:
        return text

    def join(m: re.Match) -> str:
        group = m.group("group")
        line = text[text.rfind("\n", 0, m.start()) + 1 : m.start()]
        starts = _record_start_pattern(tuple_delimiter).match(line.lstrip(" \t>*`-"))
        kind = starts.group("kind").strip().lower().replace(" ", "_") if starts else None
        if kind not in _RELATION_KINDS or tuple_delimiter in group or _unquote(group).lower() in _KNOWN_KINDS:
            return m.group(0)
        return tuple_delimiter

    text = _second_group(tuple_delimiter).sub(join, text)
    if tuple_delimiter == "<|>":
        text = _BROKEN_STRENGTH.sub("<|>", text)
    return text


def _parse_tuples(
    text: str, tuple_delimiter: str, record_delimiter: str, answer_complete: bool, default_weight: float
) -> _Collected:
    col = _Collected()
    text = _mend_groups(text, tuple_delimiter)
    pattern = _record_start_pattern(tuple_delimiter)
    starts = []
    for m in pattern.finditer(text):
        kind = m.group("kind").strip().lower().replace(" ", "_")
        if kind not in _KNOWN_KINDS:
            if m.group("paren") and m.group("q1"):  # ("event"<|>...): a record of a type we do not know
                starts.append((m, None))
            continue
        if m.group("paren") or _at_record_boundary(text, m.start(), record_delimiter):
            starts.append((m, kind))

    # delimiter-bearing lines before the first record, and record-type mentions that never became
    # a record (the model used another tuple delimiter, for instance), are malformed fragments
    first = starts[0][0].start() if starts else len(text)
    col.malformed += sum(1 for line in text[:first].splitlines() if tuple_delimiter in line)
    spans = [(m.start(), m.end()) for m, _ in starts]
    for m in _MENTION.finditer(text):
        if not any(a <= m.end(1) <= b for a, b in spans):
            col.malformed += 1

    for i, (m, kind) in enumerate(starts):
        last = i == len(starts) - 1
        end = starts[i + 1][0].start() if not last else len(text)
        body, closed = _record_body(text[m.end() : end], record_delimiter, answer_complete or not last)
        if kind is None:
            col.malformed += 1
            continue
        fields = _Fields(body, tuple_delimiter)
        if last and not answer_complete and (not closed or _unterminated(fields[-1], closed)):
            col.malformed += 1  # cut mid-record: its last field is incomplete
            continue
        if _parse_fields(col, kind, fields, default_weight):
            col.records += 1
        else:
            col.malformed += 1
    return col


# a strength written as a word, or a number with a comment
_STRENGTH_WORD = re.compile(
    r"^(?:(?:very\s+)?(?:high|medium|moderate|low|strong|weak)|n/?a|none|unknown|-|[+-]?\d+(?:\.\d+)?\s*\(.*\))$",
    re.IGNORECASE,
)


_BARE_NUMBER = re.compile(r"^\s*[-+]?\d+(?:\.\d+)?\s*$")
_WHOLE_QUOTE = re.compile(r"^\s*" + _Q + r"[^\n]*" + _Q + r"\s*$")


def _parse_fields(col: _Collected, kind: str, fields: _Fields, default_weight: float) -> bool:
    if kind in _KEYWORD_KINDS:
        keywords = _split_keywords(", ".join(_unquote(f) for f in fields))
        col.add_keywords(keywords)
        return True
    if kind in _ENTITY_KINDS:
        if len(fields) < 2:
            return False
        # a score after a quoted description (an importance some models add) is not description
        scored = len(fields) == 4 and _WHOLE_QUOTE.match(fields[2]) and _BARE_NUMBER.match(fields[3])
        description = fields.joined(2, 3 if scored else None)
        return col.add_entity(*_unwrap_entity(_unquote(fields[0]), _unquote(fields[1]), description))
    # relationship
    if len(fields) < 2:
        return False
    source, target = _unquote(fields[0]), _unquote(fields[1])
    keywords: list[str] = []
    weight = default_weight
    description_end = len(fields)
    if len(fields) == 4:  # (description, strength) -- or (description, keywords) from a Light answer
        w, fourth = _parse_weight(fields[3]), _unquote(fields[3])
        if w is not None:
            weight = w
            description_end = 3
        elif _STRENGTH_WORD.match(fourth):  # "high", "N/A", "8 (strong)": a strength after all
            lead = re.match(r"\s*([+-]?\d+(?:\.\d+)?)", fourth)
            weight = float(lead.group(1)) if lead else default_weight
            description_end = 3
        elif "\n" not in fourth and (_KEYWORD_SPLIT.search(fourth) or len(fourth.split()) <= 4):
            keywords = _split_keywords(fourth)  # a keyword list, or one keyword
            description_end = 3
        # else: longer text, the description's second half (a delimiter inside it)
    elif len(fields) >= 5:  # (description..., keywords, strength)
        w = _parse_weight(fields[-1])
        weight = default_weight if w is None else w
        keywords = _split_keywords(_unquote(fields[-2]))
        description_end = len(fields) - 2
    return col.add_relation(source, target, fields.joined(2, description_end), keywords, weight)


# ---------------------------------------------------------------------------------------------
# JSON answers
# ---------------------------------------------------------------------------------------------

_ENTITY_LIST_KEYS = ("entities", "entity", "nodes")
_RELATION_LIST_KEYS = ("relationships", "relations", "relationship", "relation", "edges")
_KEYWORD_LIST_KEYS = ("content_keywords", "high_level_keywords")


def _first(obj: dict, *names: str, default=""):
    lowered = {str(k).lower(): v for k, v in obj.items()}
    for n in names:
        if n in lowered and lowered[n] is not None:
            return lowered[n]
    return default


def _as_text(value) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


_RELATION_ITEM_KEYS = {"source", "target", "src_id", "tgt_id", "source_entity", "target_entity"}


def _record_kind(item: dict) -> str:
    """The record kind an item of a flat JSON list names for itself ({"type": "entity", ...}), or ""."""
    kind = str(_first(item, "record_type", "kind", "type")).strip().lower()
    return kind if kind in _KNOWN_KINDS else ""


def _is_relation_item(item: dict) -> bool:
    kind = _record_kind(item)
    if kind:
        return kind in _RELATION_KINDS
    return bool(_RELATION_ITEM_KEYS & {str(k).lower() for k in item})


def _entity_type(item: dict) -> str:
    """An item's entity type; a "type" that names the record kind ("entity") is not one."""
    for name in ("entity_type", "type", "category", "label"):
        value = _as_text(_first(item, name))
        if value and value.strip().lower() not in _KNOWN_KINDS:
            return value
    return ""


def _load_json(text: str) -> dict | None:
    """The answer's JSON object with entity/relationship lists, or None. Tries each '{' / '[' start."""
    s = _FENCE.sub("", text).strip()
    starts = sorted(i for i in (s.find("{"), s.find("[")) if i >= 0)
    for start in starts:
        data = load_json(s[start:])
        if isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
            rels = [x for x in data if _is_relation_item(x)]
            ents = [x for x in data if not _is_relation_item(x)]
            data = {"entities": ents, "relationships": rels}
        if isinstance(data, dict):
            lowered = {str(k).lower(): v for k, v in data.items()}
            if any(k in lowered for k in _ENTITY_LIST_KEYS + _RELATION_LIST_KEYS + _KEYWORD_LIST_KEYS):
                return lowered
    return None


def _parse_json(text: str, default_weight: float) -> tuple[_Collected, bool] | None:
    """Collected records from a JSON answer, and whether it was an explicit empty answer; None if not JSON."""
    lowered = _load_json(text)
    if lowered is None:
        return None
    col = _Collected()
    for items in (lowered.get(k) for k in _ENTITY_LIST_KEYS):
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                col.malformed += 1
                continue
            ok = col.add_entity(
                _as_text(_first(item, "name", "entity_name", "entity", "title", "id")),
                _entity_type(item),
                _as_text(_first(item, "description", "entity_description", "desc")),
            )
            col.records, col.malformed = col.records + ok, col.malformed + (not ok)
    for items in (lowered.get(k) for k in _RELATION_LIST_KEYS):
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                col.malformed += 1
                continue
            kw = _first(item, "keywords", "relationship_keywords", default=[])
            w = _parse_weight(_first(item, "strength", "weight", "relationship_strength", default=""))
            ok = col.add_relation(
                _as_text(_first(item, "source", "src_id", "source_entity", "src", "from", "head")),
                _as_text(_first(item, "target", "tgt_id", "target_entity", "tgt", "to", "tail")),
                _as_text(_first(item, "description", "relationship_description", "desc")),
                _split_keywords(_as_text(kw)),
                default_weight if w is None else w,
            )
            col.records, col.malformed = col.records + ok, col.malformed + (not ok)
    for value in (lowered.get(k) for k in _KEYWORD_LIST_KEYS):
        if value:
            col.add_keywords(_split_keywords(_as_text(value)))
            col.records += 1
    return col, col.records == 0 and col.malformed == 0


# ---------------------------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------------------------


def parse_extraction(
    text: str,
    chunk_id: str,
    *,
    tuple_delimiter: str = "<|>",
    record_delimiter: str = "##",
    completion_delimiter: str = "<|COMPLETE|>",
    default_weight: float = 1.0,
) -> ParseResult:
    """Parse one extraction answer into an Extraction of chunk `chunk_id`. Never raises on odd text."""
    if not tuple_delimiter:
        raise ValueError("tuple_delimiter must not be empty")
    text = "" if text is None else str(text).replace("\r\n", "\n").replace("\r", "\n")
    body, complete = strip_completion(text, completion_delimiter)

    col = _parse_tuples(body, tuple_delimiter, record_delimiter, complete, default_weight)
    # the model said it was done and wrote nothing record-like: "no entities here"
    explicit_empty = complete and col.records == 0 and col.malformed == 0
    if col.records == 0 and ("{" in body or "[" in body):
        parsed = _parse_json(body, default_weight)
        if parsed is not None and (parsed[0].records or parsed[1]):
            col, json_empty = parsed
            explicit_empty = explicit_empty or json_empty
    if col.records == 0 and not explicit_empty:
        # no record with the asked delimiter: the model may have written its tuples with another one
        for other in _OTHER_DELIMITERS:
            if other != tuple_delimiter and other in body:
                alt = _parse_tuples(body, other, record_delimiter, complete, default_weight)
                if alt.entities and alt.records > alt.malformed:
                    col = alt
                    break
    return ParseResult(
        extraction=col.build(chunk_id), records=col.records, malformed=col.malformed, explicit_empty=explicit_empty
    )


_YES_NO = re.compile(
    r"^(yes|y|no|n|true|false|\u662f\u7684|\u662f|\u5426|\u4e0d\u662f)(?=$|[\s.,!;:\u3002\uff0c\uff01])", re.IGNORECASE
)


_NOTHING_MORE = re.compile(
    r"\b(?:no|not\s+any)\s+(?:more|additional|further|other|missing)\b(?!\s+than)"
    r"|\bnothing\s+(?:else|more|is\s+missing)\b",
    re.IGNORECASE,
)


def parse_yes_no(text: str) -> bool | None:
    """YES / Y / "yes." / "Yes, there are more" -> True; NO / N -> False; anything else -> None."""
    if text is None:
        return None
    s = re.sub(r"<\|[^|>]*\|>", " ", str(text))  # <|COMPLETE|> and the like
    s = _FENCE.sub("", s).strip().strip(_QUOTE_CHARS + "*_ \t\n>").strip()
    s = re.sub(r"^(?:answer|final answer)\s*[:：]\s*", "", s, flags=re.IGNORECASE).strip(_QUOTE_CHARS + "*_ ")
    m = _YES_NO.match(s)
    if not m:
        # "There are no more entities.": a sentence that says nothing is missing
        return False if _NOTHING_MORE.search(s) else None
    return m.group(1).lower() in ("yes", "y", "true", "\u662f", "\u662f\u7684")


_QUESTION_START = re.compile(
    r"^[\s>*_#`\-+\u2022]*(?:for\s+)?(?:question|q|answer)?\s*#?\s*(\d{1,4})(?![\d.]\d)\**"
    r"(?:\s*(?:<\|>|[.,:;)\]}>|\-\u2013\u2014\uff1a\uff0c\u3001])|\s+|$)",
    re.IGNORECASE,
)
_SPLIT_QUESTIONS = re.compile(r"(?=(?<![\w])(?:for\s+)?question\s*#?\s*\d)", re.IGNORECASE)
_NEGATIVE = re.compile(
    r"\bnot\s+(?:the\s+)?same\b|\bdifferent\b|\bdistinct\b|\bno\b|\bfalse\b|\bseparate\b|\bunrelated\b"
    r"|\u4e0d\u662f|\u4e0d\u540c|\u5426",
    re.IGNORECASE,
)
_POSITIVE = re.compile(r"\bsame\b|\byes\b|\btrue\b|\bidentical\b|\u76f8\u540c|\u662f", re.IGNORECASE)
_QUOTED = re.compile(r"`[^`]*`|\"[^\"]*\"|\u201c[^\u201d]*\u201d|\u300c[^\u300d]*\u300d")


def _verdict(text: str) -> bool | None:
    s = _QUOTED.sub(" ", text)  # entity names may contain "no", "same", ...
    negative = bool(_NEGATIVE.search(s))
    positive = bool(_POSITIVE.search(_NEGATIVE.sub(" ", s)))
    if negative == positive:
        return None
    return positive


def parse_numbered_answers(text: str, n: int, record_delimiter: str = "##") -> list[bool | None]:
    """One verdict per question 1..n of an entity-resolution answer: True = same entity.

    Accepts "For Question 1, `A` and `B` are the same entity." / "... are different entities." and
    compact forms ("1. Yes", "Question 3: No", "3<|>yes").  A question without an answer, with an
    unclear one, or with conflicting repeated answers gets None; numbers above n are ignored.
    """
    verdicts: dict[int, set[bool]] = {}
    text = "" if text is None else re.sub(r"<\|COMPLETE\|>", "\n", str(text), flags=re.IGNORECASE)
    pieces: list[str] = []
    for line in text.split(record_delimiter) if record_delimiter else [text]:
        for sub in line.split("\n"):
            pieces.extend(p for p in _SPLIT_QUESTIONS.split(sub) if p.strip())

    current: int | None = None
    current_has_verdict = False
    for piece in pieces:
        m = _QUESTION_START.match(piece)
        if m:
            current = int(m.group(1))
            v = _verdict(piece[m.end() :])
            current_has_verdict = v is not None
        elif current is not None and not current_has_verdict:
            v = _verdict(piece)  # "Question 1:" on one line, "Yes" on the next
            current_has_verdict = v is not None
        else:
            continue
        if v is not None and 1 <= current <= n:
            verdicts.setdefault(current, set()).add(v)
    return [next(iter(verdicts[i])) if len(verdicts.get(i, ())) == 1 else None for i in range(1, n + 1)]
