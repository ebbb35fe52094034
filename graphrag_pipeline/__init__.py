"""GraphRAG indexing pipeline: documents -> knowledge graph -> communities -> reports -> index."""

__version__ = "0.1.0"
