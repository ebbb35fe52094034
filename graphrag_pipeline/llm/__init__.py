"""LLM: the OpenAI-compatible client and everything it needs.

`client` makes chat and embedding calls (bounded concurrency, retries, circuit breaker, cache);
`prompts` holds this project's prompt texts; `cache` is the SQLite key-value cache shared by
processes; `usage` counts calls, cache hits and tokens per step.
"""
