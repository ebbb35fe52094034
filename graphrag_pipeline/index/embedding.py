"""The offline embedder: hashed character n-grams and words, deterministic, no network.

Vectors are L2-normalised, so a dot product is the cosine similarity. Character 3-grams of the
case-folded text make near-identical names close ("Darwin" ~ "Charles Darwin"); words and CJK
bigrams carry the rest. Hashes are CRC32 and multiply-shift (stable across processes, unlike
Python's hash()), computed for a whole batch with numpy.
"""

from __future__ import annotations

import re
import unicodedata
import zlib

import numpy as np

from graphrag_pipeline.llm.protocol import EmbeddingClient

DEFAULT_DIM = 512
_WORD = re.compile(r"\w+", re.UNICODE)
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


_U64 = np.uint64
_MIX = _U64(0x9E3779B97F4A7C15)
_K = [_U64(k) for k in (0x100000001B3, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5, 0xFF51AFD7ED558CCD)]


def _is_cjk_array(cps: np.ndarray) -> np.ndarray:
    return (
        ((cps >= 0x4E00) & (cps <= 0x9FFF))
        | ((cps >= 0x3400) & (cps <= 0x4DBF))
        | ((cps >= 0x3040) & (cps <= 0x30FF))
        | ((cps >= 0xAC00) & (cps <= 0xD7AF))
    )


def _mix(x: np.ndarray) -> np.ndarray:
    """A 32-bit hash of 64-bit codes (multiply-shift), stable across processes and platforms."""
    with np.errstate(over="ignore"):
        return ((x * _MIX) >> _U64(32)) & _U64(0xFFFFFFFF)


class HashingEmbedder:
    """Features per text (all case-folded, NFKC): each non-CJK word (weight 1), the character
    3-grams of " word " (0.5), and for CJK runs each character (1) and character bigram (1.5).
    Features are hashed with a sign into `dim` buckets; the whole batch is hashed with numpy."""

    name = "hashing"

    def __init__(self, dim: int = DEFAULT_DIM):
        self.dim = dim

    @property
    def model_id(self) -> str:
        return f"hashing-v2-{self.dim}"

    def embed(self, texts: list[str]) -> np.ndarray:
        n, dim = len(texts), self.dim
        if n == 0:
            return np.zeros((0, dim), dtype=np.float32)
        words = [_WORD.findall(unicodedata.normalize("NFKC", t or "").casefold()) for t in texts]
        padded = [" " + " ".join(w) + " " for w in words]
        lens = np.fromiter((len(p) for p in padded), dtype=np.int64, count=n)
        cps = np.frombuffer("".join(padded).encode("utf-32-le"), dtype=np.uint32).astype(_U64)
        row = np.repeat(np.arange(n, dtype=np.int64), lens)
        cjk = _is_cjk_array(cps)
        parts_row, parts_hash, parts_weight = [], [], []

        def add(rows: np.ndarray, hashes: np.ndarray, weight: float) -> None:
            parts_row.append(rows)
            parts_hash.append(hashes)
            parts_weight.append(np.full(len(rows), weight, dtype=np.float64))

        with np.errstate(over="ignore"):
            if len(cps) >= 3:  # character 3-grams inside " word " (never across words or CJK)
                a, b, c = cps[:-2], cps[1:-1], cps[2:]
                ok = (row[:-2] == row[2:]) & (b != _U64(32)) & ~(cjk[:-2] | cjk[1:-1] | cjk[2:])
                add(row[:-2][ok], _mix(a[ok] * _K[0] + b[ok] * _K[1] + c[ok] * _K[2] + _U64(3)), 0.5)
            if cjk.any():
                add(row[cjk], _mix(cps[cjk] * _K[3] + _U64(1)), 1.0)
                ok = (row[:-1] == row[1:]) & cjk[:-1] & cjk[1:]
                add(row[:-1][ok], _mix(cps[:-1][ok] * _K[3] + cps[1:][ok] * _K[4] + _U64(2)), 1.5)
        word_rows, word_hashes = [], []
        for r, ws in enumerate(words):
            for w in ws:
                if not _CJK.search(w):
                    word_rows.append(r)
                    word_hashes.append(zlib.crc32(w.encode("utf-8")))
        if word_rows:
            add(np.asarray(word_rows, dtype=np.int64), np.asarray(word_hashes, dtype=_U64), 1.0)
        rows_all = np.concatenate(parts_row) if parts_row else np.zeros(0, dtype=np.int64)
        hashes = np.concatenate(parts_hash) if parts_hash else np.zeros(0, dtype=_U64)
        weights = np.concatenate(parts_weight) if parts_weight else np.zeros(0)
        signs = np.where((hashes >> _U64(31)) & _U64(1), 1.0, -1.0) * weights
        flat = rows_all * dim + (hashes % _U64(dim)).astype(np.int64)
        out = np.bincount(flat, weights=signs, minlength=n * dim).reshape(n, dim).astype(np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


class EndpointEmbedder:
    """Embeddings from the LLM endpoint's embeddings API (through LLMClient.embed, cached)."""

    def __init__(self, client: EmbeddingClient):
        self.client = client
        self._dim: int | None = None

    @property
    def model_id(self) -> str:
        return f"endpoint:{self.client.embedding_model}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            probe = getattr(self.client, "probe_embedding_dim", None)  # asked, not read from the cache
            self._dim = int(probe()) if probe else int(self.client.embed(["dimension probe"]).shape[1])
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = np.asarray(self.client.embed([t or " " for t in texts]), dtype=np.float32)
        self._dim = out.shape[1]
        return out

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]
