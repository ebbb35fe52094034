"""Reports: one report per community.

`offline` writes the extractive report (no LLM) and decides which communities need a new
report; `llm` asks the model for the MS-GraphRAG-style report and schedules many of them.
"""
