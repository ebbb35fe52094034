"""The Dagster layer: assets, resources, sensors, schedules and checks wiring the core together."""
