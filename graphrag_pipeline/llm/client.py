"""The one way the pipeline talks to an OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, Xinference).

Built on the official ``openai`` client with its own retries disabled: this module retries 429,
408/409, 5xx, timeouts, connection errors and malformed answers itself, with capped exponential
backoff and full jitter (or the server's ``Retry-After``), so it controls the waiting, the counting
and cancellation. Answers are cached persistently in a :class:`KVCache` keyed by the full request.

The API key never appears in exceptions, log records or ``repr``: error texts are scrubbed of it,
the endpoint URL is shown without userinfo or query, and the original exception is not chained.

A dead endpoint is not paid for chunk after chunk: a circuit breaker counts the calls that failed
after all their retries, in a row (any successful request resets the count); after ``breaker``
(``GRAPHRAG_LLM_BREAKER``, default 3) of them every further call of the client fails at once with
:class:`LLMCircuitOpen`. While the endpoint is not known to work (no request of this process has
succeeded yet, or the latest request failed and none succeeded since), one call at a time makes
requests and the others wait, so a dead endpoint costs at most ``breaker x (max_retries + 1)``
requests, not that many per concurrent call. One call also gives up retrying once waiting for
the next retry would take it past ``max_call_s``.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import random
import re
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from graphrag_pipeline import progress
from graphrag_pipeline.ingest.tokens import count_tokens, head_tokens
from graphrag_pipeline.llm import budget as budgets
from graphrag_pipeline.llm.cache import KVCache
from graphrag_pipeline.llm.pricing import Pricing, pricing_for
from graphrag_pipeline.llm.usage import LLMUsage
from graphrag_pipeline.settings import default as setting_default
from graphrag_pipeline.settings import endpoint_embedding_model, setting
from graphrag_pipeline.settings import raw as setting_raw
from graphrag_pipeline.urls import redact_url

if TYPE_CHECKING:
    import numpy

log = logging.getLogger("graphrag_pipeline.llm")

EMBEDDING_BATCH = 64
# OpenAI's embeddings API refuses a request whose inputs sum to more than 300,000 tokens (and each
# input above the model's limit, GRAPHRAG_EMBEDDING_MAX_TOKENS); a batch is cut below this bound
EMBEDDING_REQUEST_TOKENS = 280_000
_RETRY_STATUSES = {408, 409, 429}  # plus every status >= 500
_POLL_S = 0.05  # how often a call waiting for a concurrency slot checks for cancellation
DEFAULT_BREAKER = setting_default("GRAPHRAG_LLM_BREAKER")  # consecutive failed calls that open the circuit (0 = never)
# a request the endpoint rejected for what it contains (bad request, too large, unprocessable): the
# endpoint works, so this neither counts towards the breaker nor marks the endpoint as failing
_REQUEST_SPECIFIC = {400, 413, 422}

_registry_lock = threading.Lock()
_CLIENTS: weakref.WeakSet[LLMClient] = weakref.WeakSet()
_PROVEN: set[str] = set()  # endpoints (without credentials) that have answered a request in this process


def cancel_all_clients() -> None:
    """Cancel every LLMClient of this process and abort their requests on the wire (the build is
    stopped by a signal: waiting for a slow answer would keep the user waiting up to the timeout)."""
    with _registry_lock:
        clients = list(_CLIENTS)
    for client in clients:
        client.cancel()
        try:
            client.close()  # closes the connections: a blocked read fails now, and the call raises LLMCancelled
        except Exception:  # noqa: BLE001 - best effort while stopping
            pass


def forget_endpoint_health() -> None:
    """Forget which endpoints have answered in this process, so new clients probe them again one
    call at a time (for tests that reuse a process for what would be separate builds)."""
    with _registry_lock:
        _PROVEN.clear()


class LLMError(RuntimeError):
    """Final failure after retries; the message names the endpoint (without credentials) and the
    status or cause, never the API key."""

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 0, endpoint: str = ""):
        super().__init__(message)
        self.status = status
        self.attempts = attempts
        self.endpoint = endpoint


class LLMCancelled(LLMError):
    """The client was cancelled (``LLMClient.cancel``) before or while this call waited."""


class LLMCircuitOpen(LLMError):
    """The endpoint failed ``failures`` calls in a row; the client makes no further requests.
    ``last_error`` is the message of the call that failed last (without credentials)."""

    def __init__(
        self, message: str, *, failures: int = 0, last_error: str = "", status: int | None = None, endpoint: str = ""
    ):
        super().__init__(message, status=status, attempts=0, endpoint=endpoint)
        self.failures = failures
        self.last_error = last_error


class LLMBudgetExceeded(LLMCircuitOpen):
    """The next call could pass the build's budget (GRAPHRAG_MAX_COST_USD): the client makes no
    further requests (answers in the cache are still served), and the build stops as it does for
    a dead endpoint, keeping everything finished."""


@dataclass
class ChatResult:
    text: str
    cached: bool
    prompt_tokens: int
    completion_tokens: int
    # cut at the endpoint's output limit (finish_reason "length"), fresh or as cached
    truncated: bool = False
    # the answer's key in the cache (None without one): `build --refresh failed` retires the keys of
    # cut answers so that they are asked again
    cache_key: str | None = None


class _Secret:
    """Holds the API key; its repr never shows it."""

    __slots__ = ("value",)

    def __init__(self, value: str):
        self.value = value

    def __repr__(self) -> str:
        return "'***'"


def secret_forms(key: str | None) -> list[str]:
    """The texts that give `key` away, longest first: the key, the escaped forms an HTTP library or a
    repr prints it in (a character not allowed in a header shown as `\\r`, `\\x..`), and every run
    of 8 or more printable ASCII characters in it (what each of those forms shows verbatim). Empty
    for a key of fewer than 4 characters (masking it would garble ordinary text)."""
    if not key or len(key) < 4:
        return []
    forms = {
        key,
        key.encode("unicode_escape").decode("ascii"),
        repr(key)[1:-1],
        str(key.encode("utf-8", "backslashreplace"))[2:-1],
    }
    forms |= {run for run in re.findall(r"[\x21-\x7e]{8,}", key)}
    return sorted(forms, key=len, reverse=True)


class _Retryable(Exception):
    def __init__(self, cause: str, status: int | None = None, retry_after: float | None = None):
        super().__init__(cause)
        self.cause = cause
        self.status = status
        self.retry_after = retry_after


class _Fatal(Exception):
    def __init__(self, cause: str, status: int | None = None):
        super().__init__(cause)
        self.cause = cause
        self.status = status


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta-seconds or an HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def chat_cache_key(
    model: str,
    messages: list[dict],
    temperature: float,
    max_tokens: int | None,
    logit_bias: dict | None,
    response_format: dict | None,
) -> str:
    payload = {
        "model": model,
        "messages": messages,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "logit_bias": {str(k): v for k, v in logit_bias.items()} if logit_bias else logit_bias,
        "response_format": response_format,
    }
    return hashlib.sha256(_canonical(payload).encode("utf-8")).hexdigest()


_REASONING = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.S | re.I)


def answer_text(raw: str) -> str:
    """A chat answer without a reasoning model's thinking (`<think>...</think>`, as Qwen3 or
    DeepSeek-R1 served by vLLM or Ollama put it in the content): its drafts would otherwise be
    parsed as records. A reply whose template opened the block (only `</think>` in the text) keeps
    what follows it; one cut off inside its thinking has no answer (empty)."""
    if "think" not in raw.lower():
        return raw
    text = _REASONING.sub("", raw)
    lower = text.lower()
    closing = max(lower.rfind("</think>"), lower.rfind("</thinking>"))
    if closing >= 0:
        text = text[text.index(">", closing) + 1 :]
    elif lower.lstrip().startswith(("<think>", "<thinking>")):
        return ""
    return text.strip() if text != raw else raw


def fit_embedding_input(text: str, max_tokens: int) -> tuple[str, int]:
    """(what is sent to embed `text`, a bound on its tokens): the text itself when it is short
    enough, else its first `max_tokens` cl100k tokens. A UTF-8 byte is at least one token's worth,
    so a text of at most `max_tokens` bytes is sent without being tokenized (most chunks)."""
    size = len(text.encode("utf-8"))
    return (text, size) if size <= max_tokens else head_tokens(text, max_tokens)


def _embedding_batches(texts: list[str], bounds: dict[str, int]) -> list[list[str]]:
    """`texts` in order, cut into requests of at most EMBEDDING_BATCH texts whose token bounds sum
    to at most EMBEDDING_REQUEST_TOKENS (a single text is always a request of its own)."""
    out: list[list[str]] = []
    batch: list[str] = []
    total = 0
    for t in texts:
        if batch and (len(batch) == EMBEDDING_BATCH or total + bounds[t] > EMBEDDING_REQUEST_TOKENS):
            out.append(batch)
            batch, total = [], 0
        batch.append(t)
        total += bounds[t]
    if batch:
        out.append(batch)
    return out


def embedding_cache_key(embedding_model: str, text: str) -> str:
    payload = {"embedding_model": embedding_model, "text": text}
    return hashlib.sha256(_canonical(payload).encode("utf-8")).hexdigest()


def _message_text(messages: list[dict]) -> str:
    parts: list[str] = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):  # multi-part content: count the text parts
            parts += [p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "\n".join(parts)


def _deadline_client(timeout_s: float):
    """The SDK's HTTP client, with each answer bounded by `timeout_s` as a whole. The SDK's timeout
    bounds each wait (connect, each read), so an endpoint that sends its answer a byte at a time
    would hold a call for as long as it likes. The client is otherwise the SDK's own (its proxies
    from the environment, limits and redirects)."""
    import httpx2
    import openai

    class Stream(httpx2.SyncByteStream):
        def __init__(self, inner, deadline: float, request) -> None:
            self.inner, self.deadline, self.request = inner, deadline, request

        def __iter__(self):
            for chunk in self.inner:
                if time.monotonic() > self.deadline:
                    raise httpx2.ReadTimeout(f"the answer took longer than {timeout_s:g}s", request=self.request)
                yield chunk

        def close(self) -> None:
            self.inner.close()

    class Client(openai.DefaultHttpxClient):
        def send(self, request, *, stream: bool = False, **kwargs):
            deadline = time.monotonic() + timeout_s
            response = super().send(request, stream=True, **kwargs)
            response.stream = Stream(response.stream, deadline, request)
            if not stream:
                try:
                    response.read()
                finally:
                    response.close()
            return response

    return Client(timeout=timeout_s)


class LLMClient:
    def __init__(
        self,
        *,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        cache: KVCache | None = None,
        max_concurrent: int = setting_default("GRAPHRAG_MAX_CONCURRENT_CHATS"),
        timeout_s: float = float(setting_default("GRAPHRAG_LLM_TIMEOUT")),
        max_retries: int = setting_default("GRAPHRAG_LLM_MAX_RETRIES"),
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        embedding_model: str | None = None,
        embedding_max_tokens: int | None = None,
        breaker: int | None = None,
        max_call_s: float | None = None,
        pricing: Pricing | None = None,
        budgeted: bool = False,
    ):
        """breaker: consecutive failed calls after which every call fails at once (None: the
        ``GRAPHRAG_LLM_BREAKER`` variable, else 3; 0: never). max_call_s: no retry is started that
        would begin later than this after the call's first request (None: ``max(60, 2 x
        timeout_s)``); one call thus takes at most about ``max_call_s + timeout_s``. pricing: the
        price of ``model`` (None: looked up for the model and endpoint, see llm/pricing.py).
        budgeted: the client of a pipeline step: under a budget (GRAPHRAG_MAX_COST_USD) every request
        first reserves its worst-case cost (queries and `serve` are not limited by a build's budget).
        embedding_max_tokens: longer texts are cut to this many tokens before they are embedded
        (None: the ``GRAPHRAG_EMBEDDING_MAX_TOKENS`` variable, else 8191, OpenAI's limit)."""
        import openai

        if max_concurrent < 1:
            raise ValueError("max_concurrent must be >= 1")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if breaker is None:
            breaker = setting("GRAPHRAG_LLM_BREAKER")  # ValueError naming the variable when it is not a number
        if breaker < 0:
            raise ValueError("breaker must be >= 0 (0 = never)")
        if max_call_s is None:
            max_call_s = max(60.0, 2.0 * timeout_s)
        if max_call_s <= 0:
            raise ValueError("max_call_s must be > 0")
        key = (
            api_key
            or setting_raw("OPENAI_API_KEY")
            or ("EMPTY" if (base_url or setting_raw("OPENAI_BASE_URL")) else None)
        )
        # blanks around a key are never part of it (a line end kept from a .env file saved on Windows):
        # sent as they are, they make every request fail with the key shown escaped in the error
        key = key.strip() if isinstance(key, str) else key
        if not key:
            raise ValueError(
                "LLMClient needs an API key (api_key or OPENAI_API_KEY) or a base_url for a keyless local endpoint"
            )
        if not (key.isascii() and key.isprintable()):  # (a header cannot carry it: every request would fail)
            raise ValueError(
                "the API key (OPENAI_API_KEY) holds a character an HTTP header cannot carry (a non-ASCII letter, "
                "an invisible or control character): copy it again from the provider"
            )
        if embedding_max_tokens is None:
            embedding_max_tokens = setting("GRAPHRAG_EMBEDDING_MAX_TOKENS")
        if embedding_max_tokens < 16:
            raise ValueError("embedding_max_tokens must be >= 16")
        self.model = model
        self.embedding_model = embedding_model
        self.embedding_max_tokens = int(embedding_max_tokens)
        # the dimension of the embedding model's vectors, once an answer fetched in this process gave
        # it: a cached vector of another dimension is fetched again, an answer of another is malformed
        self.embedding_dim: int | None = None
        self.cache = cache
        self.max_concurrent = max_concurrent
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self._key = _Secret(key)
        self._masks = secret_forms(key)
        self._client = openai.OpenAI(
            api_key=key, base_url=base_url, max_retries=0, timeout=timeout_s, http_client=_deadline_client(timeout_s)
        )
        self._endpoint = redact_url(str(self._client.base_url))
        self.pricing = pricing if pricing is not None else pricing_for(model, self._endpoint)
        self.budgeted = budgeted
        self._openai = openai
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self.usage = LLMUsage()
        self._progress_source = progress.new_source()
        self.attempts = 0  # every HTTP attempt (chat and embeddings), successful or not
        self.breaker = breaker
        self.max_call_s = float(max_call_s)
        # circuit state, guarded by _cond (a re-entrant lock, so cancel() is safe from anywhere)
        self._cond = threading.Condition()
        with _registry_lock:
            self._healthy = self._endpoint in _PROVEN  # False: requests go one call at a time
            _CLIENTS.add(self)
        self._gate_owner: object | None = None  # the call allowed to make requests while not healthy
        self._failures = 0  # calls failed in a row
        self._circuit: LLMCircuitOpen | None = None
        self._opened_at = 0.0  # time.monotonic() when the breaker opened
        # None (a build: the breaker stays open, the build stops); a long-lived process (`serve`) sets
        # seconds after which an open breaker lets one call try the endpoint again
        self.retry_open_after_s: float | None = None
        # what the breaker's message tells the user to do once the endpoint works
        self.resume_hint = "once the endpoint works, run the build again and it resumes where it stopped"

    # -- construction / description ----------------------------------------------------------------
    @classmethod
    def from_env(cls, cache: KVCache | None = None) -> LLMClient | None:
        """A client configured from the settings (their variables, else their defaults); None without
        an endpoint (neither OPENAI_API_KEY nor OPENAI_BASE_URL)."""
        api_key = setting_raw("OPENAI_API_KEY")
        base_url = setting("OPENAI_BASE_URL")
        if not api_key and not base_url:
            return None
        return cls(
            model=setting("GRAPHRAG_LLM_MODEL"),
            api_key=api_key or "EMPTY",
            base_url=base_url,
            cache=cache,
            max_concurrent=setting("GRAPHRAG_MAX_CONCURRENT_CHATS"),
            timeout_s=float(setting("GRAPHRAG_LLM_TIMEOUT")),
            max_retries=setting("GRAPHRAG_LLM_MAX_RETRIES"),
            embedding_model=endpoint_embedding_model(setting("GRAPHRAG_EMBEDDING_MODEL")),
            embedding_max_tokens=setting("GRAPHRAG_EMBEDDING_MAX_TOKENS"),
        )

    @property
    def base_url(self) -> str:
        """The endpoint URL without credentials."""
        return self._endpoint

    def describe(self) -> str:
        return f"model {self.model} at {self._endpoint}"

    def __repr__(self) -> str:
        return f"LLMClient({self.describe()})"

    __str__ = __repr__

    def close(self) -> None:
        self._client.close()

    # -- usage / cancellation ------------------------------------------------------------------------
    def usage_snapshot(self) -> LLMUsage:
        with self._lock:
            return LLMUsage(**vars(self.usage))

    def _count(
        self,
        *,
        calls: int = 0,
        cache_hits: int = 0,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        priced: bool = True,
        truncated: bool = False,
    ) -> float:
        """Count usage; returns the calls' cost at the chat model's price (``priced=False``: calls
        whose price is not known here, e.g. embeddings, counted as unpriced - unless the overrides
        declare the server free, then they cost 0)."""
        price = self.pricing.price if (priced or self.pricing.free) else None
        cost = price.cost(prompt_tokens, completion_tokens) if (calls and price is not None) else 0.0
        with self._lock:
            self.usage.calls += calls
            self.usage.cache_hits += cache_hits
            self.usage.prompt_tokens += prompt_tokens
            self.usage.completion_tokens += completion_tokens
            self.usage.cost_usd += cost
            if calls and price is None:
                self.usage.unpriced_calls += calls
            self.usage.truncated += int(truncated)
            # the running totals, for a build's progress display (a no-op unless the CLI listens)
            progress.llm_usage(self._progress_source, LLMUsage(**self.usage.to_dict()))
        return cost

    def cancel(self) -> None:
        """Stop: calls waiting for a slot or backing off raise LLMCancelled promptly, new calls raise
        it at once. A request already on the wire finishes (bounded by ``timeout_s``)."""
        self._cancel.set()
        with self._cond:
            self._cond.notify_all()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def _check_cancelled(self) -> None:
        if self._cancel.is_set():
            raise LLMCancelled(f"LLM client for {self.describe()} was cancelled", endpoint=self._endpoint)

    # -- circuit breaker ------------------------------------------------------------------------------
    @property
    def circuit_open(self) -> bool:
        """True once the breaker has opened: every further request fails at once."""
        return self._circuit is not None

    @property
    def circuit_message(self) -> str:
        """Why the breaker opened (names the endpoint and the last error, never the key), or ""."""
        return str(self._circuit) if self._circuit is not None else ""

    @property
    def consecutive_failures(self) -> int:
        return self._failures

    @property
    def budget_exceeded(self) -> bool:
        """True once a call was refused because it could pass the build's budget."""
        return isinstance(self._circuit, LLMBudgetExceeded)

    def _circuit_error(self, c: LLMCircuitOpen | None = None) -> LLMCircuitOpen:
        c = c if c is not None else self._circuit
        return type(c)(str(c), failures=c.failures, last_error=c.last_error, status=c.status, endpoint=self._endpoint)

    def _check_open(self) -> None:
        c = self._circuit
        if c is None:
            return
        if (
            self.retry_open_after_s is not None
            and not isinstance(c, LLMBudgetExceeded)
            and time.monotonic() - self._opened_at >= self.retry_open_after_s
        ):
            # half-open: one call at a time tries the endpoint again; one more failure opens it again
            with self._cond:
                if self._circuit is c:
                    self._circuit = None
                    self._failures = max(0, self.breaker - 1)
                    self._healthy = False
                    self._cond.notify_all()
                    log.warning("trying the LLM endpoint %s again (its circuit breaker was open)", self._endpoint)
            return
        raise self._circuit_error(c)

    def _succeeded(self) -> None:
        with self._cond:
            self._failures = 0
            if not self._healthy:
                self._healthy = True
                self._cond.notify_all()
        with _registry_lock:
            _PROVEN.add(self._endpoint)

    def _set_healthy(self, healthy: bool) -> None:
        with self._cond:
            if self._healthy != healthy:
                self._healthy = healthy
                self._cond.notify_all()

    def _failed(self, err: LLMError) -> LLMError:
        """Count a call that failed for good; the error to raise (LLMCircuitOpen once open)."""
        with self._cond:
            self._failures += 1
            if self.breaker and self._failures >= self.breaker and self._circuit is None:
                self._circuit = LLMCircuitOpen(
                    f"The LLM endpoint {self._endpoint} failed {self._failures} calls in a row, so no further "
                    f"calls are made (circuit breaker GRAPHRAG_LLM_BREAKER={self.breaker}). Last error: {err} "
                    f"-- what was done before is kept: {self.resume_hint}.",
                    failures=self._failures,
                    last_error=str(err),
                    status=err.status,
                    endpoint=self._endpoint,
                )
                self._opened_at = time.monotonic()
                self._cond.notify_all()
                log.error("%s", self._circuit)
            opened = self._circuit
        return self._circuit_error(opened) if opened is not None else err

    def _enter_gate(self, token: object) -> bool:
        """While the endpoint is not known to work, requests are made by one call at a time: wait
        for the turn. True when this call now holds the turn (it keeps it until it ends), False
        when the endpoint is (or became) healthy and no turn is needed."""
        with self._cond:
            while True:
                if self._healthy:
                    return False
                self._check_cancelled()
                self._check_open()
                if self._gate_owner is None:
                    self._gate_owner = token
                    return True
                self._cond.wait(_POLL_S)

    def _leave_gate(self, token: object) -> None:
        with self._cond:
            if self._gate_owner is token:
                self._gate_owner = None
                self._cond.notify_all()

    def _sleep(self, delay: float) -> None:
        """Back off for ``delay`` seconds; cut short by cancel() or by the breaker opening."""
        deadline = time.monotonic() + delay
        with self._cond:
            while not self._cancel.is_set() and self._circuit is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
        self._check_cancelled()
        self._check_open()

    # -- the retry loop ---------------------------------------------------------------------------------
    def _scrub(self, text: str) -> str:
        for form in self._masks:
            text = text.replace(form, "***")
        return text[:500]

    def _classify(self, exc: BaseException) -> _Retryable | _Fatal:
        openai = self._openai
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            headers = exc.response.headers if exc.response is not None else {}
            detail = self._scrub(str(getattr(exc, "message", "") or exc))
            cause = f"HTTP {status}" + (f" ({detail})" if detail else "")
            if status in _RETRY_STATUSES or status >= 500:
                retry_after = None
                ms = headers.get("retry-after-ms")
                if ms:
                    try:
                        retry_after = max(0.0, float(ms) / 1000.0)
                    except ValueError:
                        retry_after = None
                if retry_after is None:
                    retry_after = parse_retry_after(headers.get("retry-after"))
                return _Retryable(cause, status, retry_after)
            return _Fatal(cause, status)
        if isinstance(exc, openai.APITimeoutError):
            return _Retryable(f"timeout after {self.timeout_s:g}s")
        if isinstance(exc, openai.APIConnectionError):
            inner = exc.__cause__ or exc.__context__
            detail = f"{type(inner).__name__}: {inner}" if inner is not None else str(exc)
            if type(inner).__name__ == "LocalProtocolError":  # the request cannot be sent at all
                return _Fatal(
                    f"the request is not valid HTTP ({self._scrub(detail)}): check OPENAI_API_KEY, "
                    "OPENAI_BASE_URL and the other OPENAI_* settings for characters that cannot be sent"
                )
            return _Retryable(f"connection error ({self._scrub(detail)})")
        if isinstance(exc, (openai.APIResponseValidationError, ValueError)):
            return _Retryable(f"malformed response ({type(exc).__name__}: {self._scrub(str(exc))[:200]})")
        raise exc

    def _backoff(self, retry: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(self.backoff_max_s, retry_after)
        return random.uniform(0.0, min(self.backoff_max_s, self.backoff_base_s * (2**retry)))

    def _acquire_slot(self) -> None:
        while not self._slots.acquire(timeout=_POLL_S):
            self._check_cancelled()
            self._check_open()
        if self._cancel.is_set() or self._circuit is not None:
            self._slots.release()
            self._check_cancelled()
            self._check_open()

    def _with_retries(self, what: str, request, model: str | None = None):
        """Run ``request()`` (one HTTP call; it validates the answer and raises ``_Retryable`` for a
        malformed one) with retries. Returns its result; raises LLMError / LLMCancelled /
        LLMCircuitOpen. model: the model the request names, in messages (default: the chat model)."""
        target = self.describe() if model is None else f"model {model} at {self._endpoint}"
        retries = 0
        started: float | None = None  # the first request (time spent waiting for a turn does not count)
        turn = object()
        holding = False  # this call holds the one-call-at-a-time turn
        try:
            while True:
                self._check_cancelled()
                self._check_open()
                if not holding:
                    holding = self._enter_gate(turn)
                self._acquire_slot()
                problem: _Retryable | _Fatal | None = None
                if started is None:
                    started = time.monotonic()
                try:
                    with self._lock:
                        self.attempts += 1
                    try:
                        result = request()
                    except (_Retryable, _Fatal) as exc:
                        problem = exc
                    except Exception as exc:  # noqa: BLE001 - classified below, unknown kinds re-raised
                        problem = self._classify(exc)
                finally:
                    self._slots.release()
                if problem is None:
                    self._succeeded()
                    return result
                attempts = retries + 1
                plural = "s" if attempts > 1 else ""
                if isinstance(problem, _Fatal):
                    err = LLMError(
                        f"{what} to {target} failed (not retried) after {attempts} attempt{plural}: {problem.cause}",
                        status=problem.status,
                        attempts=attempts,
                        endpoint=self._endpoint,
                    )
                    if problem.status in _REQUEST_SPECIFIC:
                        self._set_healthy(True)  # the endpoint answered; this request is the problem
                        raise err from None
                    self._set_healthy(False)
                    raise self._failed(err) from None
                self._set_healthy(False)
                if self._cancel.is_set():
                    self._check_cancelled()
                if retries >= self.max_retries:
                    raise self._failed(
                        LLMError(
                            f"{what} to {target} failed after {attempts} attempt{plural}: {problem.cause}",
                            status=problem.status,
                            attempts=attempts,
                            endpoint=self._endpoint,
                        )
                    ) from None
                delay = self._backoff(retries, problem.retry_after)
                elapsed = time.monotonic() - started
                if elapsed + delay > self.max_call_s:
                    raise self._failed(
                        LLMError(
                            f"{what} to {target} failed after {attempts} attempt{plural} in "
                            f"{elapsed:.0f}s (retry time limit {self.max_call_s:g}s): {problem.cause}",
                            status=problem.status,
                            attempts=attempts,
                            endpoint=self._endpoint,
                        )
                    ) from None
                log.warning(
                    "%s to %s: %s; retry %d/%d in %.2fs",
                    what,
                    target,
                    problem.cause,
                    retries + 1,
                    self.max_retries,
                    delay,
                )
                retries += 1
                self._sleep(delay)
        finally:
            if holding:
                self._leave_gate(turn)

    # -- chat ------------------------------------------------------------------------------------------
    def chat(
        self,
        messages: list[dict],
        *,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        logit_bias: dict[int, int] | None = None,
        response_format: dict | None = None,
        use_cache: bool = True,
    ) -> ChatResult:
        """One chat completion. ``use_cache=False`` skips the cache lookup but still stores the fresh
        answer (replacing the cached one), so a re-asked question (e.g. after an unparseable answer)
        is served its newest answer on the next run."""
        self._check_cancelled()
        key = None
        if self.cache is not None:
            key = chat_cache_key(self.model, messages, temperature, max_tokens, logit_bias, response_format)
        if key is not None and use_cache:
            hit = self.cache.get(key)
            if isinstance(hit, dict) and hit.get("text"):
                self._count(cache_hits=1, truncated=bool(hit.get("truncated")))
                return ChatResult(
                    text=answer_text(hit["text"]),
                    cached=True,
                    prompt_tokens=int(hit.get("prompt_tokens") or 0),
                    completion_tokens=int(hit.get("completion_tokens") or 0),
                    truncated=bool(hit.get("truncated")),
                    cache_key=key,
                )

        params: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": temperature}
        if max_tokens is not None:
            params["max_tokens"] = max_tokens
        if logit_bias:
            params["logit_bias"] = {str(k): v for k, v in logit_bias.items()}
        if response_format is not None:
            params["response_format"] = response_format

        def request():
            resp = self._client.chat.completions.create(**params)
            try:
                choice = resp.choices[0]
                text = choice.message.content or ""
            except (AttributeError, IndexError, TypeError, KeyError):
                raise _Retryable(f"malformed response (no choices[0].message in {type(resp).__name__})") from None
            # cut at a limit the caller set (the loop check's one token) is what it asked for
            return resp, text, max_tokens is None and getattr(choice, "finish_reason", None) == "length"

        reserved = self._reserve(messages, max_tokens)
        cost = 0.0
        try:
            resp, text, truncated = self._with_retries("chat request", request)
            usage = getattr(resp, "usage", None)
            prompt_tokens = getattr(usage, "prompt_tokens", None) if usage is not None else None
            completion_tokens = getattr(usage, "completion_tokens", None) if usage is not None else None
            if prompt_tokens is None:
                prompt_tokens = count_tokens(_message_text(messages))
            if completion_tokens is None:
                completion_tokens = count_tokens(text)
            prompt_tokens, completion_tokens = int(prompt_tokens), int(completion_tokens)
            cost = self._count(
                calls=1, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, truncated=truncated
            )
        finally:
            if reserved is not None:
                budgets.current().settle(reserved, cost)
        if key is not None and text:
            entry = {"text": text, "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
            self.cache.put(key, {**entry, "truncated": True} if truncated else entry)
        return ChatResult(
            text=answer_text(text),
            cached=False,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            truncated=truncated,
            cache_key=key,
        )

    def _reserve(self, messages: list[dict], max_tokens: int | None) -> float | None:
        """Under a budget, hold this call's worst-case cost (None without a budget); past it, open
        the circuit with LLMBudgetExceeded and raise it: no request is made."""
        if not self.budgeted:
            return None
        accountant = budgets.current()
        if accountant.limit_usd is None:
            return None
        self._check_cancelled()
        self._check_open()
        price = self.pricing.price
        if price is None:
            raise self._stop_for_budget(
                f"a budget is set (GRAPHRAG_MAX_COST_USD={accountant.limit_usd:g}) but the price of the model is "
                f"unknown: {self.pricing.unknown_reason}"
            )
        worst = budgets.worst_case_usd(price, count_tokens(_message_text(messages)), max_tokens)
        refusal = accountant.reserve(worst, stopped=lambda: self._cancel.is_set() or self._circuit is not None)
        if refusal is None:
            return worst
        self._check_cancelled()  # the wait for calls in flight ended by a stop, not by the budget
        self._check_open()
        raise self._stop_for_budget(
            f"the LLM budget GRAPHRAG_MAX_COST_USD=${refusal.limit_usd:g} would be exceeded: "
            f"${refusal.spent_usd:.4f} spent so far"
            + (f" and ${refusal.reserved_usd:.4f} held by calls in flight" if refusal.reserved_usd else "")
            + f", the next call may cost up to ${refusal.needed_usd:.4f}, so no further calls are made"
        )

    def _stop_for_budget(self, message: str) -> LLMBudgetExceeded:
        with self._cond:
            if self._circuit is None:
                self._circuit = LLMBudgetExceeded(message, endpoint=self._endpoint)
                self._cond.notify_all()
                log.error("%s", self._circuit)
        return self._circuit_error()

    def chat_many(self, calls: list[dict]) -> list[ChatResult | LLMError]:
        """Run several ``chat`` calls (each dict = its kwargs) in threads, at most ``max_concurrent``
        HTTP requests at once; results in input order, a failed call gives its LLMError. If the
        client is cancelled meanwhile, raises LLMCancelled (after the running calls have ended)."""
        if not calls:
            return []
        self._check_cancelled()

        def one(kwargs: dict) -> ChatResult | LLMError:
            try:
                return self.chat(**kwargs)
            except LLMError as exc:
                return exc

        workers = min(self.max_concurrent, len(calls))
        if workers == 1:
            results = [one(kw) for kw in calls]
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-chat") as pool:
                results = list(pool.map(one, calls))
        if self._cancel.is_set() and any(isinstance(r, LLMCancelled) for r in results):
            self._check_cancelled()
        return results

    # -- embeddings ------------------------------------------------------------------------------------
    def embed(self, texts: list[str]) -> numpy.ndarray:
        """Embed ``texts`` with ``embedding_model``: float32, L2-normalised rows in input order.
        A text longer than ``embedding_max_tokens`` is embedded by its first that many tokens (an
        endpoint refuses the whole request otherwise: in `fast` a relation named in hundreds of
        chunks joins hundreds of description fragments). Each text is cached by (embedding_model,
        text sent); misses go in batches of at most 64 texts and EMBEDDING_REQUEST_TOKENS tokens.
        Usage: one call per request, one cache hit per cached text, prompt tokens from the response."""
        import numpy as np

        if not self.embedding_model:
            raise ValueError(f"{self!r} has no embedding_model (GRAPHRAG_EMBEDDING_MODEL)")
        self._check_cancelled()
        texts = list(texts)
        vectors: dict[str, np.ndarray] = {}
        fitted = {t: fit_embedding_input(t, self.embedding_max_tokens) for t in dict.fromkeys(texts)}
        cut = sum(1 for t, (sent, _) in fitted.items() if sent is not t)
        if cut:
            log.info(f"{cut} texts longer than {self.embedding_max_tokens} tokens are embedded by their start")
        keys = {t: embedding_cache_key(self.embedding_model, sent) for t, (sent, _) in fitted.items()}
        if self.cache is not None and keys:
            found = self.cache.get_many(keys.values())
            for text, key in keys.items():
                if isinstance(found.get(key), list) and found[key]:
                    if self.embedding_dim is not None and len(found[key]) != self.embedding_dim:
                        continue  # stored from a malformed answer: fetched again (and replaced)
                    vector = np.asarray(found[key], dtype=np.float32)
                    if not np.isfinite(vector).all():
                        continue  # NaN stored by an older version from a malformed answer: fetched again
                    vectors[text] = vector
            hits = sum(1 for t in texts if t in vectors)
            if hits:
                self._count(cache_hits=hits)
        missing = [t for t in keys if t not in vectors]
        for batch in _embedding_batches(missing, {t: bound for t, (_, bound) in fitted.items()}):
            rows, tokens = self._embed_batch([fitted[t][0] for t in batch])
            self._count(calls=1, prompt_tokens=tokens, priced=False)  # the price table is for the chat model
            fresh = {}
            for text, row in zip(batch, rows):
                vectors[text] = row
                fresh[keys[text]] = [float(x) for x in row]
            if self.cache is not None:
                self.cache.put_many(fresh)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        dims = {v.shape[0] for v in vectors.values()}
        if len(dims) != 1:
            raise LLMError(
                f"embeddings from {self.describe()} have mixed dimensions {sorted(dims)}; "
                "clear the cache after changing the embedding model",
                endpoint=self._endpoint,
            )
        return np.stack([vectors[t] for t in texts]).astype(np.float32, copy=False)

    def probe_embedding_dim(self) -> int:
        """The embedding model's dimension, from a request (not the cache: a vector stored from a
        malformed answer must not set it); later answers and cached vectors are held to it. With
        the endpoint not answering, the cached probe says it (a rebuild from cached vectors works
        without the endpoint, as before)."""
        try:
            rows, tokens = self._embed_batch(["dimension probe"])
        except LLMCancelled:
            raise
        except LLMError:
            key = embedding_cache_key(self.embedding_model, "dimension probe")
            stored = self.cache.get_many([key]).get(key) if self.cache is not None else None
            if not (isinstance(stored, list) and stored):
                raise
            return len(stored)
        self._count(calls=1, prompt_tokens=tokens, priced=False)
        if self.cache is not None:  # what a later probe falls back to without the endpoint
            self.cache.put_many({embedding_cache_key(self.embedding_model, "dimension probe"): rows[0].tolist()})
        return int(rows[0].shape[0])

    def _embed_batch(self, batch: list[str]) -> tuple[list[numpy.ndarray], int]:
        import numpy as np

        inputs = [t if t else " " for t in batch]  # OpenAI rejects empty strings

        def request():
            resp = self._client.embeddings.create(model=self.embedding_model, input=inputs, encoding_format="float")
            try:
                data = sorted(resp.data, key=lambda d: d.index)
                matrix = np.asarray([d.embedding for d in data], dtype=np.float32)
            except (AttributeError, TypeError, ValueError) as exc:
                raise _Retryable(f"malformed embeddings response ({type(exc).__name__})") from None
            if matrix.ndim != 2 or matrix.shape[0] != len(inputs) or matrix.shape[1] == 0:
                raise _Retryable(f"malformed embeddings response (shape {matrix.shape} for {len(inputs)} inputs)")
            if self.embedding_dim is not None and matrix.shape[1] != self.embedding_dim:
                raise _Retryable(
                    f"malformed embeddings response (vectors of {matrix.shape[1]} dimensions, "
                    f"{self.embedding_dim} before)"
                )
            bad = int((~np.isfinite(matrix).all(axis=1)).sum())
            if bad:  # NaN or infinity: every score against such a vector is NaN
                raise _Retryable(f"malformed embeddings response ({bad} of {len(inputs)} vectors not finite)")
            return resp, matrix

        resp, matrix = self._with_retries("embedding request", request, model=self.embedding_model)
        if self.embedding_dim is None:
            self.embedding_dim = int(matrix.shape[1])
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        matrix = (matrix / norms).astype(np.float32)
        usage = getattr(resp, "usage", None)
        tokens = getattr(usage, "prompt_tokens", None) if usage is not None else None
        if tokens is None:
            tokens = sum(count_tokens(t) for t in batch)
        return list(matrix), int(tokens)
