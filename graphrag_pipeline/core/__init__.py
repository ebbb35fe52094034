"""The pure core of the pipeline: one module per stage, no Dagster import anywhere below."""
