"""URLs shown in logs, errors and metadata, without the credentials they may carry."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str, *, keep_query: bool = False) -> str:
    """``url`` without userinfo and, unless ``keep_query`` (for a URL that is still used to
    connect), without query string, fragment and trailing slash (where credentials tend to hide)."""
    try:
        parts = urlsplit(str(url))
        if keep_query and not (parts.username or parts.password):
            return urlunsplit(parts)
        host = parts.hostname or ""
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
        if keep_query:
            return urlunsplit(parts._replace(netloc=netloc))
        return urlunsplit((parts.scheme, netloc, parts.path, "", "")).rstrip("/")
    except ValueError:
        return "<invalid url>"
