"""Extraction records: what every extraction method (fast, light, general) returns per chunk."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

_QUOTES = "\"'`\u201c\u201d\u2018\u2019\u300c\u300d\u300e\u300f\u00ab\u00bb"
_SPACE = re.compile(r"\s+")


def clean_name(name: str) -> str:
    """Display form of an entity name: quotes and surrounding blanks removed, inner spaces folded."""
    name = unicodedata.normalize("NFKC", str(name)).strip()
    name = name.strip(_QUOTES).strip()
    return _SPACE.sub(" ", name)


def entity_key(name: str) -> str:
    """The key that identifies an entity across chunks and documents: case-folded display name."""
    return clean_name(name).casefold()


def clean_type(entity_type: str) -> str:
    t = clean_name(entity_type).upper().replace(" ", "_")
    return t or "UNKNOWN"


@dataclass
class Entity:
    name: str
    type: str
    description: str
    source_id: str  # chunk id

    @property
    def key(self) -> str:
        return entity_key(self.name)


@dataclass
class Relation:
    source: str
    target: str
    description: str
    keywords: list[str]
    weight: float
    source_id: str  # chunk id


@dataclass
class Extraction:
    """Entities and relations extracted from one chunk."""

    entities: list[Entity] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)
    content_keywords: list[str] = field(default_factory=list)
    dropped_relations: int = 0  # relations whose endpoints were not extracted as entities

    def to_dict(self) -> dict:
        return {
            "entities": [e.__dict__ for e in self.entities],
            "relations": [r.__dict__ for r in self.relations],
            "content_keywords": list(self.content_keywords),
            "dropped_relations": self.dropped_relations,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Extraction:
        return cls(
            entities=[Entity(**e) for e in data.get("entities", [])],
            relations=[Relation(**r) for r in data.get("relations", [])],
            content_keywords=list(data.get("content_keywords", [])),
            dropped_relations=int(data.get("dropped_relations", 0)),
        )
