"""Atomic file writes: every output is written beside its target and renamed into place.

A reader therefore sees either the old file or the new one, never a half-written file, and
two processes writing different partitions never touch the same file.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import polars as pl


@contextmanager
def atomic_path(target: Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path in the target's folder; rename it onto target on success."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix + ".tmp", dir=target.parent)
    os.close(fd)
    os.unlink(tmp)  # let the writer create it (DuckDB refuses an existing empty file)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_parquet(df: pl.DataFrame, target: Path) -> None:
    with atomic_path(target, ".parquet") as tmp:
        df.write_parquet(tmp)


def read_parquet(path: Path, schema: dict | None = None) -> pl.DataFrame:
    if not Path(path).exists():
        return pl.DataFrame(schema=schema) if schema else pl.DataFrame()
    return pl.read_parquet(path)


def write_json(data: object, target: Path) -> None:
    with atomic_path(target, ".json") as tmp:
        tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True), encoding="utf-8")


def read_json(path: Path, default: object = None) -> object:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default
