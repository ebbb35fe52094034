"""Community reports. Without an LLM the report is extractive: built only from the graph.

Title from the community's most connected entities, summary from its strongest relations, rating
from the community weight (0-10); every extractive report says that it is one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import polars as pl

EXTRACTIVE_NOTE = "Extractive report: assembled from the graph without a language model."


@dataclass
class Finding:
    summary: str
    explanation: str


@dataclass
class CommunityReport:
    community_id: str
    level: int
    title: str
    summary: str
    rating: float
    rating_explanation: str
    findings: list[Finding] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)  # display names of members
    extractive: bool = True
    generator: str = (
        ""  # what wrote it: "extractive", "llm:<model>#<prompt hash>", "extractive-fallback" ("" in older files)
    )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> CommunityReport:
        d = dict(d)
        d["findings"] = [Finding(**f) for f in d.get("findings", [])]
        if not d.get("generator"):  # written before the field existed
            d["generator"] = "extractive" if d.get("extractive", True) else ""
        return cls(**d)

    def text(self) -> str:
        """The report as Markdown (what an LLM reads as context)."""
        lines = [f"# {self.title}", "", self.summary, "", f"Rating: {self.rating:.1f} - {self.rating_explanation}"]
        for f in self.findings:
            lines += ["", f"## {f.summary}", "", f.explanation]
        return "\n".join(lines)


def community_subgraph(
    members: list[str], nodes: pl.DataFrame, edges: pl.DataFrame, max_edges: int | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Nodes of a community (most connected first) and the edges inside it (strongest first; only
    the `max_edges` strongest when given: a top-level community holds hundreds of thousands of
    edges at 50,000 documents, and an extractive report names five)."""
    keys = pl.Series("key", members, dtype=pl.Utf8).implode()
    sub_nodes = nodes.filter(pl.col("key").is_in(keys)).sort(
        ["degree", "pagerank", "key"], descending=[True, True, False]
    )
    sub_edges = (
        edges.lazy()
        .filter(pl.col("source_key").is_in(keys) & pl.col("target_key").is_in(keys))
        .sort(["weight", "source_key", "target_key"], descending=[True, False, False])
    )
    if max_edges is not None:
        sub_edges = sub_edges.head(max_edges)  # sort + head: polars keeps only the top rows
    return sub_nodes, sub_edges.collect()


def _first_sentence(text: str, limit: int = 240) -> str:
    text = (text or "").split("\n")[0].strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "\u2026"


def extractive_report(
    community: dict, nodes: pl.DataFrame, edges: pl.DataFrame, max_findings: int = 5
) -> CommunityReport:
    """A report made of the community's own entities and relations (no LLM)."""
    sub_nodes, sub_edges = community_subgraph(community["nodes"], nodes, edges, max_edges=max_findings)
    names = sub_nodes["name"].to_list()
    top = names[:3]
    if len(top) >= 3:
        title = f"{top[0]}, {top[1]} and {top[2]}"
    else:
        title = " and ".join(top) or community["community_id"]
    rels = sub_edges.head(max_findings).to_dicts()
    if rels:
        parts = [f"{r['source']} - {r['target']}: {_first_sentence(r['description'], 160)}" for r in rels[:3]]
        summary = (
            f"{EXTRACTIVE_NOTE} This community of {len(names)} entities centres on {', '.join(top)}. "
            f"Strongest relations: " + "; ".join(parts) + "."
        )
    else:
        summary = f"{EXTRACTIVE_NOTE} This community of {len(names)} entities centres on {', '.join(top)}."
    rating = round(10.0 * float(community.get("weight", 0.0)), 2)
    findings = [
        Finding(
            f"{r['source']} and {r['target']}", _first_sentence(r["description"], 400) or "Related in the source text."
        )
        for r in rels
    ]
    types = sub_nodes.group_by("type").len().sort(["len", "type"], descending=[True, False])["type"].to_list()[:3]
    if types:
        findings.append(Finding("Entity types", f"Most members are of type {', '.join(types)}."))
    return CommunityReport(
        community_id=community["community_id"],
        level=int(community["level"]),
        title=title,
        summary=summary,
        rating=rating,
        rating_explanation=f"{EXTRACTIVE_NOTE} Rating = 10 x the community's weight relative to the largest "
        f"community of its level.",
        findings=findings,
        entities=names,
        extractive=True,
        generator="extractive",
    )
