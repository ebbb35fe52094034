"""A throwaway PostgreSQL server for the tests: Debian's PostgreSQL binaries (initdb + pg_ctl) on a
free port in a temporary folder, stopped and removed at the end of the session.

PostgreSQL refuses to run as root; as root (CI containers) the server runs as the unprivileged
user `postgres` that Debian's package creates (else `graphrag-pg`, created here like
scripts/es.sh creates its user). `GRAPHRAG_TEST_PG_BIN` names another bin folder."""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

USER = "graphrag"  # the database superuser initdb creates


@dataclass
class PgServer:
    host: str
    port: int
    user: str
    password: str

    def create_database(self, name: str) -> str:
        import psycopg2

        conn = psycopg2.connect(
            host=self.host, port=self.port, user=self.user, password=self.password, dbname="postgres"
        )
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        conn.close()
        return name

    def env(self, db: str) -> dict[str, str]:
        """The variables examples/dagster-postgres.yaml reads."""
        return {
            "DAGSTER_PG_USERNAME": self.user,
            "DAGSTER_PG_PASSWORD": self.password,
            "DAGSTER_PG_HOST": self.host,
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_DB": db,
        }


def _bin_dir() -> Path:
    given = os.environ.get("GRAPHRAG_TEST_PG_BIN")
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    candidates = [given] if given else found
    for c in reversed(candidates):
        if c and (Path(c) / "initdb").exists():
            return Path(c)
    raise RuntimeError(
        "no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin: install Debian's "
        "postgresql package, or set GRAPHRAG_TEST_PG_BIN"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_user() -> str | None:
    """None: run as the current user; else the unprivileged user to run the server as (we are root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "graphrag-pg"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "graphrag-pg"], check=True
    )
    return "graphrag-pg"


def _run(cmd: list[str], user: str | None) -> None:
    if user:
        cmd = ["runuser", "-u", user, "--", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


@pytest.fixture(scope="session")
def pg_server():
    bin_dir = _bin_dir()
    user = _server_user()
    root = Path(tempfile.mkdtemp(prefix="graphrag-pg-"))
    data, sockets, pwfile = root / "data", root / "sockets", root / "pwfile"
    sockets.mkdir()
    password = secrets.token_hex(12)
    pwfile.write_text(password + "\n")
    if user:
        entry = pwd.getpwnam(user)
        for p in (root, sockets, pwfile):
            os.chown(p, entry.pw_uid, entry.pw_gid)
    port = _free_port()
    _run(
        [
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            USER,
            "--auth=scram-sha-256",
            f"--pwfile={pwfile}",
            "-E",
            "UTF8",
            "--no-sync",
        ],
        user,
    )
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"], user)
    try:
        yield PgServer("127.0.0.1", port, USER, password)
    finally:
        try:
            _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], user)
        finally:
            shutil.rmtree(root, ignore_errors=True)
