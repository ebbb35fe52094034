"""LLM extraction of one chunk: the `light` (LightRAG-style) and `general` (Microsoft
GraphRAG-style) prompts, with gleaning, and bounded retries of malformed answers.

light   : extraction prompt; optional gleaning rounds, each followed (while rounds remain) by a
          natural-language yes/no "anything missing?" check.
general : extraction prompt; gleaning (default 1 round) with the "MANY entities were missed"
          continuation; between rounds a loop check answered with one token, forced by
          logit_bias on the cl100k ids of YES and NO (max_tokens 1).
A chunk whose answers still do not parse after the retries is returned as failed, with the raw
text kept for inspection; it never fails the rest of the document.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from graphrag_pipeline.extract.parsing import parse_extraction, parse_yes_no, strip_completion
from graphrag_pipeline.extract.records import Extraction
from graphrag_pipeline.ingest.tokens import encoding
from graphrag_pipeline.llm import prompts
from graphrag_pipeline.llm.protocol import ChatClient


@dataclass
class ExtractionSettings:
    method: str  # light | general
    language: str = prompts.DEFAULT_LANGUAGE
    entity_types: list[str] = field(default_factory=lambda: list(prompts.DEFAULT_ENTITY_TYPES))
    max_gleanings: int | None = None  # None: light 0, general 1
    max_parse_retries: int = 2

    @property
    def gleanings(self) -> int:
        if self.max_gleanings is not None:
            return max(0, self.max_gleanings)
        return 1 if self.method == "general" else 0


@dataclass
class ChunkOutcome:
    extraction: Extraction
    failed: bool = False
    error: str = ""
    raw: str = ""
    gleaning_rounds: int = 0
    # the cache keys of the answers used that the endpoint cut at its output limit (parsed as far
    # as they go); "" for an answer kept in no cache
    cut: list[str] = field(default_factory=list)


@lru_cache(maxsize=1)
def loop_logit_bias() -> dict[int, int]:
    """Force the loop check's single output token to be YES or NO (cl100k token ids)."""
    enc = encoding()
    return {enc.encode("YES")[0]: 100, enc.encode("NO")[0]: 100}


def _format(template: str, **values) -> str:
    return template.format(
        tuple_delimiter=prompts.TUPLE_DELIMITER,
        record_delimiter=prompts.RECORD_DELIMITER,
        completion_delimiter=prompts.COMPLETION_DELIMITER,
        **values,
    )


def extraction_prompt(text: str, settings: ExtractionSettings) -> str:
    """The first prompt of a chunk's extraction (the cost estimate counts it too)."""
    return _format(
        prompts.LIGHT_EXTRACTION if settings.method == "light" else prompts.GENERAL_EXTRACTION,
        language=settings.language,
        entity_types=", ".join(settings.entity_types),
        input_text=text,
    )


def follow_up_prompts(method: str) -> tuple[str, str]:
    """(the gleaning prompt, the loop check) of a method."""
    if method == "light":
        return _format(prompts.LIGHT_CONTINUE), prompts.LIGHT_IF_LOOP
    return _format(prompts.GENERAL_CONTINUE), prompts.GENERAL_LOOP


def extract_chunk(client: ChatClient, text: str, chunk_id: str, settings: ExtractionSettings) -> ChunkOutcome:
    """Extract one chunk; LLMError from the client (endpoint failures) propagates to the caller."""
    if settings.method not in ("light", "general"):
        raise ValueError(f"extract_chunk handles light and general, not {settings.method!r}")
    light = settings.method == "light"
    prompt = extraction_prompt(text, settings)
    history = [{"role": "user", "content": prompt}]
    first = None
    raw = ""
    cut: list[str] = []
    for attempt in range(settings.max_parse_retries + 1):
        # a retry must not be served the same malformed answer from the cache
        reply = client.chat(history, use_cache=attempt == 0)
        answer = raw = reply.text
        parsed = parse_extraction(answer, chunk_id)
        if parsed.ok:
            first = answer
            _note_cut(reply, cut)
            break
    if first is None:
        return ChunkOutcome(
            Extraction(),
            failed=True,
            raw=raw,
            error=f"answer could not be parsed after {settings.max_parse_retries + 1} attempts",
        )

    answers = [first]
    history.append({"role": "assistant", "content": first})
    rounds = 0
    for round_no in range(settings.gleanings):
        history.append(
            {"role": "user", "content": _format(prompts.LIGHT_CONTINUE if light else prompts.GENERAL_CONTINUE)}
        )
        reply = client.chat(history)
        more = reply.text
        _note_cut(reply, cut)
        rounds += 1
        answers.append(more)
        history.append({"role": "assistant", "content": more})
        if round_no >= settings.gleanings - 1:
            break
        if light:
            history.append({"role": "user", "content": prompts.LIGHT_IF_LOOP})
            verdict = parse_yes_no(client.chat(history).text)
        else:
            history.append({"role": "user", "content": prompts.GENERAL_LOOP})
            verdict = parse_yes_no(client.chat(history, max_tokens=1, logit_bias=loop_logit_bias()).text)
        history.pop()
        if verdict is not True:
            break
    # each answer ends with the completion marker (as the parser knows it: also without its
    # brackets), after which a parser stops reading: join the answers cut there so gleaned records count
    combined = prompts.RECORD_DELIMITER.join(strip_completion(a, prompts.COMPLETION_DELIMITER)[0] for a in answers)
    result = parse_extraction(combined + prompts.COMPLETION_DELIMITER, chunk_id)
    return ChunkOutcome(result.extraction, raw="", gleaning_rounds=rounds, cut=cut)


def _note_cut(reply, cut: list[str]) -> None:
    if reply.truncated:
        cut.append(reply.cache_key or "")
