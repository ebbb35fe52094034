"""An OpenAI-compatible stub LLM for benchmarks (127.0.0.1 only).

Built on the tests' ``ScriptedLLMServer`` (HTTP, OpenAI JSON shapes) and ``FakeLLM`` (a
deterministic model answering every prompt of this pipeline), extended here so it also answers
nano-graphrag's prompts (Microsoft-GraphRAG-style extraction with ``<|>``/``##``/``<|COMPLETE|>``,
the "MANY entities were missed" gleaning, the YES/NO loop check, JSON community reports and entity
summaries). Entities always come from the offline extractor run on the prompt's text, so both
systems get the same entities for the same text.

Every chat call takes ``--chat-latency-ms`` (the answer is computed first and the rest of the
latency is slept), every embeddings call ``--embed-latency-ms``. The stub records the number of
calls by kind, the highest number of chats in flight at once, and prompt/completion tokens
counted with tiktoken (cl100k_base); the same counts are returned in ``usage``.

    python benchmarks/stub_server.py --port 0 --chat-latency-ms 300
    # prints the base URL (http://127.0.0.1:PORT/v1); Ctrl-C / SIGTERM prints the stats as JSON
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import signal
import struct
import sys
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from graphrag_pipeline.ingest.tokens import count_tokens  # noqa: E402
from graphrag_pipeline_tests.fake_llm import FakeLLM, classify, records_for  # noqa: E402
from graphrag_pipeline_tests.llm_server import Reply, ScriptedLLMServer  # noqa: E402

# nano-graphrag's prompts (nano_graphrag/prompt.py, v0.0.8), recognised by stable fragments
NANO_KINDS = {
    "nano_extract": "identify all entities of those types from the text and all relationships among the "
    "identified entities",
    "nano_continue": "MANY entities were missed in the last extraction.",
    "nano_loop": "It appears some entities may have still been missed.",
    "nano_report": "Write a comprehensive report of a community",
    "nano_summary": "You are a helpful assistant responsible for generating a comprehensive summary",
    "nano_local_answer": "You are a helpful assistant responding to questions about data in the tables provided.",
}


def classify_any(messages: list[dict]) -> str:
    """The prompt kind: this pipeline's kinds (``fake_llm.classify``) or nano-graphrag's."""
    last = messages[-1]["content"] if messages else ""
    if not isinstance(last, str):
        last = json.dumps(last)
    # gleaning/loop prompts come last in a conversation whose first message is the extraction
    for kind in ("nano_continue", "nano_loop"):
        if NANO_KINDS[kind] in last:
            return kind
    kind = classify(messages)
    if kind != "unknown":
        return kind
    for kind, marker in NANO_KINDS.items():
        if marker in last:
            return kind
    return "unknown"


def _nano_text(prompt: str) -> str:
    """The text of nano-graphrag's extraction prompt (after the last 'Text: ' of -Real Data-)."""
    real = prompt.rsplit("-Real Data-", 1)[-1]
    i = real.find("Text: ")
    j = real.rfind("\n######################\nOutput:")
    if i < 0:
        return ""
    return real[i + 6 : j if j > i else len(real)]


def _nano_report(prompt: str) -> str:
    data = prompt.rsplit("# Real Data", 1)[-1]
    ents = data.split("-----Entities-----", 1)[-1].split("-----Relationships-----", 1)[0]
    names = [n.strip('"').strip() for n in re.findall(r'^\d+,\t"(.*?)",\t', ents, re.M)][:3] or ["Unknown"]
    return json.dumps(
        {
            "title": " and ".join(names),
            "summary": f"The community around {names[0]}.",
            "rating": 6.5,
            "rating_explanation": "Central entities of the corpus.",
            "findings": [{"summary": f"{n} matters", "explanation": f"{n} appears in the data."} for n in names],
        }
    )


class BenchLLM(FakeLLM):
    """FakeLLM plus nano-graphrag's prompts; equivalent answers for equivalent questions."""

    def answer(self, body: dict) -> tuple[str, str]:
        messages = body.get("messages", [])
        kind = classify_any(messages)
        prompt = messages[-1]["content"] if messages else ""
        if kind == "nano_extract":
            text = records_for(_nano_text(prompt), light=False, quote=True)
        elif kind == "nano_continue":
            text = self.glean_text  # same as this pipeline's gleaning answer: nothing more
        elif kind == "nano_loop":
            text = self.loop_answer
        elif kind == "nano_report":
            text = _nano_report(prompt)
        elif kind == "nano_summary":
            name = re.search(r"^Entities: (.+)$", prompt, re.M)
            text = f"Merged description of {name.group(1) if name else 'it'}."
        elif kind == "nano_local_answer":
            text = "LOCAL ANSWER from context."
        else:
            text = FakeLLM.__call__(self, body)
        return kind, text


class StubStats:
    def __init__(self):
        self.lock = threading.Lock()
        self.chat_calls = 0
        self.embedding_calls = 0
        self.embedding_inputs = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.embedding_tokens = 0
        self.kinds: Counter = Counter()
        self.in_flight = 0
        self.max_in_flight_chats = 0
        self.first_call_at: float | None = None
        self.last_call_end: float | None = None

    def snapshot(self) -> dict:
        with self.lock:
            return {
                "chat_calls": self.chat_calls,
                "embedding_calls": self.embedding_calls,
                "embedding_inputs": self.embedding_inputs,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "embedding_tokens": self.embedding_tokens,
                "max_in_flight_chats": self.max_in_flight_chats,
                "kinds": dict(sorted(self.kinds.items())),
                "first_call_at": self.first_call_at,
                "last_call_end": self.last_call_end,
            }

    def reset(self) -> None:
        with self.lock:
            in_flight = self.in_flight
            self.__init__()
            self.in_flight = in_flight


