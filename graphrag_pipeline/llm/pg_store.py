"""The caches, the usage ledger and the build budget in PostgreSQL, for homes built from many
machines (SQLite in WAL mode is not safe on network file systems, and a home on object storage
has a local working copy per machine).

Which database (:func:`cache_target`): ``GRAPHRAG_CACHE_URL`` (a ``postgresql://`` URL), else the
database of the Dagster instance in use when it stores its runs in Postgres (its ``dagster.yaml``,
``{env: X}`` references resolved as Dagster does), else none: the home's SQLite file.

Tables (created on first write, never by a reader): ``graphrag_kv`` holds every key-value table,
scoped by knowledge base (``GRAPHRAG_KB``) except the LLM answer cache (``llm``), which every
knowledge base shares: an answer is keyed by model, messages and parameters, so the same request
gets the same answer whichever knowledge base asks. ``graphrag_llm_usage`` is the ledger (per
knowledge base), ``graphrag_budget`` and ``graphrag_budget_hold`` the spend and the reservations
of each build or run under GRAPHRAG_MAX_COST_USD.

Connections come from a small per-process pool (psycopg2, as dagster-postgres uses); writes are
``INSERT ... ON CONFLICT``, so concurrent writers never fail on each other. Errors name the host and
database, never the password.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

log = logging.getLogger("graphrag_pipeline.cache")

SHARED_TABLES = frozenset({"llm"})  # tables every knowledge base shares (see the module's docstring)
SHARED_SCOPE = "*"
URL_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg2")
_DDL_LOCK = 0x67726167  # advisory lock key: one process creates the tables at a time


class CacheStoreError(RuntimeError):
    """The cache database cannot be used (unreachable, refused, misconfigured); the message names
    the host and database, never the password."""


@dataclass(frozen=True)
class PgTarget:
    """Where the cache database is: libpq connection parameters, and which setting chose it."""

    params: tuple[tuple[str, str], ...]  # sorted (name, value) pairs for psycopg2.connect
    source: str  # "GRAPHRAG_CACHE_URL" or "the Dagster instance <folder>"
    secrets: tuple[str, ...] = field(default=(), compare=False)  # texts never shown (the password)

    @property
    def kwargs(self) -> dict[str, str]:
        return dict(self.params)

    def describe(self) -> str:
        """``postgresql://user@host:port/db`` (no password), for messages."""
        p = self.kwargs
        user = f"{p['user']}@" if p.get("user") else ""
        port = f":{p['port']}" if p.get("port") else ""
        return f"postgresql://{user}{p.get('host', 'localhost')}{port}/{p.get('dbname', '')}"

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            if secret:
                text = text.replace(secret, "***")
        return text


def target_from_url(url: str, source: str = "GRAPHRAG_CACHE_URL") -> PgTarget:
    """A target from a ``postgresql://user:password@host:port/db?sslmode=...`` URL (also
    ``postgres://`` and SQLAlchemy's ``postgresql+psycopg2://``). ValueError (without the
    password) when it is not one."""
    text = url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{source}: not a valid URL ({exc})") from None
    if parts.scheme not in URL_SCHEMES:
        raise ValueError(f"{source} must be a postgresql://user:password@host:port/database URL")
    params: dict[str, str] = {}
    if parts.hostname:
        params["host"] = parts.hostname
    if port:
        params["port"] = str(port)
    if parts.username:
        params["user"] = unquote(parts.username)
    password = unquote(parts.password) if parts.password else ""
    if password:
        params["password"] = password
    db = unquote(parts.path.lstrip("/"))
    if db:
        params["dbname"] = db
    for item in filter(None, parts.query.split("&")):
        name, _, value = item.partition("=")
        params[unquote(name)] = unquote(value)
    if "dbname" not in params:
        raise ValueError(f"{source} must name a database: postgresql://user:password@host:port/database")
    # a password given as ?password=... is as secret as one in user:password@
    secrets = (password, parts.password or "", params.get("password", ""))
    return PgTarget(tuple(sorted(params.items())), source, tuple(s for s in secrets if s))


# -- which database ---------------------------------------------------------------------------------
def instance_dir(paths, env: Mapping[str, str] | None = None) -> Path:
    """The Dagster instance folder of a build of ``paths``, as `cli.resolve_dagster_home` picks it:
    GRAPHRAG_DAGSTER_HOME, else DAGSTER_HOME, else the home's private instance. (A DAGSTER_HOME the
    CLI set for another home's private instance has the same dagster.yaml, the project's.)"""
    from graphrag_pipeline.settings import raw, setting

    env = os.environ if env is None else env
    if raw("GRAPHRAG_DAGSTER_HOME", env):
        return setting("GRAPHRAG_DAGSTER_HOME", env)
    exported = (env.get("DAGSTER_HOME") or "").strip()
    return Path(exported).expanduser() if exported else paths.dagster_home


