"""Ingest: from corpus files to chunks.

`documents` scans the corpus and reads each file into text (encodings, size limits, partition
keys); `chunking` cuts the text into content-anchored, token-bounded chunks; `tokens` counts
cl100k tokens offline; `corpus_sync` compares the corpus with what was built and plans the runs
(documents to add, delete and process). No Dagster here.
"""
