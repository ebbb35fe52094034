"""The `fast` extraction method: entities and relations without an LLM.

Offline, deterministic and pure Python. Entities are named-entity-like noun phrases:

* Latin/Cyrillic/Greek scripts: runs of Capitalized words (with lowercase connectors such as
  "of"/"de"/"van", honorifics like "Mr." attached, acronyms, hyphenated names), typed by simple
  keyword heuristics ("... Society" -> ORGANIZATION, "River ..." -> GEO, "Battle of ..." -> EVENT,
  "Dr. ..." -> PERSON).
  A multi-word name is also a PERSON when it starts with a common given name ("Charles Darwin"),
  or the sentence says so ("... was born", ", who", "the naturalist ..."); a one-word name that
  ends a PERSON name of the chunk ("Darwin") is a PERSON too.
* Chinese (Han script): jieba POS tags nr*/ns*/nt*/nz, and book titles in 《》 as WORK.

Relations are co-occurrences of two entities in one sentence, weighted by the number of sentences.
Sentences end at . ! ? 。！？； and at paragraph breaks, but run on across the line breaks of
hard-wrapped text (Project Gutenberg style); see `split_sentences`.

    extract_fast(text, chunk_id, max_entities=60) -> Extraction
"""

from __future__ import annotations

import bisect
import logging
import re
import threading
import unicodedata
import warnings
from dataclasses import dataclass

from graphrag_pipeline.extract.records import Entity, Extraction, Relation, clean_name, entity_key

__all__ = ["extract_fast"]

DESCRIPTION_LIMIT = 300  # max characters of an entity or relation description
MAX_KEYWORDS = 3  # relation keywords
MAX_CONTENT_KEYWORDS = 5
DENSE_SENTENCE = 6  # above this many entities, a sentence only links near neighbours
NEIGHBOURS = 2
MAX_NAME_WORDS = 8
MAX_WORD_CHARS = 40
KEYWORD_SCAN = 200  # tokens scanned on each side of a pair when looking for keywords
HEADING_MAX = 60  # a line at least this long never ends a sentence without punctuation

# --------------------------------------------------------------------------------------------
# Word lists (all lowercase)
# --------------------------------------------------------------------------------------------


def _words(s: str) -> frozenset[str]:
    return frozenset(s.split())


STOP_WORDS = _words(
    # English function words, pronouns and common sentence-initial adverbs
    """
    a an the and or but nor so yet if then else when whenever while whilst where wherever whereas
    whether why how what whatever which who whom whose whoever that this these those there here
    it its he him his she her hers they them their theirs we us our ours you your yours i me my
    mine myself himself herself itself themselves ourselves yourself yourselves one ones
    in on at by for from to of with without within into onto upon about above below after before
    during since until till through throughout between among amongst against across along around
    behind beyond despite except inside outside near over under via per as like unlike than
    toward towards beneath beside besides amid according including regarding following
    be is am are was were been being have has had having do does did done doing will would shall
    should can could might must ought not no yes all any both each every either neither few many
    much more most less least some such other another same own only also even just still too very
    quite rather almost already always never often sometimes soon now once again ever perhaps
    maybe indeed instead thus hence therefore however moreover furthermore nevertheless
    nonetheless meanwhile otherwise although though because unless accordingly consequently
    finally later first second third last next today yesterday tomorrow tonight suddenly
    eventually afterwards afterward subsequently initially originally unfortunately fortunately
    certainly clearly obviously actually really well oh ah alas let please thank thanks dear
    nothing something everything anything nobody everyone someone anyone none everybody somebody
    said says say see saw get got made make
    """
    # French
    """
    le la les un une des du de et ou mais donc car ni il elle ils elles nous vous je tu on ce cet
    cette ces son sa ses leur leurs dans sur sous avec sans pour par en au aux qui que quoi dont où
    est sont était pas plus
    """
    # German
    """
    der die das den dem des ein eine einer eines einem einen und oder aber ich du er sie es wir
    ihr mit zu im auf für ist sind war nicht auch als wie wenn dass bei nach aus um
    """
    # Spanish
    """
    el los las unos unas y o pero con por para del al es son fue su sus se lo sí como cuando donde
    este esta estos estas ese esa
    """
)

# Lowercase words allowed inside a name, between capitalized words.
CONNECTORS = _words("of the and de von van der la du da di del della des le los las el y zu ten ter bin ibn")
# Capitalized particles that may start a name when a capitalized word follows ("De Gaulle", "La Rochelle").
PARTICLES = _words("de da di del della van von der den du la le las los el al ter ten dos das")
# "Alexander the Great": the only cases where "the" joins two capitalized words directly.
EPITHETS = _words("great terrible conqueror elder younger wise bold confessor magnificent lionheart")
# Capitalized prefixes that do not make a name ("Anti-slavery", "Post-war").
PREFIXES = _words("anti pre post non mid pro ex neo pseudo semi sub trans ultra")

MONTHS_DAYS = _words(
    """
    january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec
    monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur thurs fri sat sun
    """
)
# Capitalized words that are never an entity on their own.
LONE_WORDS = _words(
    """
    chapter section part volume contents preface introduction appendix index note notes fig figure
    table page mr mrs ms dr st prof capt rev gen col lt sgt hon messrs mme mlle mt ft jr sr sir
    madam madame miss mister monsieur herr frau señor señora
    """
)

# Abbreviations written with a dot that still belong to the name that follows ("Mr. Darcy").
ABBR_TITLES = _words(
    "mr mrs ms dr st prof capt rev gen col lt sgt hon messrs mme mlle mt ft jr sr sen gov pres adm maj"
)
# A '.' after these words does not end a sentence.
NO_SPLIT = ABBR_TITLES | _words("vs cf ca approx fig vol pp cmdr cpl pvt esq rep")

