"""`graphrag-pipeline serve`: an HTTP service and a web page over the published index (FastAPI +
uvicorn; no Dagster). See app.py for the endpoints and holder.py for how a new index is picked up."""

from graphrag_pipeline.serve.app import create_app

__all__ = ["create_app"]
