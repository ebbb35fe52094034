"""A deterministic stand-in for a cooperative chat model, answering every prompt the pipeline
sends in that prompt's format. Used behind the scripted HTTP server (tests) and the benchmark
stub, so two runs - or two systems - see the same LLM.

Entities come from the offline extractor run on the prompt's TEXT, so answers are realistic in
size and content. Knobs let tests change one behaviour at a time (gleaning answers, loop-check
answers, malformed outputs, report JSON).
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter

from graphrag_pipeline.extract.offline import extract_fast
from graphrag_pipeline.llm import prompts

T, R, C = prompts.TUPLE_DELIMITER, prompts.RECORD_DELIMITER, prompts.COMPLETION_DELIMITER

KINDS = {
    "light_extract": "You build a knowledge graph from text.",
    "general_extract": "From the TEXT, identify all entities",
    "light_continue": prompts.LIGHT_CONTINUE.split("{")[0].strip()[:60],
    "general_continue": prompts.GENERAL_CONTINUE.strip()[:60],
    "light_loop": prompts.LIGHT_IF_LOOP[:60],
    "general_loop": prompts.GENERAL_LOOP[:60],
    "summary": "You merge several descriptions",
    "resolution": "You decide whether two names refer",
    "report": "You write a report about one community",
    "rewrite": "You analyse a question for a knowledge-graph search",
    "local_answer": "Answer the question using only the knowledge-graph context",
    "global_map": "You are given one community report from a knowledge graph",
    "global_reduce": "Answer the question from the analysts' points",
}


def classify(messages: list[dict]) -> str:
    last = messages[-1]["content"] if messages else ""
    for kind in ("light_continue", "general_continue", "light_loop", "general_loop"):
        if KINDS[kind] in last:
            return kind
    for kind, marker in KINDS.items():
        if marker in last:
            return kind
    return "unknown"


def _text_of(prompt: str) -> str:
    i = prompt.rfind("TEXT:\n")
    j = prompt.rfind("\nOUTPUT:")
    return prompt[i + 6 : j] if i >= 0 and j > i else ""


def records_for(text: str, light: bool, quote: bool = True) -> str:
    ext = extract_fast(text, "x")
    q = (lambda s: f'"{s}"') if quote else (lambda s: s)
    lines = []
    for e in ext.entities:
        lines.append(f"({q('entity')}{T}{q(e.name.upper())}{T}{q(e.type.lower())}{T}{q(e.description)})")
    for r in ext.relations:
        strength = min(10, 4 + int(r.weight))
        if light:
            kw = ", ".join(r.keywords) or "related"
            lines.append(
                f"({q('relationship')}{T}{q(r.source.upper())}{T}{q(r.target.upper())}{T}{q(r.description)}{T}{q(kw)}{T}{strength})"
            )
        else:
            lines.append(
                f"({q('relationship')}{T}{q(r.source.upper())}{T}{q(r.target.upper())}{T}{q(r.description)}{T}{strength})"
            )
    if light and ext.content_keywords:
        lines.append(f"({q('content_keywords')}{T}{q(', '.join(ext.content_keywords[:3]))})")
    return (R + "\n").join(lines) + C


def _norm(name: str) -> str:
    name = re.sub(r"^(the|a|an)\s+", "", name.strip().casefold())
    return re.sub(r"[\W_]+", "", name)


def _initials(name: str) -> str:
    return "".join(w[0] for w in re.findall(r"[A-Za-z]+", name) if w[0].isupper()).casefold()


def same_entity(a: str, b: str) -> bool:
    na, nb = _norm(a), _norm(b)
    if na == nb:
        return True
    short, long_ = sorted((a, b), key=len)
    return len(_norm(short)) >= 2 and _norm(short) == _initials(long_)


class FakeLLM:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls: Counter = Counter()
        self.glean_text = C  # what a gleaning round adds (default: nothing more)
        self.loop_answer = "NO"  # general loop check (forced single token)
        self.light_loop_answer = "no"
        self.quote_fields = True
        self.report_override = None  # callable(prompt) -> str, for malformed-report tests
        self.extract_override = None  # callable(prompt) -> str | None

    def __call__(self, body: dict) -> str:
        messages = body.get("messages", [])
        kind = classify(messages)
        with self.lock:
            self.calls[kind] += 1
        prompt = messages[-1]["content"] if messages else ""
        if kind in ("light_extract", "general_extract"):
            if self.extract_override:
                out = self.extract_override(prompt)
                if out is not None:
                    return out
            return records_for(_text_of(prompt), kind == "light_extract", self.quote_fields)
        if kind in ("light_continue", "general_continue"):
            return self.glean_text
        if kind == "general_loop":
            return self.loop_answer
        if kind == "light_loop":
            return self.light_loop_answer
        if kind == "summary":
            name = re.search(r"^(?:Entity|Relation): (.+)$", prompt, re.M)
            return f"Merged description of {name.group(1) if name else 'it'}."
        if kind == "resolution":
            pairs = re.findall(
                r'Question (\d+): Is the [^"]* "(.*)" the same as "(.*)"\?', prompt.split("Real data", 1)[-1]
            )
            lines = [
                f'For Question {i}, "{a}" and "{b}" are '
                + ("the same entity." if same_entity(a, b) else "different entities.")
                for i, a, b in pairs
            ]
            return (R + "\n").join(lines)
        if kind == "report":
            if self.report_override:
                return self.report_override(prompt)
            rows = re.findall(r"^\d+,(\"[^\"]*\"|[^,]*),", prompt.split("Entities", 1)[-1], re.M)
            names = [r.strip('"') for r in rows][:3] or ["Unknown"]
            return json.dumps(
                {
                    "title": " and ".join(names),
                    "summary": f"The community around {names[0]}.",
                    "rating": 6.5,
                    "rating_explanation": "Central entities of the corpus.",
                    "findings": [
                        {"summary": f"{n} matters", "explanation": f"{n} appears in the data."} for n in names
                    ],
                }
            )
        if kind == "rewrite":
            q = prompt.rsplit("Question:", 1)[-1].rsplit("Output:", 1)[0]
            ents = [e.name for e in extract_fast(q, "q").entities][:5]
            pool = re.findall(r'^\s*"([A-Z_]+)": \[', prompt, re.M)
            types = ["PERSON"] if "PERSON" in pool and re.search(r"\bwho\b", q, re.I) else []
            return json.dumps({"answer_type_keywords": types, "entities_from_query": ents})
        if kind == "local_answer":
            # cites the first sources the context lists, as the prompt asks
            cited = list(dict.fromkeys(re.findall(r"\[doc: [^\]]+\]", prompt.split("Context", 1)[-1])))[:3]
            return (
                "LOCAL ANSWER from context: "
                + " ".join(prompt.split("Question:")[-1].split())[:80]
                + (" " + " ".join(cited) if cited else "")
            )
        if kind == "global_map":
            title = re.search(r"^# (.+)$", prompt, re.M)
            return json.dumps(
                {"points": [{"description": f"Point from {title.group(1) if title else 'report'}", "score": 60}]}
            )
        if kind == "global_reduce":
            return "GLOBAL ANSWER: " + str(prompt.count("- [")) + " points merged."
        return "OK"


class FakeChatClient:
    """FakeLLM in process, behind the ChatClient protocol (llm/protocol.py): no HTTP server, no
    cache, no retries; every call is answered and counted by `llm` (a FakeLLM)."""

    def __init__(self, llm: FakeLLM | None = None, model: str = "fake-model"):
        self.llm = llm or FakeLLM()
        self.model = model

    def chat(
        self,
        messages: list[dict],
        *,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        logit_bias: dict[int, int] | None = None,
        response_format: dict | None = None,
        use_cache: bool = True,
    ):
        from graphrag_pipeline.llm.client import ChatResult

        body = {"messages": messages, "temperature": temperature, "max_tokens": max_tokens}
        text = self.llm(body)
        return ChatResult(
            text=text,
            cached=False,
            prompt_tokens=sum(len(m.get("content", "")) for m in messages) // 4,
            completion_tokens=len(text) // 4,
        )

    def chat_many(self, calls: list[dict]):
        return [self.chat(**kw) for kw in calls]