def _message_text(messages: list[dict]) -> str:
    parts = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, list):
            parts += [p.get("text", "") for p in c if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "\n".join(parts)


class StubServer(ScriptedLLMServer):
    """ScriptedLLMServer answering with BenchLLM, with per-call latency and benchmark counters."""

    def __init__(self, chat_latency_ms: float = 0.0, embed_latency_ms: float = 0.0, embed_dim: int = 64):
        self.llm = BenchLLM()
        self.stats = StubStats()
        self.chat_latency_s = chat_latency_ms / 1000.0
        self.embed_latency_s = embed_latency_ms / 1000.0
        self.embed_dim = embed_dim
        self._answers: dict[str, tuple[str, str, int, int]] = {}  # request hash -> answer (deterministic)
        super().__init__(self._respond)

    # chat ----------------------------------------------------------------------------------------
    def _respond(self, body: dict) -> Reply:
        started = time.perf_counter()
        st = self.stats
        with st.lock:
            st.in_flight += 1
            st.max_in_flight_chats = max(st.max_in_flight_chats, st.in_flight)
            st.first_call_at = st.first_call_at or time.time()
        try:
            messages = body.get("messages", [])
            key = hashlib.sha256(json.dumps(messages, sort_keys=True).encode("utf-8")).hexdigest()
            cached = self._answers.get(key)
            if cached is None:
                kind, text = self.llm.answer(body)
                if body.get("max_tokens") == 1:  # single-token answers (forced YES/NO)
                    text = text.split()[0] if text.split() else text
                cached = (kind, text, count_tokens(_message_text(messages)), count_tokens(text))
                self._answers[key] = cached
            kind, text, p_tok, c_tok = cached
            rest = self.chat_latency_s - (time.perf_counter() - started)
            if rest > 0:
                time.sleep(rest)
            with st.lock:
                st.chat_calls += 1
                st.kinds[kind] += 1
                st.prompt_tokens += p_tok
                st.completion_tokens += c_tok
            return Reply(text=text, prompt_tokens=p_tok, completion_tokens=c_tok)
        finally:
            with st.lock:
                st.in_flight -= 1
                st.last_call_end = time.time()

    # embeddings ----------------------------------------------------------------------------------
    def _embedding_body(self, body: dict) -> dict:
        started = time.perf_counter()
        inputs = body.get("input")
        inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
        inputs = [str(t) for t in inputs]
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for i, text in enumerate(inputs):
            vec = embedding_vector(text, self.embed_dim)
            emb = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode() if as_base64 else vec
            data.append({"object": "embedding", "index": i, "embedding": emb})
        tokens = sum(count_tokens(t) for t in inputs)
        rest = self.embed_latency_s - (time.perf_counter() - started)
        if rest > 0:
            time.sleep(rest)
        with self.stats.lock:
            self.stats.embedding_calls += 1
            self.stats.embedding_inputs += len(inputs)
            self.stats.embedding_tokens += tokens
        return {
            "object": "list",
            "data": data,
            "model": body.get("model", "stub"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def forget_requests(self) -> None:
        """Drop the recorded request bodies (the base class keeps them all; long benchmarks don't need them)."""
        with self._lock:
            self.requests.clear()
            self.request_headers.clear()
            self.embedding_requests.clear()


def embedding_vector(text: str, dim: int) -> list[float]:
    """A deterministic vector from character 3-gram hashes (similar names get similar vectors)."""
    vec = [0.0] * dim
    t = f"  {text.casefold()}  "
    for i in range(len(t) - 2):
        h = int.from_bytes(hashlib.blake2b(t[i : i + 3].encode("utf-8"), digest_size=4).digest(), "little")
        vec[h % dim] += 1.0 if (h >> 31) & 1 else -1.0
    if not any(vec):
        vec[0] = 1.0
    return vec


def start_stub(
    port: int = 0, chat_latency_ms: float = 0.0, embed_latency_ms: float = 0.0, embed_dim: int = 64
) -> StubServer:
    """Start a stub on 127.0.0.1 (``port`` 0 = any free port) in background threads."""
    server = StubServer(chat_latency_ms, embed_latency_ms, embed_dim)
    if port:
        _start_on_port(server, port)
    else:
        server.start()
    return server


def _start_on_port(server: StubServer, port: int) -> None:
    """ScriptedLLMServer binds port 0; rebind to a fixed port when asked for one."""
    from http.server import ThreadingHTTPServer

    orig = ThreadingHTTPServer.__init__

    def init(self, addr, handler, *a, **kw):
        orig(self, ("127.0.0.1", port), handler, *a, **kw)

    ThreadingHTTPServer.__init__ = init
    try:
        server.start()
    finally:
        ThreadingHTTPServer.__init__ = orig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = any free port)")
    ap.add_argument("--chat-latency-ms", type=float, default=0.0)
    ap.add_argument("--embed-latency-ms", type=float, default=0.0)
    ap.add_argument("--embed-dim", type=int, default=64)
    ap.add_argument("--stats-file", help="write the stats as JSON here every second and at exit")
    args = ap.parse_args(argv)
    server = start_stub(args.port, args.chat_latency_ms, args.embed_latency_ms, args.embed_dim)
    print(server.base_url, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    def dump():
        if args.stats_file:
            tmp = Path(args.stats_file + ".tmp")
            tmp.write_text(json.dumps(server.stats.snapshot()))
            tmp.replace(args.stats_file)

    while not stop.wait(1.0):
        server.forget_requests()
        dump()
    dump()
    print(json.dumps(server.stats.snapshot()), flush=True)
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
