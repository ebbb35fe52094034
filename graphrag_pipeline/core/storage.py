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


class ParquetBundle:
    """Tables published together: each table is a Parquet file whose name carries the generation it
    was written in, and a manifest (written last, atomically) names the current file of every
    table. A reader following the manifest never mixes two generations; a crash before the
    manifest leaves the previous generation in force; files no manifest names are removed.
    Tables not rewritten in a generation keep their file, so an update costs only what changed.
    """

    def __init__(self, folder: Path, name: str):
        self.folder = Path(folder)
        self.name = name
        self.manifest_path = self.folder / f"{name}.manifest.json"

    def manifest(self) -> dict | None:
        try:
            data = read_json(self.manifest_path)
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("tables"), dict):
            return None
        if not all((self.folder / f).exists() for f in data["tables"].values()):
            return None
        return data

    def read(self, manifest: dict, table: str) -> pl.DataFrame:
        return pl.read_parquet(self.folder / manifest["tables"][table])

    def write(self, tables: dict[str, pl.DataFrame], *, previous: dict | None = None, drop: set[str] = frozenset(),
              **extra) -> dict:
        """Write `tables`, keep the other tables of `previous` (except those in `drop`), publish."""
        generation = int((previous or {}).get("generation", 0)) + 1
        files = {k: v for k, v in ((previous or {}).get("tables") or {}).items() if k not in drop and k not in tables}
        for table, df in tables.items():
            file = f"{self.name}.{table}.g{generation}.parquet"
            write_parquet(df, self.folder / file)
            files[table] = file
        manifest = {"generation": generation, "tables": files, **extra}
        write_json(manifest, self.manifest_path)
        live = set(files.values())
        for f in self.folder.glob(f"{self.name}.*.g*.parquet"):
            if f.name not in live:
                f.unlink(missing_ok=True)
        return manifest
