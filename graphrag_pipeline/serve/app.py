"""The HTTP service over the published index (FastAPI; no Dagster): `create_app(home=...)`.

    POST /query              {"question": ..., "mode": "mix", "params": {...}, "answer": false}
                             -> the JSON of `graphrag-pipeline query --json` (QueryResult.to_dict())
    GET  /entities/{name}    an entity, its relations and neighbours, and the chunks it was extracted from
    GET  /chunks/{chunk_id}  one source chunk's text
    GET  /health             status, backend and the index version served
    GET  /                   the web page (static/); /docs and /openapi.json: the API description

With an API key (GRAPHRAG_SERVE_API_KEY, or api_key=) every API request needs it in `X-API-Key` or
`Authorization: Bearer`; the page, its files and /health stay open. Bodies larger than
max_body_bytes get 413; a query running longer than query_timeout_s gets 504 (the index and its
lock are released when it ends); more than max_in_flight queries at once get 503.
"""

import asyncio
import hmac
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from graphrag_pipeline.index.duckdb_reader import IndexNotFoundError
from graphrag_pipeline.index.live import Busy, IndexHolder
from graphrag_pipeline.query.search import DEFAULT_MODE, page_fields
from graphrag_pipeline.storage.layout import Paths

STATIC = Path(__file__).resolve().parent / "static"
DEFAULT_MAX_BODY_BYTES = 64 * 1024
DEFAULT_QUERY_TIMEOUT_S = 30.0
DEFAULT_MAX_IN_FLIGHT = 32
MAX_QUESTION_CHARS = 4000
ECHO_CHARS = 200  # of an invalid input, said back in a 422
MAX_NEIGHBOURS = 500
# after an LLM outage opened the client's circuit breaker, one query tries the endpoint again this
# many seconds later (a build stops instead; a server lives on)
SERVE_LLM_RETRY_S = 30.0


class QueryRequest(BaseModel):
    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS, description="the question")
    mode: str = Field(DEFAULT_MODE, description="search mode (see /health for the modes this server knows)")
    params: dict[str, float | int] | None = Field(
        None, description='search parameters overriding SearchParams\' defaults, e.g. {"ent_topn": 10}'
    )
    answer: bool = Field(False, description="generate an answer with the LLM (needs an endpoint; like --answer)")


