"""Extract: from chunks to one entity/relation subgraph per document.

`batch` runs the configured method over many chunks with a per-chunk cache; `offline` is the
`fast` method (no LLM); `llm` holds the `light` and `general` prompts' calls (with gleaning);
`parsing` reads the LLM's delimited records, however messy; `records` is what every method
returns per chunk; `subgraph` turns a document's records into its two tables.
"""