PERSON_TITLES = _words(
    """
    mr mrs ms miss mister dr sir dame lord lady king queen prince princess captain capt professor
    prof rev reverend father brother sister mother uncle aunt general gen colonel col lieutenant
    lt major maj sergeant sgt admiral adm commander president pres senator sen governor gov judge
    bishop archbishop cardinal pope emperor empress tsar czar sultan duke duchess earl count
    countess baron baroness madame mme mademoiselle mlle monsieur herr frau señor señora don doña
    """
)
# Common given names: a multi-word name starting with one is a PERSON ("Charles Darwin"). Names
# that are also places or common capitalized words (Georgia, Virginia, Will, Mark, Grace, May,
# Norman, ...) are left out on purpose.
GIVEN_NAMES = _words(
    """
    aaron abraham adam adrian alan albert alexander alfred ambrose andrew angus anthony archibald
    arthur augustus bartholomew basil benedict benjamin bernard bertrand brian cecil cedric charles
    christopher clarence claude clement clifford colin conrad cornelius cyril daniel david dennis
    derek donald douglas duncan edgar edmund edward edwin elias elijah emmanuel eric ernest eugene
    ezra felix francis frank frederick gabriel geoffrey george gerald gilbert godfrey gordon graham
    gregory harold harry henry herbert horace horatio howard hubert hugh isaac isaiah jacob james
    jeremiah jeremy jesse john jonathan joseph joshua josiah julian julius kenneth lawrence leonard
    levi lionel louis lucas luke malcolm martin matthew michael moses nathan nathaniel neville
    nicholas nigel noah oliver oscar oswald patrick percy peter philip ralph raymond reginald
    richard robert roger ronald rudolph rupert samuel sebastian simon solomon stanley stephen
    theodore thomas timothy ulysses victor vincent wallace walter warren wilfred william winston
    zachary abigail ada agatha agnes alice amelia amy anna anne annie antoinette barbara beatrice
    beatrix bertha blanche bridget caroline cassandra catherine cecilia charlotte clara clarissa
    constance cornelia deborah diana dorothea dorothy edith eleanor elinor eliza elizabeth ellen
    elsie emily emma esther ethel eugenia eva evelyn fanny florence frances georgiana gertrude
    hannah harriet helen helena henrietta hester ida irene isabel isabella jane janet jessica joan
    joanna johanna josephine judith julia juliet kate katharine katherine kathleen laura lilian
    lillian louisa louise lucy lydia mabel margaret margery maria marian marianne marjorie martha
    mary matilda maud mildred miriam nancy nelly nora olive olivia pauline penelope phoebe rachel
    rebecca rosalie rosalind ruth sally sarah sophia sophie susan susanna teresa theresa ursula
    winifred jean pierre jacques françois francois henri antoine rené rene étienne etienne émile
    emile marcel michel paul andré andre gaston honoré honore nicolas maurice blaise auguste
    gustave camille marguerite jeanne madeleine geneviève genevieve simone marie johann johannes
    friedrich wilhelm heinrich karl carl ludwig wolfgang hans gottfried gustav otto max hermann
    ernst werner erwin fritz georg konrad dietrich albrecht franz immanuel rudolf gregor lise emmy
    hedwig giovanni giuseppe giacomo leonardo galileo alessandro antonio francesco lorenzo luigi
    marco niccolò niccolo pietro enrico vittorio dante michelangelo juan josé jose carlos miguel
    pedro diego fernando francisco manuel luis rafael vasco pieter willem hendrik christiaan niels
    søren soren anders lars nils gustaf tycho ivan dmitri fyodor lev leo nikolai nikola mikhail
    sergei alexei anton vladimir pyotr boris yuri tatiana natalia olga nicolaus
    """
)
# A lowercase word right before a multi-word name that marks it as a PERSON ("the naturalist ...").
ROLE_WORDS = _words(
    """
    naturalist mathematician physicist chemist scientist professor captain engineer author poet
    astronomer botanist geologist biologist philosopher explorer admiral emperor king queen
    zoologist anatomist physician surgeon inventor novelist painter composer historian
    """
)
# "In New York his ...": "his"/"her" or ", who" after a name that follows these is no person cue.
PREPOSITIONS = _words(
    """
    in at on from to of by near for with into onto across through throughout around over under
    after before during since until till toward towards within without between among against
    along beyond upon via about behind beside
    """
)
ORG_WORDS = _words(
    """
    society university college company corporation corp inc ltd institute institution school
    church cathedral abbey chapel bank academy museum laboratory laboratories council party army
    navy corps association agency committee commission department ministry club union federation
    foundation library hospital parliament senate congress board league press group trust guild
    brigade regiment fleet bureau government administration orchestra railway airlines monastery
    observatory seminary conservatory gallery
    """
)
GEO_WORDS = _words(
    """
    street road avenue lane river island islands isle isles mountain mountains mount mt hill hills
    sea ocean city bay lake county kingdom empire republic state states province district valley
    desert forest coast cape peninsula gulf strait straits channel harbour harbor port town village
    country continent canal falls glacier archipelago region
    """
)
EVENT_WORDS = _words(
    """
    war wars battle revolution prize expedition voyage treaty conference siege crisis rebellion
    uprising massacre election olympics festival exhibition summit award medal championship
    tournament
    """
)
TYPE_WORDS = (("ORGANIZATION", ORG_WORDS), ("GEO", GEO_WORDS), ("EVENT", EVENT_WORDS))
KEYWORD_TYPE_WORDS = ORG_WORDS | GEO_WORDS | EVENT_WORDS
_NAME_PARTS = CONNECTORS | PARTICLES