def _pg_config_of(yaml_text: str) -> dict | None:
    """The raw postgres storage config of a dagster.yaml (``storage: postgres:`` or a Postgres
    ``run_storage``), None when its runs are not stored in Postgres."""
    import yaml

    data = yaml.safe_load(yaml_text) or {}
    if not isinstance(data, dict):
        return None
    storage = data.get("storage")
    if isinstance(storage, dict) and isinstance(storage.get("postgres"), dict):
        return storage["postgres"]
    runs = data.get("run_storage")
    if isinstance(runs, dict) and "postgres" in str(runs.get("module", "")).lower():
        return runs.get("config") if isinstance(runs.get("config"), dict) else None
    return None


def instance_target(folder: Path) -> PgTarget | None:
    """The Postgres database the Dagster instance in ``folder`` stores its runs in, None when it
    has no dagster.yaml or stores them elsewhere. Env-var references are resolved by Dagster's
    own config processing (from the process's environment, as Dagster does)."""
    yaml_path = Path(folder) / "dagster.yaml"
    try:
        text = yaml_path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    raw_config = _pg_config_of(text)
    if raw_config is None:
        return None
    source = f"the Dagster instance {folder}"
    resolved = _process_pg_config(raw_config, source)
    if resolved.get("postgres_url"):
        target = target_from_url(str(resolved["postgres_url"]), source)
        return PgTarget(target.params, source, target.secrets)
    db = resolved.get("postgres_db") or {}
    if not db:
        raise CacheStoreError(f"{source}: its postgres storage has neither postgres_url nor postgres_db")
    params = {
        "host": str(db.get("hostname") or ""),
        "port": str(db.get("port") or 5432),
        "user": str(db.get("username") or ""),
        "dbname": str(db.get("db_name") or ""),
    }
    password = str(db.get("password") or "")
    if password:
        params["password"] = password
    params.update({str(k): str(v) for k, v in (db.get("params") or {}).items()})
    return PgTarget(tuple(sorted((k, v) for k, v in params.items() if v)), source, (password,))


def _process_pg_config(raw_config: dict, source: str) -> dict:
    from dagster._config import process_config
    from dagster._core.storage.config import pg_config

    result = process_config(pg_config(), raw_config)
    if not result.success:
        reasons = "; ".join(e.message for e in result.errors)
        raise CacheStoreError(f"{source}: its postgres storage config cannot be read: {reasons}")
    return dict(result.value)


def cache_target(paths) -> PgTarget | None:
    """The Postgres database of the caches and the ledger of a home, or None for its SQLite file."""
    from graphrag_pipeline.settings import raw

    url = raw("GRAPHRAG_CACHE_URL")
    if url:
        return target_from_url(url)
    return instance_target(instance_dir(paths))


# -- connections ------------------------------------------------------------------------------------
class _Pool:
    """Idle connections of one process to one database; a connection is taken for one operation."""

    def __init__(self, target: PgTarget, read_only: bool):
        self.target = target
        self.read_only = read_only
        self._idle: list = []
        self._lock = threading.Lock()

    def _connect(self):
        try:
            import psycopg2
        except ImportError:
            raise CacheStoreError(
                f"the cache database {self.target.describe()} (from {self.target.source}) needs psycopg2: "
                "pip install 'graphrag-pipeline[postgres]'"
            ) from None
        try:
            con = psycopg2.connect(connect_timeout=10, application_name="graphrag-pipeline", **self.target.kwargs)
        except psycopg2.Error as exc:
            raise CacheStoreError(
                f"the cache database {self.target.describe()} (from {self.target.source}) cannot be reached: "
                + _reason(self.target, exc)
            ) from None
        if self.read_only:
            con.set_session(readonly=True, autocommit=True)
        return con

    @contextmanager
    def connection(self):
        import psycopg2

        with self._lock:
            con = self._idle.pop() if self._idle else None
        if con is None or con.closed:
            con = self._connect()
        try:
            yield con
        except (psycopg2.OperationalError, psycopg2.InterfaceError):
            con.close()  # a broken connection is not given back, nor those idle beside it (a server restart)
            with self._lock:
                idle, self._idle = self._idle, []
            for other in idle:
                other.close()
            raise
        except BaseException:
            if not con.closed:
                con.rollback()
            raise
        else:
            if not con.autocommit:
                con.commit()
        with self._lock:
            if len(self._idle) < 8:
                self._idle.append(con)
                return
        con.close()


