"""Where `engram serve` answers, as the serve banner and the demo print it: the inspector, the API
docs and MCP, so a newcomer sees every surface and its URL."""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def base_url(host: str | None = None, port: int | None = None) -> str:
    """The service's URL: the given host and port, else ENGRAM_HOST / ENGRAM_PORT (as `engram serve`
    reads them), else its defaults."""
    host = host or os.environ.get("ENGRAM_HOST") or DEFAULT_HOST
    port = port or int(os.environ.get("ENGRAM_PORT") or DEFAULT_PORT)
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host  # a browser cannot open the wildcard address
    return f"http://{shown}:{port}"


def surfaces(url: str) -> list[tuple[str, str]]:
    """(what, URL) for each surface of the service."""
    return [
        ("inspector", f"{url}/inspector  (sign in with a user key, or the admin key)"),
        ("REST API", f"{url}/v1  (docs: {url}/docs)"),
        ("MCP", f"{url}/mcp  (Authorization: Bearer <user key>; `engram mcp-config` prints client config)"),
        ("health", f"{url}/healthz"),
    ]


def serve_banner(host: str, port: int) -> str:
    """What `engram serve` prints once it listens: where each surface is."""
    url = base_url(host, port)
    return f"Engram on {url}\n" + "\n".join(f"  {what + ':':<11}{where}" for what, where in surfaces(url))


def without_password(store_url: str) -> str:
    """A store URL as the CLI prints it: a password in the user part or as an option (``password``,
    ``sslpassword``, any case) becomes ``***``. Example: postgresql://app:pw@db/engram -> postgresql://app:***@db/engram."""
    parts = urlsplit(store_url)
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:***@{host}"
    options = parse_qsl(parts.query, keep_blank_values=True)
    query = urlencode([(k, "***" if "password" in k.lower() else v) for k, v in options], safe="*")
    if netloc == parts.netloc and query == urlencode(options, safe="*"):
        return store_url
    return urlunsplit(parts._replace(netloc=netloc, query=query))
