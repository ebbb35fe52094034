"""Storage: everything about GRAPHRAG_HOME in one place.

`layout` names every folder and file; `files` writes atomically and reads with clear damage
errors; `store` reads and writes each stage's outputs; `home` keeps the home's record (corpus,
method) and the one-build-at-a-time lock; `verify` finds missing or damaged outputs.
"""
