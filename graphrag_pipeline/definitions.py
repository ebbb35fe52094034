"""All Dagster definitions of the project (`dagster dev -m graphrag_pipeline.definitions`).

Every module of graphrag_pipeline/defs/ is loaded by Dagster's defs-folder loader (configured by
`[tool.dg]` in pyproject.toml): assets, checks, jobs, sensors and schedules where they are written,
the resources from the `@dg.definitions` function of defs/resources.py.

The assets' code versions (`graphrag_pipeline.code_versions`: method, model, prompt texts,
chunking settings) are read from the settings when the definitions are loaded, so the UI marks
the partitions built under other settings as stale; reloading the code location after a change
of settings shows the new state. `current_defs()` gives them for the settings of this moment (the
CLI calls it once it has settled the environment of a build).
"""

import warnings
from functools import lru_cache
from pathlib import Path

import dagster as dg

from graphrag_pipeline.code_versions import code_versions


@lru_cache(maxsize=1)
def _folder_defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)


@lru_cache(maxsize=8)
def _versioned(versions: tuple[tuple[str, str], ...]) -> dg.Definitions:
    by_key = dict(versions)

    def stamp(spec: dg.AssetSpec) -> dg.AssetSpec:
        version = by_key.get(spec.key.path[-1])  # the asset's name, without the knowledge base's prefix
        return spec.replace_attributes(code_version=version) if version else spec

    with warnings.catch_warnings():
        # map_asset_specs is marked "preview"; it only replaces the specs' code versions here
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return _folder_defs().map_asset_specs(func=stamp)


def current_defs() -> dg.Definitions:
    """The definitions with the code versions of the current settings (cached per set of versions)."""
    return _versioned(tuple(sorted(code_versions().items())))


def _sleeping_slot_wait_in_run_workers() -> None:
    # the daemon's runs execute in process (defs/sensors.py): a step waiting for an `llm` pool slot
    # must sleep there too, not spin (see install_sleeping_slot_wait; the CLI's own message stays)
    from graphrag_pipeline.defs.instance_ops import install_sleeping_slot_wait

    install_sleeping_slot_wait()


_sleeping_slot_wait_in_run_workers()
defs = current_defs()
