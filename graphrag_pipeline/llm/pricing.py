"""What LLM tokens cost in USD: the price of the configured model at the configured endpoint.

Prices come from `genai-prices` (a maintained table of providers and models, shipped as data in
the package: no network) unless both GRAPHRAG_PRICE_INPUT_PER_MTOK and
GRAPHRAG_PRICE_OUTPUT_PER_MTOK are set, which win. The provider is the one the endpoint's URL
names (no OPENAI_BASE_URL: OpenAI, as the openai client does); a model the table does not know
at that endpoint - any local vLLM/Ollama server - has no price: its cost is "unknown", never a
guess from another provider's list. A tiered price is taken at its first tier (prompts of the
pipeline are far below the usual 128k/200k thresholds).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from graphrag_pipeline.settings import Env, setting

OPENAI_API_URL = "https://api.openai.com/v1"
_MTOK = 1_000_000
_OVERRIDE_SOURCE = "GRAPHRAG_PRICE_INPUT_PER_MTOK / GRAPHRAG_PRICE_OUTPUT_PER_MTOK"


@dataclass(frozen=True)
class Price:
    """USD per million prompt (input) and completion (output) tokens, and where they come from."""

    input_per_mtok: float
    output_per_mtok: float
    source: str

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok) / _MTOK

    def describe(self) -> str:
        rates = f"${self.input_per_mtok:g} / ${self.output_per_mtok:g}"
        return f"{rates} per million prompt / completion tokens ({self.source})"


@dataclass(frozen=True)
class Pricing:
    """The price of one model at one endpoint, or None with the reason it is unknown."""

    model: str
    price: Price | None
    unknown_reason: str = ""

    def describe(self) -> str:
        return self.price.describe() if self.price else f"unknown: {self.unknown_reason}"

    @property
    def free(self) -> bool:
        """Both rates set to 0 by the GRAPHRAG_PRICE_* overrides: a free (local) server, where every
        call - embeddings too - costs 0 rather than an unknown price."""
        return (
            self.price is not None
            and self.price.source == _OVERRIDE_SOURCE
            and self.price.input_per_mtok == 0
            and self.price.output_per_mtok == 0
        )


def _from_table(model: str, base_url: str | None) -> Price | None:
    from genai_prices import Usage, calc_price

    kwargs = {"provider_id": "openai"} if not base_url else {"provider_api_url": base_url}
    try:
        inp = calc_price(Usage(input_tokens=_MTOK, output_tokens=0), model_ref=model, **kwargs)
        out = calc_price(Usage(input_tokens=0, output_tokens=_MTOK), model_ref=model, **kwargs)
    except LookupError:
        return None
    return Price(
        float(inp.total_price),
        float(out.total_price),
        f"genai-prices: {inp.provider.id} {inp.model.id}",
    )


@lru_cache(maxsize=32)
def _table_price(model: str, base_url: str | None) -> Price | None:
    return _from_table(model, base_url)


def pricing_for(model: str, base_url: str | None, env: Env | None = None) -> Pricing:
    """The price of ``model`` at ``base_url`` (None: OpenAI): the GRAPHRAG_PRICE_* overrides when
    set, else the genai-prices table, else unknown (with the reason)."""
    inp = setting("GRAPHRAG_PRICE_INPUT_PER_MTOK", env)
    out = setting("GRAPHRAG_PRICE_OUTPUT_PER_MTOK", env)
    if inp is not None and out is not None:
        return Pricing(model, Price(inp, out, _OVERRIDE_SOURCE))
    price = _table_price(model, base_url.rstrip("/") if base_url else None)
    if price is not None:
        return Pricing(model, price)
    where = base_url or OPENAI_API_URL
    return Pricing(
        model,
        None,
        f"genai-prices has no price for model {model!r} at {where}; set GRAPHRAG_PRICE_INPUT_PER_MTOK and "
        "GRAPHRAG_PRICE_OUTPUT_PER_MTOK (USD per million tokens; 0 for a free local server)",
    )


def configured_pricing(env: Env | None = None) -> Pricing:
    """The price of the configured chat model (GRAPHRAG_LLM_MODEL) at the configured endpoint."""
    from graphrag_pipeline.urls import redact_url

    base_url = setting("OPENAI_BASE_URL", env)
    return pricing_for(setting("GRAPHRAG_LLM_MODEL", env), redact_url(base_url) if base_url else None, env)
