"""A scripted OpenAI-compatible HTTP server for tests (stdlib only, bound to 127.0.0.1).

Serves ``POST /v1/chat/completions`` and ``POST /v1/embeddings`` in the OpenAI JSON shapes. Chat
answers come from a FIFO of scripted replies (``script``), then from a responder function; each
reply can set the HTTP status, headers, a delay before answering, whether ``usage`` is included,
or an exact raw body. The server records every request body and the highest number of requests
it was handling at once (``max_in_flight``), so tests can check concurrency limits.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import json
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

EMBEDDING_DIM = 16
TEST_API_KEY = "test-key-SECRET"


@dataclass
class Reply:
    text: str = ""
    status: int = 200
    headers: dict = field(default_factory=dict)  # e.g. {"Retry-After": "1"}
    delay_s: float = 0.0  # sleep before answering (to provoke client timeouts)
    include_usage: bool = True
    raw_body: str | None = None  # send this exact body (malformed JSON tests)
    prompt_tokens: int = 11  # reported in `usage` (fixed values so tests can tell them from tiktoken counts)
    completion_tokens: int = 3
    finish_reason: str = "stop"  # "length": the answer was cut at the output limit
    trickle_s: float = 0.0  # send the body one byte at a time, this long apart (each read is quick)


Responder = Callable[[dict], "Reply | str"]


def _echo_ok(_request: dict) -> Reply:
    return Reply(text="OK")


def embedding_vector(text: str, dim: int = EMBEDDING_DIM) -> list[float]:
    """A deterministic, *not* normalised vector for ``text`` (the client must normalise it)."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    while len(digest) < dim:
        digest += hashlib.sha256(digest).digest()
    return [(b - 127.5) / 10.0 for b in digest[:dim]]


