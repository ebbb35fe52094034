"""Which query mode retrieves the answers? The sample corpus's test questions, each with the fact an
answer needs and the document it is in: per mode, how often the fact is in the context, how often
that document is among the cited sources, and the context size. Offline (fast method, hashing
embedder). Run: .venv/bin/python benchmarks/modes.py (builds a scratch home from data/corpus)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = [  # question, a fact the answer needs, the document it is in
    ("Who sailed with Charles Darwin on HMS Beagle?", "FitzRoy", "darwin_and_wallace.txt"),
    ("Who recommended Darwin for the Beagle voyage?", "Henslow", "darwin_and_wallace.txt"),
    ("Who was Ada Lovelace and what did she translate?", "Menabrea", "babbage_and_lovelace.html"),
    ("Enigma and the Bombe at Bletchley Park", "Bombe", "turing_and_bletchley_park.txt"),
    ("Which Polish mathematician broke Enigma first?", "Rejewski", "turing_and_bletchley_park.txt"),
    ("What did Marie Curie discover?", "polonium", "curie_radioactivity.md"),
    ("Who persuaded Newton to publish the Principia?", "Halley", "newton_and_the_royal_society.md"),
    ("Where was Isaac Newton born?", "Woolsthorpe", "newton_and_the_royal_society.md"),
    ("郑和下西洋从哪里出发", "刘家港", "zheng_he_voyages_zh.txt"),
    ("谁发明了活字印刷", "毕昇", "printing_and_paper_zh.md"),
]


def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="graphrag-modes-"))
    env = {**os.environ, "GRAPHRAG_HOME": str(home)}
    env.pop("GRAPHRAG_ES_URL", None)
    cli = [sys.executable, "-m", "graphrag_pipeline.cli"]
    subprocess.run(
        [*cli, "build", "--corpus", str(ROOT / "data" / "corpus"), "--method", "fast"],
        env=env,
        check=True,
        capture_output=True,
    )
    from graphrag_pipeline.ingest.tokens import count_tokens
    from graphrag_pipeline.query import DuckDBIndex, query
    from graphrag_pipeline.query.search import MODES

    print("| mode | fact in context | right document cited | context tokens (mean) |")
    print("|---|---|---|---|")
    with DuckDBIndex(home / "index" / "search_index.duckdb") as index:
        for mode in MODES:
            facts = docs = tokens = 0
            for question, fact, doc in CASES:
                result = query(index, question, mode)
                facts += fact in result.context
                docs += any(s["doc"] == doc for s in result.sources())
                tokens += count_tokens(result.context)
            n = len(CASES)
            print(f"| {mode} | {facts}/{n} | {docs}/{n} | {tokens // n} |")


if __name__ == "__main__":
    main()
