"""Tests for graphrag_pipeline.index.embedding (offline hashing embedder)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from graphrag_pipeline.index.embedding import DEFAULT_DIM, HashingEmbedder

TEXTS = ["Charles Darwin", "Royal Society", "郑和下西洋", "", "Ada Lovelace wrote notes on the Analytical Engine."]


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))  # vectors are unit length


@pytest.fixture(scope="module")
def emb():
    return HashingEmbedder()


def test_shape_dtype_and_model_id(emb):
    out = emb.embed(TEXTS)
    assert out.shape == (len(TEXTS), DEFAULT_DIM) and out.dtype == np.float32
    small = HashingEmbedder(dim=64)
    assert small.embed(["x"]).shape == (1, 64)
    assert small.model_id == "hashing-v2-64" and emb.model_id == f"hashing-v2-{DEFAULT_DIM}"
    assert emb.embed([]).shape == (0, DEFAULT_DIM)


def test_l2_normalised(emb):
    out = emb.embed([t for t in TEXTS if t] + ["a", "日本語のテキスト", "한국어 텍스트"])
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("text", ["", "   ", "!!! ... ???", None])
def test_text_without_features_is_a_zero_vector(emb, text):
    vec = emb.embed([text])[0]
    assert not np.isnan(vec).any()
    assert not vec.any()


def test_batch_equals_single(emb):
    batch = emb.embed(TEXTS)
    for i, text in enumerate(TEXTS):
        assert np.array_equal(batch[i], emb.embed_one(text))


def test_similar_names_are_closer_than_unrelated_names(emb):
    v = {
        t: emb.embed_one(t)
        for t in [
            "Charles Darwin",
            "Darwin",
            "charles darwin",
            "Charles Babbage",
            "Royal Society",
            "Isaac Newton",
            "Newton",
        ]
    }
    assert cos(v["Charles Darwin"], v["charles darwin"]) == pytest.approx(1.0, abs=1e-6)  # case-folded
    assert cos(v["Charles Darwin"], v["Darwin"]) > cos(v["Charles Darwin"], v["Royal Society"]) + 0.3
    assert cos(v["Charles Darwin"], v["Darwin"]) > cos(v["Charles Darwin"], v["Isaac Newton"])
    assert cos(v["Charles Darwin"], v["Charles Babbage"]) > cos(v["Charles Darwin"], v["Royal Society"])
    assert cos(v["Isaac Newton"], v["Newton"]) > cos(v["Isaac Newton"], v["Darwin"])


def test_chinese_is_supported(emb):
    v = {t: emb.embed_one(t) for t in ["郑和", "郑和下西洋", "指南针", "造纸术", "Zheng He"]}
    for vec in v.values():
        assert np.linalg.norm(vec) == pytest.approx(1.0, abs=1e-5)
    assert cos(v["郑和"], v["郑和下西洋"]) > cos(v["郑和"], v["指南针"]) + 0.3
    assert cos(v["指南针"], v["造纸术"]) < 0.5
    # full-width and half-width forms are the same text after NFKC
    assert np.array_equal(emb.embed_one("ＡＢＣ１２３"), emb.embed_one("abc123"))


def test_deterministic_across_processes(emb):
    code = (
        "import json, sys; from graphrag_pipeline.index.embedding import HashingEmbedder; "
        "print(json.dumps(HashingEmbedder().embed(json.loads(sys.argv[1])).tolist()))"
    )
    here = emb.embed(TEXTS)
    for seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(TEXTS)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        there = np.array(json.loads(done.stdout), dtype=np.float32)
        assert np.array_equal(here, there), seed