class ScriptedLLMServer:
    def __init__(self, responder: Responder | None = None):
        self.responder: Responder = responder or _echo_ok
        self.requests: list[dict] = []  # chat request bodies, in arrival order
        self.request_headers: list[dict] = []  # headers of every chat request (lower-case names)
        self.embedding_requests: list[dict] = []
        # OpenAI's limits, when set: an embeddings request with an input above `embedding_input_limit`
        # tokens, or with inputs summing to more than `embedding_request_limit`, is refused (400)
        self.embedding_input_limit: int | None = None
        self.embedding_request_limit: int | None = None
        self.max_in_flight = 0
        self.in_flight = 0
        self._lock = threading.Lock()
        self._script: collections.deque = collections.deque()
        self._embedding_script: collections.deque = collections.deque()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    # -- scripting -------------------------------------------------------------------------------
    def script(self, *replies: Reply | str) -> ScriptedLLMServer:
        """Queue chat replies served FIFO before falling back to the responder."""
        with self._lock:
            self._script.extend(replies)
        return self

    def script_embeddings(self, *replies: Reply) -> ScriptedLLMServer:
        """Queue embedding replies (status, headers, delay, raw_body are used; text is ignored);
        a reply with status 200 and no raw_body answers normally."""
        with self._lock:
            self._embedding_script.extend(replies)
        return self

    @property
    def chat_count(self) -> int:
        with self._lock:
            return len(self.requests)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> ScriptedLLMServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, like real endpoints

            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._send(400, {"error": {"message": "invalid JSON body", "type": "invalid_request_error"}})
                    return
                path = self.path.split("?", 1)[0].rstrip("/")
                server._enter()
                try:
                    if path.endswith("/chat/completions"):
                        with server._lock:
                            server.requests.append(body)
                            server.request_headers.append({k.lower(): v for k, v in self.headers.items()})
                        self._reply(server._next_chat_reply(body), lambda r: server._chat_body(body, r))
                    elif path.endswith("/embeddings"):
                        with server._lock:
                            server.embedding_requests.append(body)
                            reply = server._embedding_script.popleft() if server._embedding_script else Reply()
                        reply = server._embedding_limits(body) or reply
                        self._reply(reply, lambda r: server._embedding_body(body))
                    else:
                        self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                finally:
                    server._leave()

            def _reply(self, reply: Reply, ok_body):
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.raw_body is not None:
                    payload: bytes | dict = reply.raw_body.encode("utf-8")
                elif reply.status >= 400:
                    payload = {
                        "error": {
                            "message": reply.text or f"scripted error {reply.status}",
                            "type": "server_error" if reply.status >= 500 else "invalid_request_error",
                            "code": reply.status,
                        }
                    }
                else:
                    payload = ok_body(reply)
                self._send(reply.status, payload, reply.headers, reply.trickle_s)

            def _send(self, status: int, payload, headers: dict | None = None, trickle_s: float = 0.0):
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, str(v))
                    self.end_headers()
                    if trickle_s:
                        for i in range(len(data)):
                            self.wfile.write(data[i : i + 1])
                            self.wfile.flush()
                            time.sleep(trickle_s)
                    else:
                        self.wfile.write(data)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    self.close_connection = True

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False  # don't join handler threads parked on idle keep-alive connections

        self._httpd = Server(("127.0.0.1", 0), Handler)
        host, port = self._httpd.server_address[:2]
        self.base_url = f"http://{host}:{port}/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-llm-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- internals -------------------------------------------------------------------------------
    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _next_chat_reply(self, body: dict) -> Reply:
        with self._lock:
            reply = self._script.popleft() if self._script else None
        if reply is None:
            reply = self.responder(body)
        return Reply(text=reply) if isinstance(reply, str) else reply

    def _chat_body(self, body: dict, reply: Reply) -> dict:
        out = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.text},
                    "finish_reason": reply.finish_reason,
                    "logprobs": None,
                }
            ],
        }
        if reply.include_usage:
            out["usage"] = {
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "total_tokens": reply.prompt_tokens + reply.completion_tokens,
            }
        return out

    def _embedding_limits(self, body: dict) -> Reply | None:
        """A 400 reply in OpenAI's words when the request breaks a limit set on this server."""
        if self.embedding_input_limit is None and self.embedding_request_limit is None:
            return None
        from graphrag_pipeline.ingest.tokens import count_tokens

        inputs = body.get("input")
        sizes = [count_tokens(str(t)) for t in ([inputs] if isinstance(inputs, str) else list(inputs or []))]
        if self.embedding_input_limit is not None and sizes and max(sizes) > self.embedding_input_limit:
            return Reply(
                status=400,
                text=f"This model's maximum context length is {self.embedding_input_limit} tokens, however you "
                f"requested {max(sizes)} tokens in your input.",
            )
        if self.embedding_request_limit is not None and sum(sizes) > self.embedding_request_limit:
            return Reply(
                status=400,
                text=f"Requested {sum(sizes)} tokens, max {self.embedding_request_limit} tokens per request",
            )
        return None

    def _embedding_body(self, body: dict) -> dict:
        inputs = body.get("input")
        inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for i, text in enumerate(inputs):
            vec = embedding_vector(str(text))
            emb = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode() if as_base64 else vec
            data.append({"object": "embedding", "index": i, "embedding": emb})
        tokens = sum(len(str(t).split()) for t in inputs)
        return {
            "object": "list",
            "data": data,
            "model": body.get("model", "scripted"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


def client_for(server: ScriptedLLMServer, **kw):
    """An LLMClient pointed at ``server`` with the test key and small backoff."""
    from graphrag_pipeline.llm.client import LLMClient

    params = dict(
        model="test-model",
        api_key=TEST_API_KEY,
        base_url=server.base_url,
        backoff_base_s=0.01,
        backoff_max_s=0.2,
        timeout_s=2.0,
    )
    params.update(kw)
    return LLMClient(**params)


@pytest.fixture
def llm_server():
    with ScriptedLLMServer() as server:
        yield server
