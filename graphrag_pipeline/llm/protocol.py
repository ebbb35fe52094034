"""The seams of the LLM: what extraction, summaries, resolution, reports and queries ask of a chat
client, and what the endpoint embedder asks of an embeddings client. llm/client.LLMClient
implements both; tests put in-process fakes behind the same signatures (test_protocols.py checks)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from graphrag_pipeline.llm.client import ChatResult, LLMError


@runtime_checkable
class ChatClient(Protocol):
    def chat(
        self,
        messages: list[dict],
        *,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        logit_bias: dict[int, int] | None = None,
        response_format: dict | None = None,
        use_cache: bool = True,
    ) -> ChatResult:
        """One chat completion; raises LLMError when the endpoint fails it for good."""
        ...

    def chat_many(self, calls: list[dict]) -> list[ChatResult | LLMError]:
        """Several `chat` calls (each dict = its keyword arguments); results in input order, a
        failed call gives its LLMError instead of raising it."""
        ...


@runtime_checkable
class EmbeddingClient(Protocol):
    embedding_model: str | None

    def embed(self, texts: list[str]) -> np.ndarray:
        """float32, L2-normalised rows in input order."""
        ...


@runtime_checkable
class QueryClient(ChatClient, EmbeddingClient, Protocol):
    """What a query uses: chat (query rewrite, answers) and, for an index embedded by the endpoint's
    model, embeddings of the question from the same client."""
