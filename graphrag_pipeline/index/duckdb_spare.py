"""The spare: the index file a delta publish replaced, kept to be patched by the next one.

A delta publish patches a copy of the published file (version N) and renames it over the
published name. Copying is the one step of a one-document update that grows with the whole
index: 1.1 GB read, written and flushed at 50,000 documents. So the file it replaces is kept
under a second name (`.search_index.duckdb.spare`, a hard link made before the rename) and the
next delta publish takes it instead of a copy: it holds version N-1, and version N's `changes`
table names every key that differs between the two (the same record an Elasticsearch follower
applies). The spare is caught up by deleting those keys and inserting their rows of version N,
then patched like a copy.

A spare is only taken when nothing can go wrong:

- version N was a delta publish whose `previous_index_id` is the spare's `index_id` (a full
  rebuild, a crash between the link and the rename, a file from elsewhere: not taken);
- no reader has it open: every DuckDB reader holds a read lock on its file, and the spare is
  tested with an open-file-description write lock, which conflicts with a read lock of any
  process, this one included (Linux; elsewhere there is no spare);
- once caught up, each of its tables holds the same number of rows and the same sum of row
  hashes as version N's; otherwise it is dropped and the publish copies the file as before.

The spare is not part of the published home: it is never pushed to object storage, and a full
rebuild removes it. It costs a second index file of disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

import duckdb

from graphrag_pipeline.index.duckdb_reader import ofd_lock
from graphrag_pipeline.storage.files import free_later, temp_name

SPARE_SUFFIX = ".spare"


def spare_path(target: Path) -> Path:
    return Path(target).with_name(f".{Path(target).name}{SPARE_SUFFIX}")


def is_spare_name(name: str) -> bool:
    return name.startswith(".") and name.endswith(SPARE_SUFFIX)


def _unused(path: Path) -> bool:
    """Whether no process (this one included) holds a lock on the file at `path` (False where
    there are no open-file-description locks: then no file is ever patched in place)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        return ofd_lock(fd, fcntl.F_WRLCK) is True
    finally:
        os.close(fd)  # releases the lock


def usable_spare(target: Path, published_meta: dict, read_meta) -> Path | None:
    """The spare of the index at `target` when it holds the version `published_meta` was patched
    from and no reader has it open; else None."""
    spare = spare_path(target)
    try:
        if os.stat(spare).st_ino == os.stat(target).st_ino:
            return None  # a publish that died between keeping the spare and renaming its file
    except OSError:
        return None
    if published_meta.get("build_mode") != "delta" or not published_meta.get("previous_index_id"):
        return None
    if not _unused(spare):
        return None
    meta = read_meta(spare)
    if not meta or meta.get("index_id") != published_meta["previous_index_id"]:
        return None
    if meta.get("schema_version") != published_meta.get("schema_version"):
        return None
    return spare


def take_spare(spare: Path, dest: Path, target: Path, holds_id: str, catch_up, say):
    """Move the spare to `dest` and catch it up to the published version (`catch_up`:
    duckdb_writer.CatchUp): a connection to it, in
    a transaction the patch goes on in (one checkpoint for both: closing after the catch-up alone
    cost 1 s at 50k). None (and nothing at `dest`) when it vanished, is the published file itself,
    is held by a reader, is not the version `holds_id`, cannot be opened for writing, or does not
    come out equal. It was looked at when the publish began; what it is is checked again here, once
    it has a name no reader and no other publish opens."""
    try:
        os.replace(spare, dest)
    except OSError:
        return None  # another publish took it
    try:
        same = os.stat(dest).st_ino == os.stat(target).st_ino
    except OSError:
        same = True
    if same or not _unused(dest):
        Path(dest).unlink(missing_ok=True)  # a second name of the published file, or of a file being read
        return None
    try:
        con = duckdb.connect(str(dest))
    except duckdb.Error as exc:
        say(f"the spare index file cannot be opened ({type(exc).__name__}); copying the published one")
        Path(dest).unlink(missing_ok=True)
        return None
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'index_id'").fetchall()
        equal = False  # another version
        if row and json.loads(row[0][0]) == holds_id:
            con.execute("BEGIN TRANSACTION")
            catch_up.apply(con)
            equal = catch_up.matches(con)
    except duckdb.Error:
        equal = False
    except BaseException:
        con.close()
        Path(dest).unlink(missing_ok=True)
        raise
    if equal:
        return con
    with contextlib.suppress(duckdb.Error):
        con.execute("ROLLBACK")
    con.close()
    say("the spare index file did not come out equal to the published one; copying the published one")
    Path(dest).unlink(missing_ok=True)
    Path(f"{dest}.wal").unlink(missing_ok=True)
    return None


def keep_as_spare(target: Path) -> None:
    """Before `target` is replaced: keep its file as the spare (a second name for it). The spare it
    replaces, if any, is freed in the background."""
    spare = spare_path(target)
    link = temp_name(spare, ".link")
    try:
        os.link(target, link)
    except OSError:
        link = None  # no hard links here: no spare
    try:
        drop_spare(target)
        if link is not None:
            os.replace(link, spare)
    finally:
        if link is not None and os.path.exists(link):
            os.unlink(link)


def drop_spare(target: Path) -> None:
    """Remove the spare of `target` (a full rebuild: it can no longer be caught up)."""
    spare = spare_path(target)
    old = temp_name(spare, ".old")
    try:
        os.rename(spare, old)
    except FileNotFoundError:
        return
    free_later(old)
