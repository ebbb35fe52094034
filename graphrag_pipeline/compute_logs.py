"""The compute log manager of a home's private Dagster instance (the project's dagster.yaml).

Dagster's LocalComputeLogManager copies a run's stdout and stderr to files (the UI shows them)
and mirrors each file back to the terminal with `tail -F`, watched by a Python process that kills
the tail if the run's process dies. Those four helpers are in the terminal's process group, so a
Ctrl-C reaches them too, and each Python watcher printed a KeyboardInterrupt traceback below the
build's own clean "stopped" lines.

This manager stores the same files in the same place; its mirror is GNU tail alone, told to end
with the run's process (`--pid`, which replaces the watcher: no Python process is started) and
started in a session of its own (a Ctrl-C at the terminal reaches only the build, which ends it).
Where tail lacks `--pid` (not GNU coreutils), Dagster's own mirror is used.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Generator, Sequence
from contextlib import ExitStack, contextmanager
from functools import lru_cache

from dagster import Field, StringSource
from dagster._core.execution.compute_logs import mirror_stream_to_file, redirect_to_file
from dagster._core.storage.compute_log_manager import CapturedLogContext, ComputeIOType
from dagster._core.storage.local_compute_log_manager import IO_TYPE_EXTENSION, LocalComputeLogManager
from dagster._utils import ensure_file, touch_file


@lru_cache(maxsize=1)
def _tail_has_pid_option() -> bool:
    try:
        done = subprocess.run(["tail", "--help"], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--pid" in done.stdout


def _fileno(stream) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.StringIO (tests), a closed stream
        return None


@contextmanager
def _mirror(stream, path: str) -> Generator[None, None, None]:
    """Output written to `stream`'s file descriptor goes to `path`, and is shown on the stream as
    it was (by tail, from the file)."""
    fd = _fileno(stream)
    if fd is None or not _tail_has_pid_option():
        with mirror_stream_to_file(stream, path):
            yield
        return
    ensure_file(path)
    tail = subprocess.Popen(
        ["tail", "-F", "-c", "+0", f"--pid={os.getpid()}", path],
        stdout=fd,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        with redirect_to_file(stream, path):
            yield
    finally:
        tail.terminate()
        try:
            tail.wait(timeout=30)
        except subprocess.TimeoutExpired:
            tail.kill()


class QuietComputeLogManager(LocalComputeLogManager):
    """LocalComputeLogManager (same files, same UI) without Python watcher processes; see the module
    docstring. `base_dir` defaults to the instance's `storage` folder, as Dagster's default does."""

    def __init__(self, base_dir: str | None = None, polling_timeout: float | None = None, inst_data=None):
        super().__init__(base_dir or "", polling_timeout=polling_timeout, inst_data=inst_data)
        self._default_base_dir = not base_dir

    @classmethod
    def config_type(cls):
        return {
            "base_dir": Field(StringSource, is_required=False),
            "polling_timeout": Field(float, is_required=False),
        }

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> QuietComputeLogManager:
        return cls(inst_data=inst_data, **config_value)

    def register_instance(self, instance) -> None:
        super().register_instance(instance)
        if self._default_base_dir:
            self._base_dir = os.path.join(instance.root_directory, "storage")

    @contextmanager
    def capture_logs(self, log_key: Sequence[str]) -> Generator[CapturedLogContext, None, None]:
        outpath = self.get_captured_local_path(log_key, IO_TYPE_EXTENSION[ComputeIOType.STDOUT])
        errpath = self.get_captured_local_path(log_key, IO_TYPE_EXTENSION[ComputeIOType.STDERR])
        with ExitStack() as stack:
            stack.enter_context(_mirror(sys.stdout, outpath))
            stack.enter_context(_mirror(sys.stderr, errpath))
            yield CapturedLogContext(log_key)
        # as Dagster's: the file that says the capture is complete
        touch_file(self.complete_artifact_path(log_key))
