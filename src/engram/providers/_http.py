"""What the HTTP providers share."""

from __future__ import annotations

import httpx


def why(exc: Exception) -> str:
    """What went wrong, without the URL httpx puts in its messages (it holds any user:password)."""
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, httpx.HTTPError):
        return type(exc).__name__
    return f"malformed response ({type(exc).__name__}: {exc})"