_pools: dict[tuple, _Pool] = {}
_pools_lock = threading.Lock()


def pool(target: PgTarget, read_only: bool = False) -> _Pool:
    """The process's pool for ``target`` (a forked child gets its own: connections are not shared)."""
    key = (os.getpid(), target, read_only)
    with _pools_lock:
        if key not in _pools:
            _pools[key] = _Pool(target, read_only)
        return _pools[key]


def _retrying(pool_: _Pool, work):
    """``work(connection)`` in one transaction, once more on a fresh connection if the first one
    broke (a server restart, an idle connection dropped by a proxy)."""
    import psycopg2

    for attempt in (1, 2):
        try:
            with pool_.connection() as con:
                return work(con)
        except psycopg2.Error as exc:
            broken = isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError))
            if attempt == 2 or not broken:
                raise CacheStoreError(
                    f"the cache database {pool_.target.describe()} failed: {_reason(pool_.target, exc)}"
                ) from None
    raise AssertionError("unreachable")


def _reason(target: PgTarget, exc: BaseException) -> str:
    """The first line of a driver error, without the password."""
    text = str(exc).strip()
    return target.scrub(text.splitlines()[0]) if text else type(exc).__name__


def _exists(con, table: str) -> bool:
    with con.cursor() as cur:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
        return bool(cur.fetchone()[0])


def _create(pool_: _Pool, statements: Iterable[str]) -> None:
    """Create tables once per process and database; concurrent creators wait on an advisory lock
    (CREATE TABLE IF NOT EXISTS alone can fail when two sessions race)."""
    statements = tuple(statements)
    key = (os.getpid(), pool_.target, statements)
    if key in _created:
        return

    def work(con):
        with con.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
            for sql in statements:
                cur.execute(sql)

    _retrying(pool_, work)
    _created.add(key)


_created: set = set()


# -- key-value cache --------------------------------------------------------------------------------
_KV_DDL = (
    "CREATE TABLE IF NOT EXISTS graphrag_kv (scope TEXT NOT NULL, tbl TEXT NOT NULL, key TEXT NOT NULL, "
    "value TEXT NOT NULL, PRIMARY KEY (scope, tbl, key))",
)


def scope_of(table: str, kb: str) -> str:
    return SHARED_SCOPE if table in SHARED_TABLES else kb


class PgKVCache:
    """:class:`graphrag_pipeline.llm.cache.KVCache`'s interface on Postgres. ``read_only``: never
    writes nor creates a table; a missing table finds nothing; the database must be reachable."""

    def __init__(self, target: PgTarget, table: str, kb: str, *, read_only: bool = False):
        if not table.isidentifier():
            raise ValueError(f"invalid table name {table!r}")
        self.target = target
        self.table = table
        self.kb = kb
        self.scope = scope_of(table, kb)
        self.read_only = read_only
        self.path = target.describe()  # what messages name (KVCache names its file)
        self._pool = pool(target, read_only)
        if read_only:
            self._present = _retrying(self._pool, lambda con: _exists(con, "graphrag_kv"))
        else:
            _create(self._pool, _KV_DDL)
            self._present = True

    def _rows(self, sql: str, params) -> list:
        if not self._present:
            self._present = _retrying(self._pool, lambda con: _exists(con, "graphrag_kv"))
            if not self._present:
                return []

        def work(con):
            with con.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall()

        return _retrying(self._pool, work)

    def get(self, key: str) -> object | None:
        rows = self._rows(
            "SELECT value FROM graphrag_kv WHERE scope = %s AND tbl = %s AND key = %s", (self.scope, self.table, key)
        )
        return json.loads(rows[0][0]) if rows else None

    def get_many(self, keys: Iterable[str]) -> dict[str, object]:
        keys = list(dict.fromkeys(keys))
        out: dict[str, object] = {}
        for start in range(0, len(keys), 1000):
            part = keys[start : start + 1000]
            rows = self._rows(
                "SELECT key, value FROM graphrag_kv WHERE scope = %s AND tbl = %s AND key = ANY(%s)",
                (self.scope, self.table, part),
            )
            for k, v in rows:
                out[k] = json.loads(v)
        return out

    def put(self, key: str, value: object) -> None:
        self.put_many({key: value})

    def put_many(self, items: dict[str, object]) -> None:
        if not items or self.read_only:
            return
        from psycopg2.extras import execute_values

        # keys in one order in every writer: two upserts of overlapping keys never deadlock
        rows = [(self.scope, self.table, k, json.dumps(items[k], ensure_ascii=False)) for k in sorted(items)]

        def work(con):
            with con.cursor() as cur:
                execute_values(
                    cur,
                    "INSERT INTO graphrag_kv (scope, tbl, key, value) VALUES %s "
                    "ON CONFLICT (scope, tbl, key) DO UPDATE SET value = EXCLUDED.value",
                    rows,
                    page_size=500,
                )

        _retrying(self._pool, work)

    def __len__(self) -> int:
        rows = self._rows("SELECT count(*) FROM graphrag_kv WHERE scope = %s AND tbl = %s", (self.scope, self.table))
        return int(rows[0][0]) if rows else 0