# Words kept in a quoted Title Case phrase ("On the Origin of Species").
TITLE_SMALL_WORDS = _words("a an the and or of in on to for at by with from de la le du des der die das und y el vs")

# jieba: POS flags kept as entities, and simple Chinese suffix heuristics for the generic `nz`.
HAN_TYPES = (("nr", "PERSON"), ("ns", "GEO"), ("nt", "ORGANIZATION"))
HAN_SUFFIX_TYPES = (
    ("ORGANIZATION", tuple("大学 学院 公司 银行 协会 学会 委员会 政府 研究所 博物馆".split())),
    ("GEO", tuple("省 市 县 江 河 山 湖 海 岛 州".split())),
    ("EVENT", tuple("战争 战役 革命 起义 运动".split())),
)
HAN_STOP_WORDS = _words(
    "没有 一个 我们 他们 你们 这个 那个 因为 所以 但是 已经 可以 进行 就是 还是 以及 这些 那些 自己 什么 如果 虽然 成为"
)

# --------------------------------------------------------------------------------------------
# Regular expressions
# --------------------------------------------------------------------------------------------

_HAN_RANGES = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff"
_HAN = re.compile(f"[{_HAN_RANGES}]")
_LETTER = f"[^\\W\\d_{_HAN_RANGES}]"  # a letter of any script but Han
_ALNUM = f"[^\\W_{_HAN_RANGES}]"
# A word: dotted acronym ("U.S."), or letters/digits with inner hyphens and apostrophes.
_WORD = re.compile(f"(?:{_LETTER}\\.){{2,}}|{_LETTER}{_ALNUM}*(?:[-'\u2019]{_ALNUM}+)*")
_LINE_BREAKS = "\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029"
_PARAGRAPH_SEPARATORS = "\x0c\x1c\x1d\x1e\u2029"  # a line break that always ends a paragraph
_NEWLINE = re.compile(f"\r\n|[{_LINE_BREAKS}]")
_CLOSERS = "\"'\u201d\u2019\u00bb)]"  # closing quotes and brackets after a full stop
_CJK_CLOSERS = "\u201d\u2019\u300d\u300f\uff09)"
_BOUNDARY = re.compile(
    f"[.!?]+[{re.escape(_CLOSERS)}]*(?=\\s|$)"  # . ! ? followed by a blank or the end
    f"|[\u3002\uff01\uff1f\uff1b]+[{_CJK_CLOSERS}]*"  # 。！？；
)
_TAIL_WORD = re.compile(r"(\w+)$")
_SPACES = re.compile(r"\s+")
# A line break between two Han characters, or next to CJK punctuation, is a hard wrap, not a blank.
_CJK_PUNCT = "\u3001-\u303f\uff00-\uffef"
_WRAP = f"[^\\S{_LINE_BREAKS}]*(?:\r\n|[{_LINE_BREAKS}])\\s*"
_CJK_WRAP = re.compile(
    f"(?<=[{_HAN_RANGES}{_CJK_PUNCT}]){_WRAP}(?=[{_HAN_RANGES}])|(?<=[{_CJK_PUNCT}]){_WRAP}|{_WRAP}(?=[{_CJK_PUNCT}])"
)
# A line that starts a list item ("- ...", "* ...", "• ...", "12. ...", "3) ...").
_BULLET = re.compile("(?:[-*\u2022\u2023\u25e6\u25aa\u00b7]|\\d{1,3}[.)])\\s")
# A Chinese chapter heading ("第一章", "第十二回").
_HAN_CHAPTER = re.compile("第[\\d〇零一二三四五六七八九十百千两]+[章回节卷部篇集幕]")
_OPENERS = "\"'\u201c\u2018\u00ab([_"  # skipped before the first letter of a line
_CONTINUATION = ",;-\u2010\u2013\u2014(/&"  # a line ending in these goes on
_BOOK_TITLE = re.compile("\u300a([^\u300a\u300b]{1,50})\u300b")  # 《...》
_QUOTED = re.compile('["\u201c\u00ab]([^"\u201c\u201d\u00ab\u00bb]{3,100})["\u201d\u00bb]')
_TITLE_WORD = re.compile(r"[\w'\u2019-]+:?")
_NAME_WORD = re.compile(r"\w+")
# Person cues right after a name; "weak" ones do not count after a preposition.
_PERSON_AFTER = re.compile(r"\s+(?:was\s+born|died|married)\b|(?P<weak>\s*,\s*who|\s+(?:his|her))\b")
_PREVIOUS_WORD = re.compile(r"(\w+)\s+$")


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def extract_fast(text: str, chunk_id: str, *, max_entities: int = 60) -> Extraction:
    """Extract entities and co-occurrence relations from one chunk, without an LLM.

    Entities are returned most frequent first (ties by first appearance), at most `max_entities`;
    relations whose endpoints were cut are counted in `dropped_relations`. Never raises on odd text.
    """
    text = text if isinstance(text, str) else ("" if text is None else str(text))
    chunk_id = str(chunk_id)
    try:
        max_entities = max(0, int(max_entities))
    except (TypeError, ValueError):
        max_entities = 60
    doc = _Doc(text)
    mentions = _find_mentions(doc)
    return _build(doc, mentions, chunk_id, max_entities)


# --------------------------------------------------------------------------------------------
# Sentences
# --------------------------------------------------------------------------------------------


