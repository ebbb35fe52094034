"""The offline embedder: hashed character n-grams and words, deterministic, no network.

Vectors are L2-normalised, so a dot product is the cosine similarity. Character 3-grams of the
case-folded text make near-identical names close ("Darwin" ~ "Charles Darwin"); words and CJK
bigrams carry the rest. The hash is CRC32 (stable across processes, unlike Python's hash()).
"""

from __future__ import annotations

import re
import unicodedata
import zlib

import numpy as np

DEFAULT_DIM = 512
_WORD = re.compile(r"\w+", re.UNICODE)


def _is_cjk(ch: str) -> bool:
    return "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf" or "\u3040" <= ch <= "\u30ff" or "\uac00" <= ch <= "\ud7af"


def _features(text: str) -> list[tuple[str, float]]:
    text = unicodedata.normalize("NFKC", text).casefold()
    feats: list[tuple[str, float]] = []
    for word in _WORD.findall(text):
        if any(_is_cjk(c) for c in word):
            feats += [("c1:" + c, 1.0) for c in word]
            feats += [("c2:" + word[i : i + 2], 1.5) for i in range(len(word) - 1)]
            continue
        feats.append(("w:" + word, 1.0))
        padded = f" {word} "
        feats += [("g:" + padded[i : i + 3], 0.5) for i in range(len(padded) - 2)]
    return feats


class HashingEmbedder:
    name = "hashing"

    def __init__(self, dim: int = DEFAULT_DIM):
        self.dim = dim

    @property
    def model_id(self) -> str:
        return f"hashing-v1-{self.dim}"

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feat, weight in _features(text or ""):
                h = zlib.crc32(feat.encode("utf-8"))
                out[row, h % self.dim] += weight if (h >> 31) & 1 else -weight
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


class EndpointEmbedder:
    """Embeddings from the LLM endpoint's embeddings API (through LLMClient.embed, cached)."""

    def __init__(self, client):
        self.client = client
        self._dim: int | None = None

    @property
    def model_id(self) -> str:
        return f"endpoint:{self.client.embedding_model}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.client.embed(["dimension probe"]).shape[1])
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = np.asarray(self.client.embed([t or " " for t in texts]), dtype=np.float32)
        self._dim = out.shape[1]
        return out

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]