# -- usage ledger -----------------------------------------------------------------------------------
_USAGE_DDL = (
    "CREATE TABLE IF NOT EXISTS graphrag_llm_usage (kb TEXT NOT NULL, at DOUBLE PRECISION NOT NULL, "
    "step TEXT NOT NULL, calls BIGINT NOT NULL, cache_hits BIGINT NOT NULL, prompt_tokens BIGINT NOT NULL, "
    "completion_tokens BIGINT NOT NULL, cost_usd DOUBLE PRECISION NOT NULL, unpriced_calls BIGINT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS graphrag_llm_usage_kb_at ON graphrag_llm_usage (kb, at)",
)
_SUMS = (
    "coalesce(sum(calls),0), coalesce(sum(cache_hits),0), coalesce(sum(prompt_tokens),0), "
    "coalesce(sum(completion_tokens),0), coalesce(sum(cost_usd),0), coalesce(sum(unpriced_calls),0)"
)


class PgUsageLedger:
    """:class:`graphrag_pipeline.llm.usage.UsageLedger`'s interface on Postgres, one knowledge base's rows."""

    def __init__(self, target: PgTarget, kb: str):
        self.target = target
        self.kb = kb
        self.path = target.describe()
        self._pool = pool(target)
        _create(self._pool, _USAGE_DDL)

    def record(self, step: str, usage) -> None:
        if not (usage.calls or usage.cache_hits):
            return
        row = (self.kb, time.time(), step, *usage.row())

        def work(con):
            with con.cursor() as cur:
                cur.execute(
                    "INSERT INTO graphrag_llm_usage (kb, at, step, calls, cache_hits, prompt_tokens, "
                    "completion_tokens, cost_usd, unpriced_calls) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    row,
                )

        _retrying(self._pool, work)

    def by_step_since(self, since: float) -> dict:
        from graphrag_pipeline.llm.usage import usage_from_row

        def work(con):
            with con.cursor() as cur:
                cur.execute(
                    f"SELECT step, {_SUMS} FROM graphrag_llm_usage WHERE kb = %s AND at >= %s GROUP BY step",
                    (self.kb, since),
                )
                return cur.fetchall()

        return {r[0]: usage_from_row(r[1:]) for r in _retrying(self._pool, work)}

    def totals(self):
        return read_pg_usage_totals(self.target, self.kb)


def read_pg_usage_totals(target: PgTarget, kb: str):
    """A knowledge base's totals, read without writing (no table created: none means zeros)."""
    from graphrag_pipeline.llm.usage import LLMUsage, usage_from_row

    def work(con):
        if not _exists(con, "graphrag_llm_usage"):
            return None
        with con.cursor() as cur:
            cur.execute(f"SELECT {_SUMS} FROM graphrag_llm_usage WHERE kb = %s", (kb,))
            return cur.fetchone()

    row = _retrying(pool(target, read_only=True), work)
    return LLMUsage() if row is None else usage_from_row(row)


# -- budget -----------------------------------------------------------------------------------------
_BUDGET_DDL = (
    "CREATE TABLE IF NOT EXISTS graphrag_budget (kb TEXT NOT NULL, account TEXT NOT NULL, "
    "limit_usd DOUBLE PRECISION, spent_usd DOUBLE PRECISION NOT NULL DEFAULT 0, refused BIGINT NOT NULL DEFAULT 0, "
    "created_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (kb, account))",
    "CREATE TABLE IF NOT EXISTS graphrag_budget_hold (kb TEXT NOT NULL, account TEXT NOT NULL, holder INT NOT NULL, "
    "usd DOUBLE PRECISION NOT NULL, PRIMARY KEY (kb, account, holder))",
)


