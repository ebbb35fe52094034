"""A GRAPHRAG_HOME on object storage: pull/push of the working copy against an S3-compatible server
(moto, started by the suite), and whole builds on s3:// that give what a local build gives."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from graphrag_pipeline.defs.resources import PipelineSettings
from graphrag_pipeline.storage.remote import RemoteHome, RemoteHomeError, is_remote, is_synced, normalize_url
from graphrag_pipeline_tests.conftest import cli
from graphrag_pipeline_tests.s3_server import FAKE_SECRET


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


# -- the URL and what is synced ------------------------------------------------------------------
def test_remote_urls_are_told_from_folders():
    assert is_remote("s3://bucket/kb") and is_remote("S3://bucket")
    assert not is_remote("/srv/home") and not is_remote("relative/home") and not is_remote(Path("/x"))
    assert not is_remote("file:///srv/home") and not is_remote("C:/home")
    assert normalize_url("s3://bucket/kb/") == "s3://bucket/kb"
    with pytest.raises(ValueError, match="only s3://"):
        normalize_url("gs://bucket/kb")
    with pytest.raises(ValueError, match="no credentials"):
        normalize_url("s3://key:secret@bucket/kb")


def test_settings_keep_the_url_and_derive_the_scratch_and_alias_from_it():
    from graphrag_pipeline.settings import es_index_for, setting
    from graphrag_pipeline.settings_check import check_settings

    env = {"GRAPHRAG_HOME": "s3://bucket/kb/", "GRAPHRAG_KB": "legal"}
    assert setting("GRAPHRAG_HOME", env) == "s3://bucket/kb"
    scratch = setting("GRAPHRAG_SCRATCH", env)
    assert isinstance(scratch, Path) and scratch.name.startswith("legal-") and ".cache" in scratch.parts
    assert setting("GRAPHRAG_SCRATCH", {**env, "GRAPHRAG_SCRATCH": "ephemeral"}) == "ephemeral"
    assert setting("GRAPHRAG_SCRATCH", {"GRAPHRAG_HOME": "/srv/home"}) is None  # a local home has none
    assert check_settings(env) == []
    assert check_settings({**env, "GRAPHRAG_SCRATCH": "ephemeral"}) == []
    assert any(p.startswith("GRAPHRAG_HOME=") for p in check_settings({"GRAPHRAG_HOME": "gs://b/kb"}))
    # the default Elasticsearch alias of a remote home is the same on every machine (its URL, not the scratch)
    assert es_index_for("s3://bucket/kb") == es_index_for(setting("GRAPHRAG_HOME", env))


def test_machine_local_files_are_never_synced():
    assert is_synced("tables/chunks/a.txt.parquet") and is_synced("state/home.json")
    for rel in (
        "dagster/runs.db",
        "state/build.lock",
        "cache/cache.sqlite",
        "cache/cache.sqlite-wal",
        ".sync/record.sqlite",
        "tables/chunks/.a.txt.parquet.k2j4h5g6.tmp",
        "index/.search_index.duckdb.spare",  # the file the last delta publish replaced (duckdb_spare)
    ):
        assert not is_synced(rel), rel


# -- pull and push -------------------------------------------------------------------------------
@pytest.fixture
def bucket_url(s3_env):
    server, bucket = s3_env
    return server, bucket, f"s3://{bucket}/kb"


def test_push_then_pull_on_another_machine_and_deletions_propagate(bucket_url, tmp_path):
    server, bucket, url = bucket_url
    a = RemoteHome(url, tmp_path / "a")
    a.pull()
    _write(a.scratch / "tables/chunks/x.parquet", b"x1")
    _write(a.scratch / "tables/chunks/x.json", b"{}")
    _write(a.scratch / "dagster/runs.db", b"instance")
    _write(a.scratch / "cache/cache.sqlite", b"cache")
    _write(a.scratch / "state/build.lock", b"lock")
    report = a.push()
    assert sorted(report.uploaded) == ["tables/chunks/x.json", "tables/chunks/x.parquet"]
    assert report.uploaded.index("tables/chunks/x.parquet") < report.uploaded.index("tables/chunks/x.json")
    assert set(server.objects(bucket)) == {"kb/tables/chunks/x.parquet", "kb/tables/chunks/x.json"}
    assert a.push().uploaded == []  # nothing changed since

    b = RemoteHome(url, tmp_path / "b")
    _write(b.scratch / "tables/own.parquet", b"made here, never pushed")
    assert sorted(b.pull().downloaded) == ["tables/chunks/x.json", "tables/chunks/x.parquet"]
    assert (b.scratch / "tables/chunks/x.parquet").read_bytes() == b"x1"
    assert b.pull().downloaded == []  # the ETags are those the record holds: nothing to download

    # a deletes x and changes nothing else; b's next pull removes its copy, keeps its own file
    (a.scratch / "tables/chunks/x.parquet").unlink()
    assert a.push().deleted == ["tables/chunks/x.parquet"]
    assert set(server.objects(bucket)) == {"kb/tables/chunks/x.json"}
    assert b.pull().deleted == ["tables/chunks/x.parquet"]
    assert not (b.scratch / "tables/chunks/x.parquet").exists()
    assert (b.scratch / "tables/own.parquet").exists()
    # a file deleted here but never seen by this process (another process's) is not deleted remotely
    c = RemoteHome(url, tmp_path / "b")  # a second process on b's scratch, without a pull
    (c.scratch / "tables/chunks/x.json").unlink()
    assert c.push().deleted == []
    assert "kb/tables/chunks/x.json" in server.objects(bucket)


def test_a_change_elsewhere_is_downloaded_by_its_etag(bucket_url, tmp_path):
    server, bucket, url = bucket_url
    a, b = RemoteHome(url, tmp_path / "a"), RemoteHome(url, tmp_path / "b")
    _write(a.scratch / "graph/g.parquet", b"v1")
    a.pull()
    a.push()
    b.pull()
    _write(a.scratch / "graph/g.parquet", b"v2 longer")
    assert a.push().uploaded == ["graph/g.parquet"]
    assert b.pull().downloaded == ["graph/g.parquet"]
    assert (b.scratch / "graph/g.parquet").read_bytes() == b"v2 longer"
    # a local file changed and not pushed stays as it is while the remote object is unchanged
    _write(b.scratch / "graph/g.parquet", b"local edit")
    assert b.pull().downloaded == []
    assert (b.scratch / "graph/g.parquet").read_bytes() == b"local edit"


def test_concurrent_pushes_of_different_files_from_one_scratch_and_from_two(bucket_url, tmp_path):
    server, bucket, url = bucket_url
    shared = tmp_path / "shared"
    homes = [RemoteHome(url, shared) for _ in range(3)] + [RemoteHome(url, tmp_path / "other")]
    for h in homes:
        h.pull()
    errors = []

    def work(i: int, h: RemoteHome) -> None:
        try:
            for j in range(5):
                _write(h.scratch / f"tables/doc/{i}-{j}.parquet", f"{i}-{j}".encode())
            h.push()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i, h)) for i, h in enumerate(homes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    objects = server.objects(bucket)
    assert {k for k in objects} == {f"kb/tables/doc/{i}-{j}.parquet" for i in range(4) for j in range(5)}
    assert all(v == k.rsplit("/", 1)[1].removesuffix(".parquet").encode() for k, v in objects.items())
    fresh = RemoteHome(url, tmp_path / "fresh")
    assert len(fresh.pull().downloaded) == 20


def test_a_pull_racing_a_push_lists_again_instead_of_keeping_a_manifest_without_its_tables(bucket_url, tmp_path):
    server, bucket, url = bucket_url
    a = RemoteHome(url, tmp_path / "a")
    a.pull()
    _write(a.scratch / "graph/g.t.g2.parquet", b"g2")
    _write(a.scratch / "graph/g.manifest.json", b'{"tables": {"t": "g.t.g2.parquet"}}')
    a.push()

    class Racing(RemoteHome):
        """Its first listing still shows the generation a push elsewhere has just deleted."""

        listings = 0

        def list_remote(self):
            found = super().list_remote()
            Racing.listings += 1
            if Racing.listings == 1:
                found["graph/g.t.g1.parquet"] = {"etag": '"old"', "size": 2}
            return found

    b = Racing(url, tmp_path / "b")
    assert sorted(b.pull().downloaded) == ["graph/g.manifest.json", "graph/g.t.g2.parquet"]
    assert Racing.listings == 2 and not (b.scratch / "graph/g.t.g1.parquet").exists()


def test_a_missing_bucket_and_a_dead_endpoint_are_one_clear_line(s3_env, tmp_path, monkeypatch):
    with pytest.raises(RemoteHomeError) as info:
        RemoteHome("s3://no-such-bucket-here/kb", tmp_path / "s").pull()
    message = str(info.value)
    assert "s3://no-such-bucket-here/kb" in message and "does not exist" in message and FAKE_SECRET not in message
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(RemoteHomeError) as info:
        RemoteHome("s3://bucket/kb", tmp_path / "s").pull()
    assert "check the endpoint" in str(info.value) and FAKE_SECRET not in str(info.value)


# -- whole builds on s3:// -----------------------------------------------------------------------
QUESTIONS = (("Who sailed with Charles Darwin on HMS Beagle?", "local"), ("What are the main themes?", "global"))


def _results() -> dict:
    """stats and the query results (local and global mode) of the home GRAPHRAG_HOME names."""
    code, out = cli("stats", "--json")
    assert code == 0, out
    found = {"stats": json.loads(out)}
    for question, mode in QUESTIONS:
        code, out = cli("query", question, "--mode", mode, "--json")
        assert code == 0, out
        found[mode] = json.loads(out)
    return found


def _local_build(corpus: Path, home: Path, monkeypatch) -> dict:
    monkeypatch.setenv("GRAPHRAG_HOME", str(home))
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    return _results()


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_build_on_s3_gives_what_a_local_build_gives(home, corpus, bucket_url, tmp_path, monkeypatch, capsys):
    server, bucket, url = bucket_url
    expected = _local_build(corpus, tmp_path / "local-home", monkeypatch)
    assert expected["stats"]["entities"] > 0

    scratch = tmp_path / "scratch"
    monkeypatch.setenv("GRAPHRAG_HOME", url)
    monkeypatch.setenv("GRAPHRAG_SCRATCH", str(scratch))
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    assert f"home {url} on object storage; working copy {scratch}" in out
    objects = server.objects(bucket)
    assert "kb/index/search_index.duckdb" in objects and "kb/state/home.json" in objects
    assert not [k for k in objects if k.startswith(("kb/dagster/", "kb/cache/", "kb/.sync/")) or "build.lock" in k]
    assert (scratch / "dagster" / "dagster.yaml").exists()  # the private instance lives in the working copy

    # a reader on another machine: a fresh working copy downloads the published index and agrees
    monkeypatch.setenv("GRAPHRAG_SCRATCH", str(tmp_path / "reader"))
    assert _results() == expected
    assert not (tmp_path / "reader" / "tables").exists()  # stats and query pull only the index
    code, _ = cli("build", "--corpus", str(corpus), "--method", "fast")  # another machine: nothing to do
    assert code == 0
    err = capsys.readouterr()
    for text in (err.out, err.err, *[v.decode("latin-1") for v in objects.values()]):
        assert FAKE_SECRET not in text
    for folder in (scratch, tmp_path / "reader"):
        assert not [k for k, v in _files(folder).items() if FAKE_SECRET.encode() in v]


def _dagster_job(env: dict, job: str) -> subprocess.CompletedProcess:
    """A run in its own process on the multiprocess executor: every step its own process."""
    exe = Path(sys.executable).with_name("dagster")
    return subprocess.run(
        [str(exe), "job", "execute", "-m", "graphrag_pipeline.definitions", "-j", job],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _edit(corpus: Path) -> None:
    doc = corpus / "darwin_and_wallace.txt"
    doc.write_text(
        doc.read_text(encoding="utf-8") + "\n\nJoseph Hooker and Charles Lyell presented the joint paper of Darwin "
        "and Wallace to the Linnean Society in London in 1858.\n",
        encoding="utf-8",
    )


def _local_build_and_edit(corpus: Path, home: Path, monkeypatch) -> tuple[dict, dict]:
    """The results of a local build of ``corpus``, and of the next build after one document changed."""
    first = _local_build(corpus, home, monkeypatch)
    _edit(corpus)
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    return first, _results()


def test_every_run_and_step_on_a_fresh_scratch_as_on_separate_machines(home, corpus, bucket_url, tmp_path, monkeypatch):
    server, bucket, url = bucket_url
    remote_corpus = tmp_path / "remote-corpus"
    shutil.copytree(corpus, remote_corpus)
    expected, expected_edited = _local_build_and_edit(corpus, tmp_path / "local", monkeypatch)
    assert expected_edited != expected

    instance = tmp_path / "instance"  # one Dagster instance for all "machines" (a Postgres one in production)
    instance.mkdir()
    monkeypatch.setenv("GRAPHRAG_DAGSTER_HOME", str(instance))
    monkeypatch.setenv("GRAPHRAG_HOME", url)
    monkeypatch.setenv("GRAPHRAG_SCRATCH", "ephemeral")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # where the ephemeral working copies go
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    code, out = cli("build", "--corpus", str(remote_corpus), "--method", "fast")
    assert code == 0, out
    assert _results() == expected
    _edit(remote_corpus)
    code, out = cli("build", "--corpus", str(remote_corpus), "--method", "fast")
    assert code == 0, out
    assert "1 to process" in out
    assert _results() == expected_edited
    assert list((tmp_path / "tmp").iterdir()) == []  # every working copy was removed after its push

    # the graph and the index again, each step in its own process with its own fresh scratch
    env = {**os.environ, "DAGSTER_HOME": str(instance), "GRAPHRAG_METHOD": "fast"}
    for job in ("graph_job", "index_job"):
        done = _dagster_job(env, job)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert FAKE_SECRET not in done.stdout + done.stderr
    assert _results() == expected_edited
    assert list((tmp_path / "tmp").iterdir()) == []
    for name, data in {**_files(instance), **server.objects(bucket)}.items():  # Dagster metadata and the bucket
        assert FAKE_SECRET.encode() not in data, name


def test_an_object_missing_from_the_bucket_fails_the_step_that_needs_it(
    home, corpus, bucket_url, tmp_path, monkeypatch
):
    import dagster as dg

    from graphrag_pipeline.definitions import current_defs

    server, bucket, url = bucket_url
    monkeypatch.setenv("GRAPHRAG_HOME", url)
    monkeypatch.setenv("GRAPHRAG_SCRATCH", str(tmp_path / "machine-1"))
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    inst = dg.DagsterInstance.from_config(str(tmp_path / "machine-1" / "dagster"))

    # the corpus sensor on another machine reads the home from the bucket (a pull, never a push)
    from graphrag_pipeline.defs.resources import settings_from_env
    from graphrag_pipeline.defs.sensors import corpus_sensor

    monkeypatch.setenv("GRAPHRAG_SCRATCH", "ephemeral")
    before = server.objects(bucket)
    with dg.build_sensor_context(instance=inst, resources={"settings": settings_from_env()}) as ctx:
        tick = corpus_sensor(ctx)
    assert not tick.run_requests and "7 documents, none new or changed" in tick.skip_reason.skip_message
    assert server.objects(bucket) == before

    key = "darwin_and_wallace.txt"
    server.client().delete_object(Bucket=bucket, Key=f"kb/tables/doc_subgraph/{key}.relations.parquet")

    # a step on another machine (GRAPHRAG_SCRATCH=ephemeral: a fresh working copy)
    result = current_defs().resolve_job_def("graph_job").execute_in_process(instance=inst, raise_on_error=False)
    assert not result.success
    failures = {e.step_key: e.event_specific_data.error.message for e in result.get_step_failure_events()}
    assert "knowledge_graph" in failures, failures
    message = failures["knowledge_graph"]
    assert f"{key}.relations.parquet" in message and "materialized" in message and "graphrag-pipeline build" in message
    assert not result.get_asset_materialization_events()
    # the published index in the bucket is the one of the good build
    assert "kb/index/search_index.duckdb" in server.objects(bucket, "kb/index/")


def test_the_cli_says_a_missing_bucket_in_one_line_and_exits_non_zero(
    home, corpus, s3_env, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("GRAPHRAG_HOME", "s3://no-such-bucket-here/kb")
    monkeypatch.setenv("GRAPHRAG_SCRATCH", str(tmp_path / "scratch"))
    for args in (("stats", "--json"), ("build", "--corpus", str(corpus), "--method", "fast")):
        code, out = cli(*args)
        err = capsys.readouterr().err
        assert code == 2, (out, err)
        line = [x for x in err.splitlines() if x.startswith("error:")]
        assert len(line) == 1 and "s3://no-such-bucket-here/kb" in line[0] and "does not exist" in line[0], err
        assert "Traceback" not in err and FAKE_SECRET not in out + err


def test_a_failed_step_still_pushes_what_it_finished_and_a_sensor_never_pushes(bucket_url, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from graphrag_pipeline.defs.resources import PipelineSettings

    server, bucket, url = bucket_url
    monkeypatch.setenv("GRAPHRAG_HOME", url)
    monkeypatch.setenv("GRAPHRAG_SCRATCH", "ephemeral")
    step = SimpleNamespace(run=object())  # what Dagster gives a run's step (InitResourceContext.run)
    seen = []
    with pytest.raises(RuntimeError, match="the step failed"):
        with PipelineSettings().yield_for_execution(step) as settings:
            seen.append(settings.paths.home)
            _write(settings.paths.tables / "chunks" / "done.parquet", b"finished before the failure")
            raise RuntimeError("the step failed")
    assert server.objects(bucket) == {"kb/tables/chunks/done.parquet": b"finished before the failure"}
    assert not seen[0].exists()  # the ephemeral working copy is gone

    sensor = SimpleNamespace(run=None)
    with PipelineSettings().yield_for_execution(sensor) as settings:
        assert (settings.paths.tables / "chunks" / "done.parquet").read_bytes() == b"finished before the failure"
        _write(settings.paths.tables / "chunks" / "stray.parquet", b"x")
    assert set(server.objects(bucket)) == {"kb/tables/chunks/done.parquet"}

    monkeypatch.setenv("GRAPHRAG_HOME", str(tmp_path / "local"))  # a local home: no working copy, no sync
    with PipelineSettings().yield_for_execution(step) as settings:
        assert settings.paths.home == tmp_path / "local" and settings.scratch is None


def test_access_denied_says_what_to_check_and_a_secret_in_an_error_text_is_redacted(s3_env, tmp_path):
    home = RemoteHome("s3://bucket/kb", tmp_path / "s")
    denied = str(home._error(PermissionError("AccessDenied"), "listing it"))
    assert denied.startswith("cannot use the home s3://bucket/kb") and "access denied" in denied
    assert "AWS_ACCESS_KEY_ID" in denied and FAKE_SECRET not in denied
    odd = str(home._error(ConnectionError(f"signature with {FAKE_SECRET} rejected"), "uploading"))
    assert FAKE_SECRET not in odd and "***" in odd and "check the endpoint" in odd


def test_a_step_pushes_what_it_wrote_before_the_next_step_starts(bucket_url, tmp_path, monkeypatch):
    # Dagster starts the next step (another process, another machine) once a step is reported done,
    # before the step's resources are torn down: the step's files must be in the bucket by then
    import dagster as dg

    from graphrag_pipeline.defs.stopping import stoppable

    server, bucket, url = bucket_url
    monkeypatch.setenv("GRAPHRAG_HOME", url)
    monkeypatch.setenv("GRAPHRAG_SCRATCH", str(tmp_path / "scratch"))
    seen: dict = {}

    @dg.asset
    @stoppable
    def upstream(settings: PipelineSettings) -> None:
        _write(settings.paths.tables / "chunks" / "a.parquet", b"written by upstream")

    @dg.asset(deps=[upstream])
    @stoppable
    def downstream(settings: PipelineSettings) -> None:
        seen.update(server.objects(bucket))

    # in process, the resource is torn down (and pushes) only after the whole run
    result = dg.materialize([upstream, downstream], resources={"settings": PipelineSettings()})
    assert result.success
    assert seen == {"kb/tables/chunks/a.parquet": b"written by upstream"}
