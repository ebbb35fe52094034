"""A persistent key-value cache in SQLite, safe when several processes read and write at once.

WAL journaling lets readers proceed while one process writes; writers wait on a busy timeout
instead of failing. Values are JSON.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Iterable

_SCHEMA = "CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY, value TEXT NOT NULL)"


class KVCache:
    def __init__(self, path: Path, table: str = "cache", timeout_s: float = 120.0):
        if not table.isidentifier():
            raise ValueError(f"invalid table name {table!r}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.table = table
        self.timeout_s = timeout_s
        self._local = threading.local()
        con = self._con()
        con.execute(_SCHEMA.format(table=table))
        con.commit()

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
            # PRAGMA journal_mode can fail with "database is locked" at once, without waiting on the
            # busy timeout, while other processes open or use the same database; retry until the
            # timeout instead.
            deadline = time.monotonic() + self.timeout_s
            while True:
                try:
                    con.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or time.monotonic() > deadline:
                        con.close()
                        raise
                    time.sleep(0.01)
            con.execute("PRAGMA synchronous=NORMAL")
            con.execute(f"PRAGMA busy_timeout={int(self.timeout_s * 1000)}")
            self._local.con = con
        return con

    def get(self, key: str) -> object | None:
        row = self._con().execute(f"SELECT value FROM {self.table} WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def get_many(self, keys: Iterable[str]) -> dict[str, object]:
        keys = list(dict.fromkeys(keys))
        out: dict[str, object] = {}
        con = self._con()
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            marks = ",".join("?" * len(part))
            for k, v in con.execute(f"SELECT key, value FROM {self.table} WHERE key IN ({marks})", part):
                out[k] = json.loads(v)
        return out

    def put(self, key: str, value: object) -> None:
        self.put_many({key: value})

    def put_many(self, items: dict[str, object]) -> None:
        if not items:
            return
        con = self._con()
        con.execute("BEGIN IMMEDIATE")
        try:
            con.executemany(
                f"INSERT OR REPLACE INTO {self.table} (key, value) VALUES (?, ?)",
                [(k, json.dumps(v, ensure_ascii=False)) for k, v in items.items()],
            )
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def __len__(self) -> int:
        return self._con().execute(f"SELECT count(*) FROM {self.table}").fetchone()[0]