class BodyLimit:
    """413 for a request body over `limit` bytes, by its Content-Length or as it streams in. The body
    (at most `limit` bytes) is read here and handed on whole, so no endpoint ever sees a larger one."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                return await self._refuse(send)
        parts, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            size += len(message.get("body", b""))
            if size > self.limit:
                return await self._refuse(send)
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body, handed = b"".join(parts), False

        async def replay():
            nonlocal handed
            if handed:
                return await receive()  # e.g. waiting for the disconnect
            handed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send):
        payload = json.dumps({"detail": f"the request body is larger than {self.limit} bytes"}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers + [(b"connection", b"close")]})
        await send({"type": "http.response.body", "body": payload})


def _check_params(given: dict[str, Any] | None):
    """SearchParams from the request's overrides: known names, numbers of the field's kind, sane ranges."""
    from graphrag_pipeline.query import SearchParams
    from graphrag_pipeline.query.search import param_problem

    known = {f.name: f for f in fields(SearchParams)}
    given = given or {}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise HTTPException(422, f"unknown search parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    values = {}
    for name, value in given.items():
        problem = param_problem(name, value)
        if problem:
            raise HTTPException(422, problem)
        values[name] = int(value) if isinstance(getattr(SearchParams(), name), int) else value
    return SearchParams(**values)


def create_app(
    home: Path | str | None = None,
    *,
    backend: str | None = None,
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    query_timeout_s: float = DEFAULT_QUERY_TIMEOUT_S,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    client: Any = "env",
) -> FastAPI:
    """The service of one GRAPHRAG_HOME (default: the environment's). api_key: default
    GRAPHRAG_SERVE_API_KEY ("" = none). client: the LLM client for query rewriting and answers, as
    `query` uses it ("env": from OPENAI_* like the CLI; None: offline)."""
    from graphrag_pipeline.query.search import MODES
    from graphrag_pipeline.settings import default_home, raw

    home = Path(home).expanduser().resolve() if home else default_home()
    key = raw("GRAPHRAG_SERVE_API_KEY") if api_key is None else (api_key or None)
    holder = IndexHolder(home, backend)
    if client == "env":
        client = _client_from_env(home)
    if client is not None and hasattr(client, "max_call_s"):
        # no retry of a query's LLM call starts after the query timed out (its caller got a 504)
        client.max_call_s = min(client.max_call_s, query_timeout_s)
    pool = ThreadPoolExecutor(max_workers=max_in_flight + 4, thread_name_prefix="graphrag-serve")
    in_flight = 0

    app = FastAPI(
        title="graphrag-pipeline",
        summary="Local, global and naive search over a published GraphRAG index",
        version="1",
    )
    app.state.holder = holder
    app.state.settings = {
        "home": str(home),
        "max_body_bytes": max_body_bytes,
        "query_timeout_s": query_timeout_s,
        "max_in_flight": max_in_flight,
        "auth": key is not None,
    }
    app.add_middleware(BodyLimit, limit=max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's 422 (which field, why), without echoing a long input back (a question of 4,001
        # characters came back whole): inputs are cut to ECHO_CHARS
        def cut(value):
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            return value if len(text) <= ECHO_CHARS else text[:ECHO_CHARS] + f"... ({len(text)} characters)"

        errors = [{**e, "input": cut(e["input"])} if "input" in e else e for e in exc.errors()]
        return JSONResponse({"detail": jsonable_encoder(errors)}, status_code=422)

    app.router.add_event_handler("shutdown", lambda: (pool.shutdown(wait=False), holder.close()))

    header_key = APIKeyHeader(name="X-API-Key", auto_error=False, description="GRAPHRAG_SERVE_API_KEY")
    bearer = HTTPBearer(auto_error=False, description="GRAPHRAG_SERVE_API_KEY as a bearer token")

    def authorized(
        x_api_key: Annotated[str | None, Depends(header_key)],
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> None:
        if key is None:
            return
        given = x_api_key or (credentials.credentials if credentials else None)
        if not given or not hmac.compare_digest(given.encode(), key.encode()):
            raise HTTPException(
                401,
                "an API key is required: send it as X-API-Key or Authorization: Bearer (GRAPHRAG_SERVE_API_KEY)",
                headers={"WWW-Authenticate": "Bearer"},
            )

    async def on_index(fn):
        """fn(index) in a worker thread on the current index, bounded by query_timeout_s."""
        nonlocal in_flight
        if in_flight >= max_in_flight:
            raise HTTPException(503, f"too many queries at once (more than {max_in_flight}); try again shortly")
        in_flight += 1
        loop = asyncio.get_running_loop()
        try:
            try:
                loaded = await loop.run_in_executor(pool, holder.acquire)  # a new index is loaded here
            except IndexNotFoundError as exc:
                raise HTTPException(503, str(exc)) from None
            except Busy as exc:
                raise HTTPException(503, str(exc)) from None
            deadline = time.monotonic() + query_timeout_s
            work = loop.run_in_executor(pool, holder.run, loaded, fn, deadline)
            work.add_done_callback(lambda f: f.cancelled() or f.exception())  # a late failure is not logged
            try:
                return await asyncio.wait_for(asyncio.shield(work), query_timeout_s)
            except TimeoutError:
                raise HTTPException(
                    504, f"the query did not finish within {query_timeout_s:g} s (the server's --timeout)"
                ) from None
            except Busy as exc:
                raise HTTPException(503, f"{exc}; try again shortly") from None
        finally:
            in_flight -= 1

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/health", summary="Service status and the index version it serves")
    async def health(request: Request) -> JSONResponse:
        body: dict[str, Any] = {"status": "ok", "modes": list(MODES), "auth": key is not None}
        loop = asyncio.get_running_loop()
        try:
            loaded = await loop.run_in_executor(pool, holder.current)
        except (IndexNotFoundError, Busy) as exc:
            return JSONResponse({**body, "status": "no_index", "detail": str(exc)}, status_code=503)
        body["index"] = loaded.describe()
        body["reloads"] = holder.reloads
        if client is not None and getattr(client, "circuit_open", False):
            # queries needing the model get 502 until it is tried again; the index itself serves
            body["llm"] = {"status": "failing", "detail": client.circuit_message}
        elif client is not None:
            body["llm"] = {"status": "ok"}
        return JSONResponse(body)

    @app.post("/query", summary="Search the index; the same JSON as `graphrag-pipeline query --json`")
    async def post_query(req: QueryRequest, _: Annotated[None, Depends(authorized)]) -> JSONResponse:
        from graphrag_pipeline.llm.client import LLMError
        from graphrag_pipeline.query import query

        if req.mode not in MODES:
            raise HTTPException(422, f"unknown mode {req.mode!r}: use one of {', '.join(MODES)}")
        if not req.question.strip():
            raise HTTPException(422, "the question is empty")
        params = _check_params(req.params)

        def run(index):
            return query(index, req.question, req.mode, params, client=client, answer=req.answer).to_dict()

        try:
            return JSONResponse(await on_index(run))
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        except LLMError as exc:
            raise HTTPException(502, f"the LLM endpoint failed: {exc}") from None

    @app.get("/entities/{name}", summary="An entity, its relations and neighbours, and its source chunks")
    async def get_entity(
        name: str,
        _: Annotated[None, Depends(authorized)],
        neighbours: Annotated[int, Query(ge=0, le=MAX_NEIGHBOURS, description="how many relations to list")] = 25,
    ) -> JSONResponse:
        from graphrag_pipeline.extract.records import entity_key

        key = entity_key(name)

        def run(index):
            found = index.entities_by_keys([key])
            if not found:
                return None
            rels = index.relations_of(key, neighbours)
            others = [r["target_key"] if r["source_key"] == key else r["source_key"] for r in rels]
            by_key = {e["key"]: e for e in index.entities_by_keys(others)}
            ids = index.entity_sources(key)
            chunks = index.chunk_texts(ids)
            return {
                "entity": _entity(found[0]),
                "relations": [{k: r[k] for k in ("source", "target", "description", "weight")} for r in rels],
                "neighbours": [_entity(by_key[k]) for k in dict.fromkeys(others) if k in by_key],
                "sources": [
                    {"chunk_id": c["chunk_id"], "doc": c["doc"], "position": c["position"], **page_fields(c)}
                    for c in chunks
                ],
            }

        out = await on_index(run)
        if out is None:
            raise HTTPException(404, f"no entity named {name!r} in the index")
        return JSONResponse(out)

    @app.get("/chunks/{chunk_id}", summary="The text of one source chunk")
    async def get_chunk(chunk_id: str, _: Annotated[None, Depends(authorized)]) -> JSONResponse:
        rows = await on_index(lambda index: index.chunk_texts([chunk_id]))
        if not rows:
            raise HTTPException(404, f"no chunk {chunk_id!r} in the index")
        first = rows[0]
        return JSONResponse(
            {
                "chunk_id": chunk_id,
                "doc": first["doc"],
                "position": first["position"],
                **page_fields(first),
                "text": first["text"],
                "docs": sorted({r["doc"] for r in rows}),
            }
        )

    return app


def _entity(row: dict) -> dict:
    return {k: row.get(k) for k in ("name", "type", "description", "pagerank")}


def _client_from_env(home: Path):
    """The LLM client `graphrag-pipeline query` would use (None without OPENAI_* settings), with the
    home's LLM cache read-only."""
    from graphrag_pipeline.llm.cache import open_cache_read_only
    from graphrag_pipeline.llm.client import LLMClient

    client = LLMClient.from_env()
    if client is not None:
        # the server lives on after an outage: an open breaker lets a call try the endpoint again
        client.retry_open_after_s = SERVE_LLM_RETRY_S
        client.resume_hint = f"the server tries the endpoint again after {SERVE_LLM_RETRY_S:g} s"
        client.cache, _problem = open_cache_read_only(Paths(home), "llm")
    return client
