"""A synthetic corpus for benchmarks: English prose about recurring people, organisations and
places, deterministic by seed.

Entities come from fixed pools (the pools never depend on the seed). Each document belongs to a
topic (Zipf-distributed); a topic has its own cast of entities plus the corpus-wide "hubs", so the
graph has real communities. Entities are drawn with Zipf-like frequencies, so a few recur across
thousands of documents (merges) and many are rare. Mentions use variant spellings of the same
entity - "Dr. Ada Byron" / "Ada Byron" / "Professor Byron", "Halden Shipping Company" / "the Halden
Shipping Co." - and a few pool entries are near-duplicates of each other, so entity resolution has
candidates to judge. Documents are 300-800 words in paragraphs; document ``i`` depends only on
(seed, i), so the first 1,000 documents of a 10,000-document corpus are the 1,000-document corpus.

    python benchmarks/corpus.py --docs 1000 --seed 1 --out DIR
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

FIRST = """Ada Adrian Agnes Albert Alice Amelia Arthur Beatrice Benedict Bertram Caroline Cecil Charlotte
Clara Conrad Cornelia Daniel Dorothy Edgar Edith Edmund Eleanor Elias Eliza Emil Esther Felix Florence
Frances Frederick Gilbert Grace Gregory Harriet Henry Hilda Hugo Ida Isaac Isabel Jacob Jane Jasper
Josephine Julian Julia Leonard Lillian Louis Lucy Magnus Margaret Martha Matthias Maud Miriam Nathaniel
Nora Oliver Olive Oscar Pauline Percival Philippa Quentin Rachel Roland Rosalind Rupert Sophia Stella
Theodore Tobias Ursula Victor Vivian Walter Wilhelmina Winifred Xavier Yvonne Zachary""".split()
LAST = """Abernathy Ashdown Babbington Barlow Beaumont Blackwood Bramley Byron Calloway Carrington Chadwick
Clifford Cromwell Dalton Davenport Delacroix Drummond Eastwood Ellery Fairfax Fenwick Fletcher Forsythe
Galloway Garrick Gilmore Grantham Halloway Harcourt Hartley Hawthorne Hollis Huxley Ingram Jennings
Kensington Kingsley Lancaster Langford Lockhart Lovelace Marlowe Merriweather Montague Morrow Northcote
Oakley Osborne Pembroke Prescott Quincy Radcliffe Ravenscroft Rowntree Sinclair Somerset Stanhope
Sterling Thornbury Townsend Underwood Vance Wainwright Whitcombe Wilberforce Winslow Yardley""".split()
TITLES = ["Dr.", "Professor", "Captain", "Judge", "Colonel", "Reverend"]
ORG_STEMS = """Halden Northwind Blackmere Greystone Ashford Eastmarch Silverbrook Kestrel Meridian Oakhaven
Redcliffe Stormhold Thornfield Westbury Whitmore Aldergate Brightwater Coldharbour Fairhaven Ironbridge
Juniper Larkspur Millbrook Newhaven Pinecrest Queensbury Riverside Sandringham Tidewater Valemont""".split()
ORG_KINDS = [
    ("Shipping Company", "Shipping Co."),
    ("Railway Company", "Railway Co."),
    ("Bank", "Bank"),
    ("Observatory", "Observatory"),
    ("Royal Academy", "Academy"),
    ("Institute of Natural History", "Institute"),
    ("Mining Corporation", "Mining Corp."),
    ("Society of Engineers", "Society"),
    ("University", "University"),
    ("Trading Company", "Trading Co."),
    ("Gazette", "Gazette"),
    ("Hospital", "Hospital"),
    ("Botanical Garden", "Botanical Garden"),
    ("Telegraph Company", "Telegraph Co."),
    ("Museum", "Museum"),
]
PLACE_STEMS = """Ardmore Ballinford Caldervale Dunmere Elderwick Farrowdale Glenhollow Harrowgate Inverlock
Kilbrannan Lindenfield Marrowby Netherstow Oldcastle Pellingham Ravensworth Saltmarsh Tarrington
Upperbridge Wexcombe Yarmouth Zennor Amberley Brackenridge Corrigan Drayfield Eskdale Fernhill Gorsedale
Hollowmere""".split()
PLACE_KINDS = ["", "Port ", "Lake ", "Mount ", "Fort ", "New ", "", ""]
PLACE_SUFFIX = ["", "", " Harbour", " Valley", " Bay", " Island", "", " Falls"]
EVENT_KINDS = [
    "Exhibition",
    "Conference",
    "Expedition",
    "Treaty",
    "Fire",
    "Strike",
    "Congress",
    "Regatta",
    "Flood",
    "Survey",
]
TOPICS = [
    "navigation",
    "railways",
    "astronomy",
    "medicine",
    "banking",
    "botany",
    "mining",
    "telegraphy",
    "shipbuilding",
    "geology",
    "printing",
    "chemistry",
    "surveying",
    "trade",
    "engineering",
    "meteorology",
]

NOUNS = """report survey letter instrument ledger map voyage cargo experiment lecture contract bridge
engine observatory telescope specimen harbour warehouse railway line factory mill account treaty
manuscript catalogue collection laboratory furnace reservoir canal lighthouse expedition charter
committee proposal measurement calculation chart journal archive loan""".split()
ADJS = """careful ambitious uncertain remarkable detailed costly modest bold patient famous obscure
thorough difficult promising lengthy decisive quiet sudden steady curious reliable disputed
celebrated neglected practical elaborate""".split()
VERBS_PP = [
    "met",
    "corresponded with",
    "worked alongside",
    "quarrelled with",
    "travelled with",
    "studied under",
    "advised",
    "succeeded",
    "trained",
    "wrote to",
    "praised",
    "criticised",
    "recommended",
    "defended",
]
VERBS_PO = [
    "joined",
    "founded",
    "left",
    "funded",
    "directed",
    "reorganised",
    "represented",
    "sued",
    "advised",
    "worked for",
    "lectured at",
    "wrote for",
    "resigned from",
    "was elected to",
]
VERBS_OO = [
    "merged with",
    "competed with",
    "lent money to",
    "signed an agreement with",
    "bought shares in",
    "supplied",
    "sued",
    "cooperated with",
]
VERBS_PL = ["travelled to", "settled in", "returned to", "left", "surveyed", "lectured in", "was born in", "died in"]
VERBS_OL = [
    "opened an office in",
    "built a depot near",
    "moved its headquarters to",
    "closed its branch in",
    "acquired land at",
    "sent a delegation to",
]
YEARS = list(range(1801, 1900))
_AN = re.compile(r"\b([Aa]) ([aeiouAEIOU])")

SENTENCES = {
    "pp": [
        "In {year}, {P1} {vpp} {P2} in {L1}.",
        "{P1} {vpp} {P2} after the {adj} {noun} was published.",
        "According to {P2}, {P1} had {vpp_past} the wrong conclusion about the {noun}.",
        "The {noun} that {P1} and {P2} prepared together in {year} was {adj}.",
        "Letters show that {P1} {vpp} {P2} for many years.",
    ],
    "po": [
        "{P1} {vpo} {O1} in {year}.",
        "In {year}, {P1} {vpo} {O1}, a decision many thought {adj}.",
        "As a member of {O1}, {P1} presented a {adj} {noun} to the board.",
        "{O1} hired {P1} to oversee the {noun} in {L1}.",
    ],
    "oo": [
        "{O1} {voo} {O2} during the crisis of {year}.",
        "By {year}, {O1} had {voo} {O2}, and the {noun} changed hands.",
    ],
    "pl": [
        "{P1} {vpl} {L1} in {year}.",
        "In {L1}, {P1} kept a {adj} {noun} that survives today.",
        "The people of {L1} remembered {P1} as {adj} and generous.",
    ],
    "ol": [
        "{O1} {vol} {L1} in {year}.",
        "The {noun} of {O1} at {L1} was considered {adj}.",
    ],
    "e": [
        "During the {E1}, {P1} met {P2} for the first time.",
        "{O1} sponsored the {E1}, which drew visitors from {L1}.",
        "The {E1} of {year} ended with a {adj} {noun}.",
    ],
    "filler": [
        "The weather that season was {adj}, and the work went slowly.",
        "Nobody expected the {noun} to matter as much as it did.",
        "Several copies of the {noun} were lost in a later fire.",
        "It was a {adj} time for everyone involved in {topic}.",
        "Historians still disagree about the purpose of the {noun}.",
        "Costs rose every month, and the {noun} was delayed twice.",
        "The newspapers described the {noun} as {adj}.",
    ],
}
PAST = {
    "met": "met",
    "corresponded with": "told",
    "worked alongside": "shared",
    "quarrelled with": "drawn",
    "travelled with": "reached",
    "studied under": "reached",
    "advised": "reached",
    "succeeded": "reached",
    "trained": "taught",
    "wrote to": "sent",
    "praised": "drawn",
    "criticised": "drawn",
    "recommended": "drawn",
    "defended": "drawn",
}


@dataclass(frozen=True)
class Entity:
    kind: str  # person | org | place | event
    name: str
    variants: tuple[str, ...]


def _people(rng: random.Random, n: int) -> list[Entity]:
    out, seen = [], set()
    combos = list(itertools.product(FIRST, LAST))
    rng.shuffle(combos)
    for first, last in combos[:n]:
        name = f"{first} {last}"
        title = rng.choice(TITLES)
        initial = f"{first[0]}. {last}"
        variants = (name, name, name, f"{title} {name}", f"{title} {last}", initial)
        out.append(Entity("person", name, variants))
        seen.add(name)
    # near-duplicate entries in the pool: a different spelling used by other documents
    for e in list(out[: n // 25]):
        first, last = e.name.split(" ", 1)
        alt = last[:-2] + last[-1] + last[-2] if len(last) > 4 else last + "e"  # transposed letters
        typo = f"{first} {alt}"
        if typo not in seen:
            out.append(Entity("person", typo, (typo, typo, f"Dr. {typo}")))
            seen.add(typo)
    return out


def _orgs(rng: random.Random, n: int) -> list[Entity]:
    combos = list(itertools.product(ORG_STEMS, ORG_KINDS))
    rng.shuffle(combos)
    out = []
    for stem, (kind, short) in combos[:n]:
        name = f"{stem} {kind}"
        out.append(Entity("org", name, (name, name, f"the {name}", f"{stem} {short}")))
    return out


def _places(rng: random.Random, n: int) -> list[Entity]:
    out, seen = [], set()
    for stem in PLACE_STEMS:
        for pre, suf in zip(PLACE_KINDS, PLACE_SUFFIX):
            name = f"{pre}{stem}{suf}"
            if name not in seen:
                seen.add(name)
                out.append(Entity("place", name, (name,)))
    rng.shuffle(out)
    return out[:n]


def _events(rng: random.Random, places: list[Entity], n: int) -> list[Entity]:
    out = []
    for i in range(n):
        place = places[i % len(places)].name
        kind = EVENT_KINDS[i % len(EVENT_KINDS)]
        name = f"{place} {kind}"
        out.append(Entity("event", name, (name,)))
    return out


class Pools:
    """Fixed entity pools (independent of the corpus seed) and topic casts."""

    def __init__(self, people: int = 3000, orgs: int = 400, places: int = 240, events: int = 200, topics: int = 120):
        rng = random.Random(20240601)
        self.people = _people(rng, people)
        self.orgs = _orgs(rng, orgs)
        self.places = _places(rng, places)
        self.events = _events(rng, self.places, events)
        self.by_kind = {"person": self.people, "org": self.orgs, "place": self.places, "event": self.events}
        # each topic has a cast: ~1/topics of each pool, plus hubs shared by everyone
        self.casts = []
        for t in range(topics):
            cast = {}
            for kind, pool in self.by_kind.items():
                size = max(4, len(pool) // topics * 2)
                cast[kind] = [pool[(t * 7919 + k * 104729) % len(pool)] for k in range(size)]
                cast[kind] = list(dict.fromkeys(cast[kind]))
            self.casts.append(cast)
        self.topic_names = [f"{TOPICS[t % len(TOPICS)]}" for t in range(topics)]
        self._cum: dict[int, list[float]] = {}

    def zipf_index(self, rng: random.Random, n: int, s: float = 1.05) -> int:
        cum = self._cum.get(n)
        if cum is None:
            total, cum = 0.0, []
            for k in range(1, n + 1):
                total += 1.0 / k**s
                cum.append(total)
            self._cum[n] = cum
        return min(n - 1, bisect.bisect_left(cum, rng.random() * cum[-1]))


_POOLS: Pools | None = None


def pools() -> Pools:
    global _POOLS
    if _POOLS is None:
        _POOLS = Pools()
    return _POOLS


def _pick(rng: random.Random, p: Pools, cast: dict, kind: str) -> Entity:
    if rng.random() < 0.75:
        lst = cast[kind]
        return lst[p.zipf_index(rng, len(lst), 0.9)]
    lst = p.by_kind[kind]
    return lst[p.zipf_index(rng, len(lst), 1.1)]


def _mention(rng: random.Random, e: Entity, first: bool) -> str:
    return e.name if first else rng.choice(e.variants)


def _sentence(rng: random.Random, p: Pools, doc_cast: dict, topic: str, seen: set) -> str:
    kind = rng.choices(list(SENTENCES), weights=[5, 4, 2, 3, 2, 1, 3])[0]
    tpl = rng.choice(SENTENCES[kind])
    vals = {
        "year": rng.choice(YEARS),
        "adj": rng.choice(ADJS),
        "noun": rng.choice(NOUNS),
        "topic": topic,
        "vpp": rng.choice(VERBS_PP),
        "vpo": rng.choice(VERBS_PO),
        "voo": rng.choice(VERBS_OO),
        "vpl": rng.choice(VERBS_PL),
        "vol": rng.choice(VERBS_OL),
    }
    vals["vpp_past"] = PAST.get(vals["vpp"], "drawn")

    def ent(kind: str, avoid: Entity | None = None) -> Entity:
        lst = doc_cast[kind]
        for _ in range(4):
            e = lst[p.zipf_index(rng, len(lst), 0.8)]
            if e != avoid:
                return e
        return e

    for slot, kind_ in (
        ("P1", "person"),
        ("P2", "person"),
        ("O1", "org"),
        ("O2", "org"),
        ("L1", "place"),
        ("E1", "event"),
    ):
        if "{" + slot + "}" in tpl:
            avoid = vals.get("_P1") if slot == "P2" else vals.get("_O1") if slot == "O2" else None
            e = ent(kind_, avoid)
            vals["_" + slot] = e
            vals[slot] = _mention(rng, e, e.name not in seen)
            seen.add(e.name)
    text = _AN.sub(lambda m: m.group(1) + "n " + m.group(2), tpl.format(**vals))
    return text[0].upper() + text[1:]


def document(i: int, seed: int = 1) -> tuple[str, str]:
    """Document ``i`` of the corpus with ``seed``: (file name, text)."""
    p = pools()
    rng = random.Random(f"{seed}:{i}")
    t = p.zipf_index(rng, len(p.casts), 0.8)
    cast, topic = p.casts[t], p.topic_names[t]
    doc_cast = {
        kind: list(dict.fromkeys(_pick(rng, p, cast, kind) for _ in range(n)))
        for kind, n in (("person", 8), ("org", 4), ("place", 4), ("event", 2))
    }
    target = rng.randint(300, 800)
    seen: set = set()
    lead = doc_cast["person"][0]
    title = f"{lead.name} and the {rng.choice(ADJS)} {rng.choice(NOUNS)} of {doc_cast['place'][0].name}"
    paragraphs, words = [], 0
    while words < target:
        sents = [_sentence(rng, p, doc_cast, topic, seen) for _ in range(rng.randint(4, 8))]
        para = " ".join(sents)
        paragraphs.append(para)
        words += len(para.split())
    return f"doc_{i:06d}.txt", title + "\n\n" + "\n\n".join(paragraphs) + "\n"


def write_corpus(out: Path, docs: int, seed: int = 1, start: int = 0) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(start, start + docs):
        name, text = document(i, seed)
        path = out / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def edit_document(path: Path, seed: int = 99) -> None:
    """Replace one paragraph (the middle one) of a document with new text, deterministically."""
    text = path.read_text(encoding="utf-8")
    paras = text.split("\n\n")
    rng = random.Random(f"edit:{seed}:{path.name}")
    p = pools()
    doc_cast = {
        kind: [p.by_kind[kind][p.zipf_index(rng, len(p.by_kind[kind]))] for _ in range(4)]
        for kind in ("person", "org", "place", "event")
    }
    new = " ".join(_sentence(rng, p, doc_cast, "revisions", set()) for _ in range(5))
    k = max(1, len(paras) // 2)
    paras[k] = new
    path.write_text("\n\n".join(paras), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--start", type=int, default=0, help="index of the first document")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    paths = write_corpus(Path(args.out), args.docs, args.seed, args.start)
    words = sum(len(p.read_text(encoding="utf-8").split()) for p in paths[:200])
    print(
        f"wrote {len(paths)} documents to {args.out} in {time.perf_counter() - t0:.1f}s "
        f"(~{words / max(1, min(200, len(paths))):.0f} words each)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