class PgBudget:
    """The spend and reservations of one account (a build, or a run launched from the UI or the
    daemon) in the database, shared by every process that joins it.

    Each process reserves through one connection of its own and its reservations are held under
    that connection's server process id: a process that dies ends its connection, and the next
    reservation of anyone drops what the dead one held. Each reserve and settle is one
    transaction that locks the account's row (``SELECT ... FOR UPDATE``)."""

    def __init__(self, target: PgTarget, kb: str, account: str, limit_usd: float | None):
        self.target = target
        self.kb = kb
        self.account = account
        self.limit_usd = limit_usd
        self._lock = threading.Lock()
        self._con = None
        _create(pool(target), _BUDGET_DDL)
        self._transact(lambda cur, spent: None)  # the account's row exists from here on

    def _connection(self):
        if self._con is None or self._con.closed or self._pid != os.getpid():
            self._con = pool(self.target)._connect()
            self._pid = os.getpid()
        return self._con

    def _transact(self, work):
        """``work(cursor, spent)`` with the account's row locked, in one transaction; retried once on a new
        connection when the connection broke (this process's holds are then dropped as a dead
        holder's: the calls in flight settle against nothing)."""
        import psycopg2

        with self._lock:
            for attempt in (1, 2):
                con = self._connection()
                try:
                    with con.cursor() as cur:
                        cur.execute(
                            "INSERT INTO graphrag_budget (kb, account, limit_usd) VALUES (%s, %s, %s) "
                            "ON CONFLICT (kb, account) DO NOTHING",
                            (self.kb, self.account, self.limit_usd),
                        )
                        cur.execute(
                            "SELECT spent_usd FROM graphrag_budget WHERE kb = %s AND account = %s FOR UPDATE",
                            (self.kb, self.account),
                        )
                        spent = float(cur.fetchone()[0])
                        out = work(cur, spent)
                    con.commit()
                    return out
                except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
                    con.close()
                    if attempt == 2:
                        raise CacheStoreError(
                            f"the budget in the cache database {self.target.describe()} failed: "
                            + _reason(self.target, exc)
                        ) from None
                except BaseException:
                    if not con.closed:
                        con.rollback()
                    raise
        raise AssertionError("unreachable")

    def _held(self, cur) -> float:
        """What the live holders of the account hold (the holds of ended connections are dropped)."""
        cur.execute(
            "DELETE FROM graphrag_budget_hold h WHERE kb = %s AND account = %s AND NOT EXISTS "
            "(SELECT 1 FROM pg_stat_activity a WHERE a.pid = h.holder)",
            (self.kb, self.account),
        )
        cur.execute(
            "SELECT coalesce(sum(usd), 0) FROM graphrag_budget_hold WHERE kb = %s AND account = %s",
            (self.kb, self.account),
        )
        return float(cur.fetchone()[0])

    def try_reserve(self, usd: float) -> tuple[str, float, float]:
        """One attempt: ``("held" | "refused" | "wait", spent, reserved)`` with the budget's rules."""
        limit = self.limit_usd

        def work(cur, spent):
            reserved = self._held(cur)
            if limit is not None and spent + usd > limit + 1e-12:
                cur.execute(
                    "UPDATE graphrag_budget SET refused = refused + 1 WHERE kb = %s AND account = %s",
                    (self.kb, self.account),
                )
                return "refused", spent, reserved
            if limit is None or reserved == 0 or spent + reserved + usd <= limit + 1e-12:
                cur.execute(
                    "INSERT INTO graphrag_budget_hold (kb, account, holder, usd) VALUES (%s, %s, pg_backend_pid(), %s) "
                    "ON CONFLICT (kb, account, holder) DO UPDATE SET usd = graphrag_budget_hold.usd + EXCLUDED.usd",
                    (self.kb, self.account, usd),
                )
                return "held", spent, reserved
            return "wait", spent, reserved

        return self._transact(work)

    def settle(self, reserved_usd: float, actual_usd: float) -> None:
        def work(cur, spent):  # noqa: ARG001 - the row is locked; its spend is not needed
            cur.execute(
                "UPDATE graphrag_budget_hold SET usd = greatest(0, usd - %s) "
                "WHERE kb = %s AND account = %s AND holder = pg_backend_pid()",
                (reserved_usd, self.kb, self.account),
            )
            cur.execute(
                "UPDATE graphrag_budget SET spent_usd = spent_usd + %s WHERE kb = %s AND account = %s",
                (actual_usd, self.kb, self.account),
            )

        self._transact(work)

    def state(self) -> tuple[float, float, int]:
        """(spent, reserved by live holders, refused) now."""

        def work(cur, spent):
            reserved = self._held(cur)
            cur.execute("SELECT refused FROM graphrag_budget WHERE kb = %s AND account = %s", (self.kb, self.account))
            return spent, reserved, int(cur.fetchone()[0])

        return self._transact(work)

    def close(self) -> None:
        with self._lock:
            if self._con is not None and not self._con.closed:
                self._con.close()
