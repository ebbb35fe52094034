"""Corpora the project did not write, fetched by the benchmarks themselves through ordinary package
clients and cached (nothing is vendored into the repository):

- ``linux_doc``: the Debian package ``linux-doc-6.1`` (``apt-get download``, unpacked with
  ``dpkg-deb -x``); its reStructuredText sources under ``usr/share/doc/linux-doc-6.1/html/_sources/``
  (about 3,200 ``*.txt`` files in sub-folders, 23 MB) are the ``real`` benchmark's corpus.
- ``db_docs``: the HTML manuals of three other Debian packages, ``postgresql-doc-15``,
  ``sqlite3-doc`` and ``git-doc`` (about 2,200 ``*.html`` files, 40 MB of HTML), fetched the same
  way: the ``real --corpus db-docs`` benchmark's corpus, a second real one of another kind (HTML,
  databases and version control, three projects' writers).
- ``alice``: "Alice's Adventures in Wonderland" (``alice29.txt`` of the Canterbury corpus, shipped
  in ``tests/testdata/`` of the PyPI source distribution of ``brotli``), split into five files of
  consecutive whole chapters for ``nano --novel``.

    python benchmarks/external.py linux-doc --cache DIR
    python benchmarks/external.py db-docs --cache DIR
    python benchmarks/external.py alice --cache DIR --out DIR
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

LINUX_DOC_PACKAGE = "linux-doc-6.1"
LINUX_DOC_SOURCES = "usr/share/doc/linux-doc-6.1/html/_sources"


def _log(msg: str) -> None:
    print(f"[external] {msg}", file=sys.stderr, flush=True)


def sha256(path: Path) -> str:
    from graphrag_pipeline.storage.files import file_sha256

    return file_sha256(path)


# -- Debian packages ---------------------------------------------------------------------------
def debian_package(cache: Path, package: str, folder: str) -> dict:
    """The unpacked package under ``cache/<package>`` (downloaded and unpacked once).

    Returns ``{"package", "version", "deb", "deb_sha256", "sources"}``; ``sources`` is ``folder``
    of the unpacked package."""
    root = cache / package
    marker = root / "package.json"
    if marker.exists():
        info = json.loads(marker.read_text())
        info["sources"] = str(root / "root" / folder)
        if Path(info["sources"]).is_dir():
            return info
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        raise SystemExit("the real corpora need apt-get and dpkg-deb (a Debian/Ubuntu machine)")
    if root.exists():
        shutil.rmtree(root)
    dl = root / "deb"
    dl.mkdir(parents=True)
    os.chmod(dl, 0o777)  # apt drops to the _apt user for downloads when it can write the folder
    _log(f"apt-get download {package} into {dl}")
    cmd = ["apt-get", "download", package]
    res = subprocess.run(cmd, cwd=dl, capture_output=True, text=True)
    if res.returncode != 0 and hasattr(os, "geteuid") and os.geteuid() == 0:
        _log(f"download failed ({res.stderr.strip()[-300:]}); running apt-get update and retrying")
        subprocess.run(["apt-get", "update"], check=False, capture_output=True, text=True)
        res = subprocess.run(cmd, cwd=dl, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"apt-get download {package} failed:\n{res.stdout[-1000:]}\n{res.stderr[-1000:]}")
    debs = sorted(dl.glob("*.deb"))
    if len(debs) != 1:
        raise SystemExit(f"expected one .deb in {dl}, found {[d.name for d in debs]}")
    deb = debs[0]
    version = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    unpacked = root / "root"
    _log(f"dpkg-deb -x {deb.name} {unpacked}")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
    info = {
        "package": package,
        "version": version,
        "deb": deb.name,
        "deb_sha256": sha256(deb),
        "source": "Debian package via apt-get download, unpacked with dpkg-deb -x",
    }
    marker.write_text(json.dumps(info, indent=1))
    info["sources"] = str(unpacked / folder)
    return info


def linux_doc(cache: Path) -> dict:
    """linux-doc-6.1 (debian_package); ``sources`` is its ``_sources`` folder."""
    return debian_package(cache, LINUX_DOC_PACKAGE, LINUX_DOC_SOURCES)


def tree_files(sources: Path, limit: int | None = None, pattern: str = "*.txt") -> list[str]:
    """Relative paths (posix) of every file matching ``pattern`` under ``sources``, sorted; the
    first ``limit``."""
    rels = sorted(p.relative_to(sources).as_posix() for p in sources.rglob(pattern) if p.is_file())
    return rels[:limit] if limit else rels


# -- postgresql-doc-15 + sqlite3-doc + git-doc: HTML manuals ------------------------------------
DB_DOCS = (
    ("postgresql-doc-15", "usr/share/doc/postgresql-doc-15/html"),
    ("sqlite3-doc", "usr/share/doc/sqlite3"),
    ("git-doc", "usr/share/doc/git-doc"),
)


def db_docs(cache: Path) -> dict:
    """The ``*.html`` files of the DB_DOCS packages gathered under ``cache/db-docs/tree/<package>/``
    (each package fetched once by debian_package). Returns ``{"package", "version", "packages",
    "sources"}``; ``sources`` is the tree."""
    packages = [debian_package(cache, name, folder) for name, folder in DB_DOCS]
    tree = cache / "db-docs" / "tree"
    marker = tree.parent / "packages.json"
    wanted = [
        {**{k: v for k, v in p.items() if k != "sources"}, "folder": folder}
        for p, (_, folder) in zip(packages, DB_DOCS)
    ]
    if not (marker.exists() and json.loads(marker.read_text()) == wanted and tree.is_dir()):
        if tree.exists():
            shutil.rmtree(tree)
        for p in packages:
            src = Path(p["sources"])
            copy_tree_files(src, tree_files(src, pattern="*.html"), tree / p["package"])
        marker.write_text(json.dumps(wanted, indent=1))
    return {
        "package": " + ".join(p["package"] for p in packages),
        "version": " + ".join(p["version"] for p in packages),
        "packages": wanted,
        "sources": str(tree),
    }


def copy_tree_files(sources: Path, rels: list[str], dest: Path) -> int:
    """Copy ``rels`` (relative paths) from ``sources`` to ``dest``, keeping sub-folders. Returns bytes."""
    if dest.exists():
        shutil.rmtree(dest)
    total = 0
    for rel in rels:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sources / rel, target)
        total += target.stat().st_size
    return total


# -- alice29.txt from the brotli sdist --------------------------------------------------------
ALICE_MEMBER = "tests/testdata/alice29.txt"
_CHAPTER = re.compile(r"^\s*CHAPTER ([IVXLC]+)\s*$", re.M)


def alice_text(cache: Path) -> dict:
    """``alice29.txt`` from brotli's source distribution (``pip download --no-binary :all: --no-deps
    brotli`` into ``cache/brotli``, once). Returns ``{"text", "sdist", "brotli_version", "sha256"}``."""
    root = cache / "brotli"
    root.mkdir(parents=True, exist_ok=True)
    sdists = sorted(root.glob("[Bb]rotli-*.tar.gz"))
    if not sdists:
        _log(f"pip download --no-binary :all: --no-deps brotli into {root}")
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-binary",
                ":all:",
                "--no-deps",
                "--disable-pip-version-check",
                "brotli",
                "-d",
                str(root),
            ],
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            raise SystemExit(f"pip download brotli failed:\n{res.stdout[-1000:]}\n{res.stderr[-1000:]}")
        sdists = sorted(root.glob("[Bb]rotli-*.tar.gz"))
        if not sdists:
            raise SystemExit(f"pip download brotli left no source distribution in {root}")
    sdist = sdists[-1]
    version = re.sub(r"^[Bb]rotli-|\.tar\.gz$", "", sdist.name)
    with tarfile.open(sdist, "r:gz") as tar:
        member = next((m for m in tar.getmembers() if m.name.endswith("/" + ALICE_MEMBER)), None)
        if member is None:
            raise SystemExit(f"{sdist.name} has no {ALICE_MEMBER}")
        raw = tar.extractfile(member).read()
    return {
        "text": raw.decode("latin-1"),
        "sdist": sdist.name,
        "brotli_version": version,
        "sha256": hashlib.sha256(raw).hexdigest(),
        "member": member.name,
    }


def split_chapters(text: str) -> list[tuple[str, str]]:
    """``[(roman numeral, chapter text)]``: everything before CHAPTER I (title block) and the
    closing "THE END" line (and the DOS end-of-file mark after it) are dropped; line endings become
    ``\\n``; trailing spaces are removed."""
    text = text.replace("\x1a", "")
    text = "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    marks = list(_CHAPTER.finditer(text))
    if not marks:
        raise ValueError("no 'CHAPTER I' heading found")
    chapters = []
    for m, nxt in zip(marks, marks[1:] + [None]):
        body = text[m.start() : nxt.start() if nxt else len(text)]
        if nxt is None:
            body = re.sub(r"\n\s*THE END\s*$", "\n", body.rstrip() + "\n")
        chapters.append((m.group(1), body.strip("\n") + "\n"))
    return chapters


def balanced_split(sizes: list[int], parts: int) -> list[int]:
    """Cut points (indices where a part starts, after the first) splitting ``sizes`` into ``parts``
    consecutive groups whose totals are as equal as possible (least squared deviation)."""
    n = len(sizes)
    if parts >= n:
        return list(range(1, n))
    target = sum(sizes) / parts
    best, best_cost = None, float("inf")
    for cuts in itertools.combinations(range(1, n), parts - 1):
        bounds = (0, *cuts, n)
        cost = sum((sum(sizes[a:b]) - target) ** 2 for a, b in zip(bounds, bounds[1:]))
        if cost < best_cost:
            best, best_cost = list(cuts), cost
    return best


def write_novel(cache: Path, out: Path, parts: int = 5) -> tuple[list[Path], dict]:
    """Five files of consecutive whole chapters of roughly equal size into ``out`` (recreated)."""
    src = alice_text(cache)
    chapters = split_chapters(src["text"])
    cuts = balanced_split([len(c[1]) for c in chapters], parts)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    files, layout = [], []
    bounds = [0, *cuts, len(chapters)]
    for i, (a, b) in enumerate(zip(bounds, bounds[1:]), 1):
        group = chapters[a:b]
        name = f"alice_{i}_chapters_{group[0][0]}-{group[-1][0]}.txt"
        body = "\n\n".join(c[1].rstrip("\n") for c in group) + "\n"
        path = out / name
        path.write_text(body, encoding="utf-8")
        files.append(path)
        layout.append({"file": name, "chapters": f"{group[0][0]}-{group[-1][0]}", "bytes": len(body.encode())})
    info = {k: v for k, v in src.items() if k != "text"}
    info["files"] = layout
    return files, info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("linux-doc")
    a.add_argument("--cache", type=Path, required=True)
    a.add_argument("--limit", type=int)
    d = sub.add_parser("db-docs")
    d.add_argument("--cache", type=Path, required=True)
    b = sub.add_parser("alice")
    b.add_argument("--cache", type=Path, required=True)
    b.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.cmd == "linux-doc":
        info = linux_doc(args.cache)
        info["files"] = len(tree_files(Path(info["sources"]), args.limit))
        print(json.dumps(info, indent=1))
    elif args.cmd == "db-docs":
        info = db_docs(args.cache)
        info["files"] = len(tree_files(Path(info["sources"]), pattern="*.html"))
        print(json.dumps(info, indent=1))
    else:
        _, info = write_novel(args.cache, args.out)
        print(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