def split_sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the non-blank sentences of `text`.

    Splits on . ! ? and 。！？； (a '.' after an abbreviation ("Mr.", "e.g.") or an initial
    ("J. Smith") does not split, nor one inside a number ("3.5")). Line breaks are hard wraps
    unless `_line_cuts` says otherwise: a blank line always ends a sentence, a single line break
    only after a line ending in ':', a heading or a list item (and a '.' at the end of a line
    splits as it does anywhere).
    """
    spans: list[tuple[int, int]] = []
    start = 0
    for cut in _line_cuts(text):
        spans += _split_segment(text, start, cut)
        start = cut
    spans += _split_segment(text, start, len(text))
    return spans


def _split_segment(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The sentences of text[start:end], split at sentence-final punctuation."""
    spans: list[tuple[int, int]] = []
    for m in _BOUNDARY.finditer(text, start, end):
        if m.group().rstrip(_CLOSERS) == ".":
            tail = _TAIL_WORD.search(text, max(start, m.start() - 20), m.start())
            if tail:
                word = tail.group(1)
                if (len(word) == 1 and word.isalpha()) or word.lower() in NO_SPLIT:
                    continue
        if span := _stripped_span(text, start, m.end()):
            spans.append(span)
        start = m.end()
    if span := _stripped_span(text, start, end):
        spans.append(span)
    return spans


