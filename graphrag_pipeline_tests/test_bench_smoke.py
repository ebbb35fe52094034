"""Keeps the benchmark harness alive: a tiny overhead run and a tiny query run (counts, not timings)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_benchmark_harness_smoke(tmp_path):
    base = [
        sys.executable,
        str(REPO / "benchmarks" / "run.py"),
        "--results-dir",
        str(tmp_path / "r"),
        "--work-dir",
        str(tmp_path / "w"),
    ]
    env_cmds = [
        base + ["overhead", "--method", "light", "--docs", "2", "--chat-latency-ms", "5"],
        base + ["query", "--entities", "400", "--questions", "5"],
    ]
    for cmd in env_cmds:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=600,
            cwd=REPO,
            env={
                k: v
                for k, v in __import__("os").environ.items()
                if not k.startswith(("GRAPHRAG_", "OPENAI_", "DAGSTER_"))
            },
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    overhead = json.loads((tmp_path / "r" / "overhead-light.json").read_text())
    text = json.dumps(overhead)
    assert '"llm_calls"' in text and '"ratio"' in text
    query = json.loads((tmp_path / "r" / "query.json").read_text())
    modes = {r["mode"] for r in query["rows"] if "p50_ms" in r}
    assert modes == {"local", "global", "naive"}
