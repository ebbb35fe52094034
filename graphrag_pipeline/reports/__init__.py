"""Reports: one report per community.

`offline` writes the extractive report (no LLM); `llm` asks the model for the MS-GraphRAG-style
report; `schedule` writes many of them (reuse, waves, thread pool, cancellation) and decides
which communities get a report partition.
"""