def _line_cuts(text: str) -> list[int]:
    """Offsets of the line breaks that end a sentence whatever the punctuation says.

    Paragraph breaks (a blank line, a form feed, U+2029) always do. Inside a paragraph, a line
    break ends a sentence after a line that `_ends_sentence` judges to be a heading, a list item or
    a line ending in ':'; any other line break is a hard wrap (the sentence goes on).
    """
    if not _NEWLINE.search(text):
        return []
    # (end of the line's content, its stripped content, its length with the indent, the break)
    lines: list[tuple[int, str, int, str]] = []
    pos = 0
    for m in _NEWLINE.finditer(text):
        line = text[pos : m.start()].rstrip()
        lines.append((m.start(), line.lstrip(), len(line), m.group()))
        pos = m.end()
    line = text[pos:].rstrip()
    lines.append((len(text), line.lstrip(), len(line), ""))
    lengths = sorted(n for _, line, n, _ in lines if line)
    median = lengths[len(lengths) // 2] if lengths else 0

    cuts: list[int] = []
    paragraph: list[tuple[int, str, int, str]] = []
    for k, (end, line, n, brk) in enumerate(lines):
        if line:
            paragraph.append((end, line, n, brk))
        if paragraph and (not line or brk in _PARAGRAPH_SEPARATORS or k == len(lines) - 1):
            # the wrap width: the paragraph's longest line, or the chunk's typical one if longer
            width = max(median, max(n for _, _, n, _ in paragraph))
            for (end_a, a, n_a, _), (_, b, _, _) in zip(paragraph, paragraph[1:]):
                if _ends_sentence(a, n_a, b, width):
                    cuts.append(end_a)
            cuts.append(paragraph[-1][0])
            paragraph = []
    return cuts


def _ends_sentence(line: str, length: int, nxt: str, width: int) -> bool:
    """Does a single line break after `line` (`length` characters with its indent; followed by
    `nxt`; both stripped) end a sentence?

    Yes after ':' (the other final punctuation splits anyway), between two list items, and after a
    Chinese chapter heading. Otherwise a line ending in a Han character goes on (Chinese hard wrap),
    and so does a line of HEADING_MAX characters or more, one ending in a connector (",", "-", a
    lowercase stop word) and one whose break is a hard wrap at `width` (the next line's first word
    would not have fit on it). What is left ends a sentence when the next line is a list item, or
    starts with a capital and the line itself does not start in lowercase (a heading, a title).
    """
    if line.rstrip(_CLOSERS + _CJK_CLOSERS).endswith((":", "\uff1a")):
        return True
    if _BULLET.match(line) and _BULLET.match(nxt):
        return True
    if _HAN.match(line[-1]):
        return len(line) < HEADING_MAX and _HAN_CHAPTER.match(line) is not None
    if len(line) >= HEADING_MAX or line[-1] in _CONTINUATION:
        return False
    tail = _TAIL_WORD.search(line)
    if tail and tail.group(1).islower() and tail.group(1) in STOP_WORDS:
        return False
    if length + 1 + len(nxt.split(None, 1)[0]) > width:
        return False  # the next word did not fit: a hard wrap
    if _BULLET.match(nxt):
        return True
    head = nxt.lstrip(_OPENERS)
    return bool(head) and head[0].isupper() and not line[0].islower()


def _stripped_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    """text[start:end] without surrounding white space; None when nothing else is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


class _Doc:
    """The chunk text with its sentences and lazily computed per-sentence data."""

    def __init__(self, text: str):
        self.text = text
        self.sentences = split_sentences(text)
        self.han_words: dict[int, list[tuple[int, str, str]]] = {}  # sentence -> (pos, word, flag)
        self.titles: dict[int, list[tuple[int, int]]] = {}  # sentence -> spans of WORK titles
        self._display: dict[int, str] = {}
        self._keyword_candidates: dict[int, tuple[list[int], list[str]]] = {}

    def sentence_text(self, i: int) -> str:
        """The sentence with blanks folded, trimmed to DESCRIPTION_LIMIT characters."""
        if i not in self._display:
            start, end = self.sentences[i]
            stop = min(end, start + 4 * DESCRIPTION_LIMIT)
            folded = _fold(self.text[start:stop])
            self._display[i] = _trim(folded, force=stop < end)
        return self._display[i]

    def keyword_candidates(self, i: int) -> tuple[list[int], list[str]]:
        """Positions and words of the content words of sentence i, in sentence order."""
        if i not in self._keyword_candidates:
            start, end = self.sentences[i]
            found: list[tuple[int, str]] = []
            for m in _WORD.finditer(self.text, start, end):
                w = m.group()
                if len(w) >= 4 and w[0].islower() and w.replace("-", "").isalpha():
                    lw = w.lower()
                    if lw not in STOP_WORDS:
                        found.append((m.start(), lw))
            titles = self.titles.get(i, [])
            for pos, word, flag in self.han_words.get(i, ()):
                if (
                    len(word) >= 2
                    and not _inside(titles, pos)
                    and (flag[:1] == "v" or flag in ("n", "vn", "an"))
                    and word not in HAN_STOP_WORDS
                    and _HAN.search(word)
                ):
                    found.append((pos, word))
            found.sort()
            self._keyword_candidates[i] = ([p for p, _ in found], [w for _, w in found])
        return self._keyword_candidates[i]


def _fold(s: str) -> str:
    """`s` on one line: hard wraps between CJK characters removed, other blanks folded to a space."""
    return _SPACES.sub(" ", _CJK_WRAP.sub("", s)).strip()


def _trim(s: str, limit: int = DESCRIPTION_LIMIT, force: bool = False) -> str:
    """`s` cut to at most `limit` characters (at a blank when possible), marked with '…' if cut."""
    if len(s) <= limit and not force:
        return s
    cut = s[: limit - 1]
    blank = cut.rfind(" ")
    if blank > limit // 2:
        cut = cut[:blank]
    return cut.rstrip() + "\u2026"


# --------------------------------------------------------------------------------------------
# Mentions
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Mention:
    key: str
    name: str
    type: str
    sentence: int
    start: int
    end: int


@dataclass(slots=True)
class _Tok:
    """A capitalized word or a lowercase connector of a candidate name."""

    text: str  # as written (possessive kept)
    base: str  # possessive "'s" removed
    lower: str  # base, lowercase, without a trailing dot
    start: int
    end: int
    cap: bool
    dotted: bool  # an abbreviation or initial followed by '.', e.g. "Mr." or "J."
    poss: bool
    initial: bool  # the first word of its sentence

    @property
    def acronym(self) -> bool:
        letters = self.base.replace(".", "")
        return 2 <= len(letters) <= 6 and self.base.isupper()


def _find_mentions(doc: _Doc) -> list[_Mention]:
    """All entity mentions of the chunk, in text order."""
    text = doc.text
    corroborated: set[str] = set()  # capitalized words seen away from a sentence start
    per_sentence: list[tuple[list[_Mention], list[list[_Tok]]]] = []
    for i, (start, end) in enumerate(doc.sentences):
        mentions, covered = _titles(text, i, start, end)
        doc.titles[i] = covered
        parts = [
            part for run in _latin_runs(text, start, end, covered, corroborated) for part in _split_run(run) if part
        ]
        if _HAN.search(text, start, end):
            mentions += _han_mentions(doc, i, covered)
        per_sentence.append((mentions, parts))

    result: list[_Mention] = []
    for i, (mentions, parts) in enumerate(per_sentence):
        for part in parts:
            mention = _latin_mention(part, i, corroborated, text, doc.sentences[i])
            if mention is not None:
                mentions.append(mention)
        mentions.sort(key=lambda m: (m.start, -m.end))
        result.extend(mentions)
    return result


def _titles(text: str, i: int, start: int, end: int) -> tuple[list[_Mention], list[tuple[int, int]]]:
    """WORK mentions for 《book titles》 and quoted Title Case phrases, and the spans they cover (sorted)."""
    matches = list(_BOOK_TITLE.finditer(text, start, end))
    sentence = text[start:end]
    if '"' in sentence or "\u201c" in sentence or "\u00ab" in sentence:
        matches += [m for m in _QUOTED.finditer(text, start, end) if _is_title_case(m.group(1))]
    mentions = [mention for m in matches if (mention := _title_mention(m, i)) is not None]
    return mentions, sorted((m.start, m.end) for m in mentions)


def _title_mention(m: re.Match, i: int) -> _Mention | None:
    name = clean_name(_CJK_WRAP.sub("", m.group(1)))
    key = entity_key(name)
    if key and any(ch.isalnum() for ch in key):
        return _Mention(key, name, "WORK", i, m.start(), m.end())
    return None


def _is_title_case(s: str) -> bool:
    """A quoted phrase looks like a title: 2-12 words, all capitalized but small words, no . , ! ?"""
    if any(ch in s for ch in ".,!?;"):
        return False
    words = s.split()
    if not 2 <= len(words) <= 12 or not all(_TITLE_WORD.fullmatch(w) for w in words):
        return False
    if not (words[0][0].isupper() or words[0][0].isdigit()):
        return False
    if not any(w.lower().rstrip(":") not in STOP_WORDS for w in words):
        return False
    return all(w[0].isupper() or w[0].isdigit() or w.lower() in TITLE_SMALL_WORDS for w in words)


def _inside(spans: list[tuple[int, int]], pos: int) -> bool:
    """Is `pos` inside one of the sorted (start, end) spans?"""
    if not spans:
        return False
    k = bisect.bisect_right(spans, (pos, float("inf"))) - 1
    return k >= 0 and spans[k][0] <= pos < spans[k][1]


def _latin_runs(
    text: str, start: int, end: int, covered: list[tuple[int, int]], corroborated: set[str]
) -> list[list[_Tok]]:
    """Runs of adjacent capitalized words (and the connectors between them) in one sentence."""
    runs: list[list[_Tok]] = []
    cur: list[_Tok] = []
    pending: list[_Tok] = []
    prev_end = -1
    prev_dotted = False
    first = True
    for m in _WORD.finditer(text, start, end):
        w = m.group()
        a, b = m.span()
        initial = first and not _HAN.search(text, start, a)
        first = False
        gap = text[prev_end:a] if prev_end >= 0 else ""
        adjacent = bool(cur) and (
            gap.isspace() or (prev_dotted and len(gap) > 1 and gap[0] == "." and gap[1:].isspace())
        )
        prev_end, prev_dotted = b, False
        if len(w) > MAX_WORD_CHARS or _inside(covered, a):
            cur, pending = _flush(cur, runs), []
            continue
        base, poss = w, False
        if len(w) > 2 and w[-2] in "'\u2019" and w[-1] in "sS":
            base, poss = w[:-2], True
        head = base[0]
        cap = head.isupper() or head.istitle()
        if cap and "-" in base and base.split("-", 1)[0].lower() in PREFIXES:
            cap = False
        if cap:
            lower = base.lower()
            dotted = text.startswith(".", b) and (len(base) == 1 or lower in ABBR_TITLES)
            prev_dotted = dotted
            if not initial:
                corroborated.add(base)
            tok = _Tok(w, base, lower.rstrip("."), a, b, True, dotted, poss, initial)
            if adjacent:
                cur.extend(pending)
            else:
                cur = _flush(cur, runs)
            pending = []
            cur.append(tok)
        elif adjacent and len(pending) < 2 and w in CONNECTORS:
            pending.append(_Tok(w, w, w, a, b, False, False, False, initial))
        else:
            cur, pending = _flush(cur, runs), []
    _flush(cur, runs)
    return runs


def _flush(cur: list[_Tok], runs: list[list[_Tok]]) -> list[_Tok]:
    if cur:
        runs.append(cur)
    return []


def _ends_with_type_word(toks: list[_Tok]) -> bool:
    return bool(toks) and toks[-1].lower in KEYWORD_TYPE_WORDS


def _split_run(run: list[_Tok]) -> list[list[_Tok]]:
    """Split a run into name candidates: at capitalized stop words, at "and"/"the" that do not
    join, and after a possessive unless the name goes on to a type word ("King's College")."""
    parts: list[list[_Tok]] = [[]]
    for i, t in enumerate(run):
        if t.cap and not t.dotted and t.lower in STOP_WORDS and t.lower not in _NAME_PARTS:
            parts.append([])
            continue
        if not t.cap and t.lower == "and" and not _and_joins(parts[-1], run[i + 1 :]):
            parts.append([])
            continue
        if not t.cap and t.lower == "the":
            after_connector = i > 0 and not run[i - 1].cap
            epithet = i + 1 < len(run) and run[i + 1].lower in EPITHETS
            if not (after_connector or epithet):
                parts.append([])
                continue
        parts[-1].append(t)
        if t.poss and i + 1 < len(run) and not _ends_with_type_word(run[i + 1 :]):
            parts.append([])
    return [_strip(p) for p in parts]


def _and_joins(left: list[_Tok], right: list[_Tok]) -> bool:
    """ "Government Code and Cypher School": "and" joins two multi-word halves of one name."""
    return (
        sum(t.cap for t in left) >= 2
        and not _ends_with_type_word(left)
        and bool(right)
        and right[0].cap
        and _ends_with_type_word(right)
    )


def _strip(part: list[_Tok]) -> list[_Tok]:
    """Remove leading stop words, articles, connectors and dates, and trailing connectors."""
    i, j = 0, len(part)
    while i < j:
        t = part[i]
        if t.dotted:
            break
        if t.cap and t.lower in PARTICLES and j - i > 1 and part[i + 1].cap:
            break
        if not t.cap or len(t.base) == 1 or t.lower in STOP_WORDS or t.lower in CONNECTORS:
            i += 1
        elif t.lower in MONTHS_DAYS and j - i > 1:
            i += 1
        else:
            break
    while j > i and (not part[j - 1].cap or len(part[j - 1].base) == 1 or part[j - 1].lower in CONNECTORS):
        j -= 1
    return part[i:j]


def _latin_mention(
    part: list[_Tok], sentence: int, corroborated: set[str], text: str, span: tuple[int, int]
) -> _Mention | None:
    """The mention for a name candidate of the sentence at `span`, or None if it is not entity-like."""
    first = part[0]
    if first.initial and not first.acronym and first.base not in corroborated:
        if len(part) == 1:
            return None  # "Suddenly", or a name only ever seen at a sentence start
        if first.lower.endswith("ly") and len(first.lower) >= 7:
            part = _strip(part[1:])  # "Eventually Darwin ..."
            if not part:
                return None
    if len(part) > MAX_NAME_WORDS:
        return None
    if len(part) == 1:
        t = part[0]
        letters = t.base.replace(".", "")
        if len(letters) < 2 or t.lower in LONE_WORDS or t.lower in MONTHS_DAYS or t.lower in STOP_WORDS:
            return None
    words = []
    for k, t in enumerate(part):
        last = k == len(part) - 1
        words.append(t.base + "." if t.dotted else (t.base if last else t.text))
    name = clean_name(" ".join(words))
    key = entity_key(name)
    if not key:
        return None
    start, end = part[0].start, part[-1].end
    etype = _latin_type(part)
    if etype == "ENTITY" and len(part) > 1 and _person_context(text, start, end, span):
        etype = "PERSON"
    return _Mention(key, name, etype, sentence, start, end)


def _person_context(text: str, start: int, end: int, span: tuple[int, int]) -> bool:
    """Does the sentence at `span` show the name at text[start:end] to be a person?

    "<name> was born / died / married", "<name>, who" and "<name> his/her" (the last two not after
    a preposition: "in New York, who ..."), or a role word before it ("the naturalist <name>").
    """
    after = _PERSON_AFTER.match(text, end, span[1])
    before = _previous_word(text, start, span[0])
    if after is not None:
        return after.lastgroup != "weak" or before not in PREPOSITIONS
    return before in ROLE_WORDS


def _previous_word(text: str, start: int, limit: int) -> str:
    """The lowercased word just before text[start] (only blanks between), or "" if there is none."""
    lo = max(limit, start - 40)
    m = _PREVIOUS_WORD.search(text, lo, start)
    if m is None or (m.start() == lo and lo > limit and text[lo - 1].isalnum()):
        return ""
    return m.group(1).lower()


def _latin_type(part: list[_Tok]) -> str:
    """Type from the head word ("Royal Society of London" -> Society), any type word, or a title."""
    words = [t.lower for t in part]
    head_end = next((k for k, t in enumerate(part) if not t.cap and t.lower != "and"), len(part))
    candidates = [words[head_end - 1]] if head_end > 0 else []
    candidates += list(reversed(words))
    for word in candidates:
        for etype, vocabulary in TYPE_WORDS:
            if word in vocabulary:
                return etype
    if words[0] in PERSON_TITLES:
        return "PERSON"
    if len(part) > 1 and _is_given_name(words[0]):
        return "PERSON"
    return "ENTITY"


def _is_given_name(word: str) -> bool:
    """Is the lowercase `word` (or its first half, "jean" of "jean-paul") a common given name?"""
    if not word.isascii():
        word = unicodedata.normalize("NFC", word)
    return word in GIVEN_NAMES or word.split("-", 1)[0] in GIVEN_NAMES


# --------------------------------------------------------------------------------------------
# Chinese
# --------------------------------------------------------------------------------------------

_JIEBA_LOCK = threading.Lock()
_POSSEG = None


def _posseg():
    """jieba.posseg, imported and initialised once per process, silently."""
    global _POSSEG
    if _POSSEG is None:
        with _JIEBA_LOCK:
            if _POSSEG is None:
                with warnings.catch_warnings():  # jieba's regexes warn about escapes on first compile
                    warnings.simplefilter("ignore")
                    import jieba
                    import jieba.posseg

                jieba.setLogLevel(logging.WARNING)
                logging.getLogger("jieba").setLevel(logging.WARNING)
                jieba.initialize()
                _POSSEG = jieba.posseg
    return _POSSEG


def _pos_tag(text: str, offset: int) -> list[tuple[int, int, str, str]]:
    """(start, end, word, flag) for the jieba POS-tagged words of `text`.

    Hard wraps between CJK characters are removed before tagging (a line break may fall inside a
    word, "南\\n京"), and positions are mapped back to `text`.
    """
    index: list[int] | None = None  # position in `text` of each character of the joined text
    if _CJK_WRAP.search(text):
        pieces, index, pos = [], [], 0
        for m in _CJK_WRAP.finditer(text):
            pieces.append(text[pos : m.start()])
            index.extend(range(pos, m.start()))
            pos = m.end()
        pieces.append(text[pos:])
        index.extend(range(pos, len(text)))
        text = "".join(pieces)
    out = []
    pos = 0
    for pair in _posseg().cut(text):
        word, flag = pair.word, pair.flag
        found = pos if text.startswith(word, pos) else text.find(word, pos)
        if found < 0 or not word:
            continue
        pos = found + len(word)
        if index is None:
            out.append((offset + found, offset + pos, word, flag))
        else:
            out.append((offset + index[found], offset + index[pos - 1] + 1, word, flag))
    return out


def _han_type(word: str, flag: str) -> str | None:
    """Entity type of a jieba word, or None if it is not a proper noun."""
    for prefix, etype in HAN_TYPES:
        if flag.startswith(prefix):
            return etype
    if flag == "nz":
        for etype, suffixes in HAN_SUFFIX_TYPES:
            if word.endswith(suffixes):
                return etype
        return "ENTITY"
    return None


def _han_mentions(doc: _Doc, i: int, covered: list[tuple[int, int]]) -> list[_Mention]:
    """Mentions of Chinese proper nouns in sentence i (words of one character dropped)."""
    out: list[_Mention] = []
    start, end = doc.sentences[i]
    words = _pos_tag(doc.text[start:end], start)
    doc.han_words[i] = [(pos, word, flag) for pos, _, word, flag in words]
    for pos, stop, word, flag in words:
        if len(word) < 2 or not _HAN.search(word) or _inside(covered, pos):
            continue
        etype = _han_type(word, flag)
        if etype is None:
            continue
        name = clean_name(word)
        key = entity_key(name)
        if key:
            out.append(_Mention(key, name, etype, i, pos, stop))
    return out


# --------------------------------------------------------------------------------------------
# Entities and relations
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Pair:
    source: str  # key of the entity first in the sentence
    target: str
    sentence: int
    weight: int = 1


def _build(doc: _Doc, mentions: list[_Mention], chunk_id: str, max_entities: int) -> Extraction:
    """Aggregate mentions into entities and co-occurrence relations, then apply the cap."""
    first: dict[str, _Mention] = {}
    count: dict[str, int] = {}
    etype: dict[str, str] = {}
    sentences_of: dict[str, list[int]] = {}
    for m in mentions:
        first.setdefault(m.key, m)
        count[m.key] = count.get(m.key, 0) + 1
        if etype.get(m.key, "ENTITY") == "ENTITY":
            etype[m.key] = m.type
        seen = sentences_of.setdefault(m.key, [])
        if len(seen) < 2 and (not seen or seen[-1] != m.sentence):
            seen.append(m.sentence)
    for key in _surnames_to_type(first, etype):
        etype[key] = "PERSON"

    order = {key: n for n, key in enumerate(first)}
    ranked = sorted(first, key=lambda k: (-count[k], order[k]))
    kept = ranked[:max_entities]
    kept_set = set(kept)

    entities = [
        Entity(
            name=first[k].name,
            type=etype[k],
            description=_entity_description(doc, sentences_of[k]),
            source_id=chunk_id,
        )
        for k in kept
    ]

    pairs = _pairs(mentions)
    relations = []
    dropped = 0
    for pair in pairs:
        if pair.source not in kept_set or pair.target not in kept_set:
            dropped += 1
            continue
        relations.append(
            Relation(
                source=first[pair.source].name,
                target=first[pair.target].name,
                description=doc.sentence_text(pair.sentence),
                keywords=_keywords(doc, pair, mentions, first),
                weight=float(pair.weight),
                source_id=chunk_id,
            )
        )
    return Extraction(
        entities=entities,
        relations=relations,
        content_keywords=[e.name for e in entities[:MAX_CONTENT_KEYWORDS]],
        dropped_relations=dropped,
    )


def _surnames_to_type(first: dict[str, _Mention], etype: dict[str, str]) -> list[str]:
    """The one-word ENTITYs that are the last word of a multi-word PERSON of the chunk: PERSONs too
    ("Darwin" after "Charles Darwin")."""
    surnames = {
        entity_key(m.name.rsplit(None, 1)[-1]) for key, m in first.items() if etype[key] == "PERSON" and " " in m.name
    }
    return [key for key, m in first.items() if key in surnames and etype[key] == "ENTITY" and " " not in m.name]


def _entity_description(doc: _Doc, sentences: list[int]) -> str:
    """The first sentence mentioning the entity, plus the second one when there is room."""
    text = doc.sentence_text(sentences[0])
    if len(sentences) > 1 and len(text) < DESCRIPTION_LIMIT - 40:
        text = _trim(text + " " + doc.sentence_text(sentences[1]))
    return text


def _sentence_entities(mentions: list[_Mention]) -> list[list[_Mention]]:
    """Per sentence, the first mention of each distinct entity, in sentence order."""
    grouped: list[list[_Mention]] = []
    current = -1
    seen: set[str] = set()
    for m in mentions:
        if m.sentence != current:
            grouped.append([])
            current, seen = m.sentence, set()
        if m.key not in seen:
            seen.add(m.key)
            grouped[-1].append(m)
    return grouped


def _pairs(mentions: list[_Mention]) -> list[_Pair]:
    """Co-occurring entity pairs, in order of first co-occurrence, weighted by sentence count."""
    pairs: dict[tuple[str, str], _Pair] = {}
    for group in _sentence_entities(mentions):
        n = len(group)
        if n < 2:
            continue
        if n <= DENSE_SENTENCE:
            links = [(a, b) for a in range(n) for b in range(a + 1, n)]
        else:
            chosen = set()
            for a in range(n):
                window = [b for b in range(max(0, a - NEIGHBOURS), min(n, a + NEIGHBOURS + 1)) if b != a]
                near = sorted(window, key=lambda b: (abs(b - a), b))
                chosen.update((min(a, b), max(a, b)) for b in near[:NEIGHBOURS])
            links = sorted(chosen)
        for a, b in links:
            src, tgt = group[a], group[b]
            pk = (src.key, tgt.key) if src.key < tgt.key else (tgt.key, src.key)
            pair = pairs.get(pk)
            if pair is None:
                pairs[pk] = _Pair(src.key, tgt.key, src.sentence)
            else:
                pair.weight += 1
    return list(pairs.values())


def _keywords(doc: _Doc, pair: _Pair, mentions: list[_Mention], first: dict[str, _Mention]) -> list[str]:
    """Up to 3 content words of the pair's first sentence: those between the two names first."""
    positions, words = doc.keyword_candidates(pair.sentence)
    if not words:
        return []
    spans = {}
    for m in _mentions_in(mentions, pair.sentence):
        if m.key in (pair.source, pair.target) and m.key not in spans:
            spans[m.key] = (m.start, m.end)
    left_end = spans.get(pair.source, (0, 0))[1]
    right_start = spans.get(pair.target, (left_end, left_end))[0]
    name_words = {w.casefold() for k in (pair.source, pair.target) for w in _NAME_WORD.findall(first[k].name)}
    names = (first[pair.source].key, first[pair.target].key)

    lo = bisect.bisect_left(positions, left_end)
    hi = bisect.bisect_left(positions, right_start)
    between = range(lo, min(hi, lo + KEYWORD_SCAN))
    before = range(lo - 1, max(-1, lo - 1 - KEYWORD_SCAN), -1)
    after = range(hi, min(len(words), hi + KEYWORD_SCAN))
    out: list[str] = []
    for idx in (*between, *after, *before):
        w = words[idx]
        if w in name_words or w in out or any(w in name for name in names if _HAN.search(w)):
            continue
        out.append(w)
        if len(out) == MAX_KEYWORDS:
            break
    return out


def _mentions_in(mentions: list[_Mention], sentence: int) -> list[_Mention]:
    """The mentions of one sentence (mentions are sorted by sentence)."""
    lo = bisect.bisect_left(mentions, sentence, key=lambda m: m.sentence)
    hi = bisect.bisect_right(mentions, sentence, key=lambda m: m.sentence)
    return mentions[lo:hi]
