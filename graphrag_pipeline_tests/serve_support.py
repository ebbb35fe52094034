"""Helpers of test_serve.py and test_web_page.py: a real uvicorn server on a free 127.0.0.1 port, a
plain HTTP client (urllib), and a home built from the bundled corpus with the CLI."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from graphrag_pipeline_tests.conftest import SAMPLE_CORPUS, SETTINGS_ENV, cli

QUESTION = "Who sailed with Charles Darwin on HMS Beagle?"


def free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def free_port() -> int:
    with contextlib.closing(free_socket()) as sock:
        return sock.getsockname()[1]


@contextlib.contextmanager
def running(app, log_level: str = "warning"):
    """The app on a real uvicorn server in a thread; yields its base URL."""
    import uvicorn

    sock = free_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, log_config=None, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def http(method: str, url: str, body=None, headers: dict | None = None, raw: bytes | None = None, timeout=60):
    """(status, parsed JSON body or text) of one request; error statuses are returned, not raised."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None and "Content-Type" not in req.headers:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            status, payload, ctype = res.status, res.read(), res.headers.get("content-type", "")
    except urllib.error.HTTPError as exc:
        status, payload, ctype = exc.code, exc.read(), exc.headers.get("content-type", "")
    return status, (json.loads(payload) if "json" in ctype else payload.decode("utf-8", "replace"))


def wait_healthy(base: str, timeout_s: float = 60.0, proc=None) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            status, body = http("GET", f"{base}/health", timeout=5)
            if status == 200:
                return body
        except OSError:
            pass
        assert proc is None or proc.poll() is None, "the server exited"
        assert time.monotonic() < deadline, f"{base} did not become healthy"
        time.sleep(0.1)


def clean_env(home: Path, corpus: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS_ENV and not k.startswith("GRAPHRAG_")}
    env["GRAPHRAG_HOME"] = str(home)
    if corpus is not None:
        env["GRAPHRAG_CORPUS"] = str(corpus)
    return env


def build_home(root: Path) -> tuple[Path, Path]:
    """A home built from a copy of the bundled corpus (fast method) with the CLI, in this process;
    the environment is set for the call and restored afterwards."""
    home, corpus = root / "home", root / "corpus"
    shutil.copytree(SAMPLE_CORPUS, corpus)
    saved = {k: os.environ.get(k) for k in (*SETTINGS_ENV, "GRAPHRAG_ES_URL", "GRAPHRAG_SERVE_API_KEY")}
    try:
        for k in saved:
            os.environ.pop(k, None)
        os.environ["GRAPHRAG_HOME"] = str(home)
        code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
        assert code == 0, out
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return home, corpus


def same_result(a, b, rel: float = 1e-5) -> bool:
    """Equal JSON, floats within `rel`: the service's index is preloaded (numpy similarities) and the
    CLI's is scanned (DuckDB's): their float32 sums may round to another 6th decimal (0.378862 vs
    0.378861), which the products of local search carry on."""
    if isinstance(a, float) or isinstance(b, float):
        ok = isinstance(a, int | float) and isinstance(b, int | float)
        return ok and math.isclose(a, b, rel_tol=rel, abs_tol=2e-6)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_result(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_result(x, y, rel) for x, y in zip(a, b))
    return a == b
