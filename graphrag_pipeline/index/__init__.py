"""Index: the published search index, one schema, a writer and a reader per backend.

`records` turns the graph, reports and chunks into index rows; `embedding` embeds them;
`duckdb_writer` / `duckdb_reader` are the embedded default; `es_writer` / `es_reader` are
Elasticsearch for many readers. `protocol` declares what every reader offers the query module.
"""
