"""All Dagster definitions of the project (`dagster dev -m graphrag_pipeline.definitions`).

Every module of graphrag_pipeline/defs/ is loaded by Dagster's defs-folder loader (configured by
`[tool.dg]` in pyproject.toml): assets, checks, jobs, sensors and schedules where they are written,
the resources from the `@dg.definitions` function of defs/resources.py."""

from pathlib import Path

import dagster as dg

defs = dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
