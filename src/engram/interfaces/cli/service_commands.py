"""Commands that run Engram as a service: serve (and its workers), keys, mcp, mcp-config."""

from __future__ import annotations

import errno
import logging
import sys
from collections.abc import Callable
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import typer
from rich.text import Text

from engram.errors import EngramError, Unauthenticated
from engram.interfaces.cli.common import (
    JsonOpt,
    StoreOpt,
    UserOpt,
    _engram,
    _fail,
    _print_json,
    _settings,
    _store_url,
    app,
    console,
    err_console,
    keys_app,
)
from engram.interfaces.cli.urls import base_url, serve_banner
from engram.memory import Engram, sqlite_path
from engram.observability.request_log import JsonFormatter, LogFormat, log_config
from engram.settings import EngramSettings, load_settings

LogLevel = Literal["critical", "error", "warning", "info", "debug"]


@app.command()
def serve(
    host: Annotated[str, typer.Option(envvar="ENGRAM_HOST", help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="ENGRAM_PORT", help="TCP port")] = 8765,
    workers: Annotated[
        int, typer.Option(envvar="ENGRAM_WORKERS", min=1, help="server processes on the one store")
    ] = 1,
    log_level: Annotated[
        LogLevel,
        typer.Option(
            envvar="ENGRAM_LOG_LEVEL", help="server log level; info and debug include the request lines"
        ),
    ] = "info",
    log_format: Annotated[
        LogFormat,
        typer.Option(envvar="ENGRAM_LOG_FORMAT", help="text, or json: one JSON object per log line"),
    ] = "text",
    store: StoreOpt = None,
) -> None:
    """Serve the REST API (/v1, docs at /docs), MCP (/mcp), /healthz and /metrics; --workers N for N
    processes. Logs one line per request: method, route, status, duration and request id, also sent
    back as X-Request-ID (--log-level warning for none)."""
    import uvicorn

    from engram.auth import ApiKeys, check_admin_key
    from engram.interfaces.rest import create_app
    from engram.interfaces.rest.protocol import JsonErrorsH11Protocol

    say = announcer(log_format)
    settings = serving_settings()
    if settings.otel:
        from engram.observability.tracing import install_provider

        try:
            install_provider()
        except EngramError as exc:  # the otel extra is not installed: one line, not a traceback
            raise _fail(exc) from None
    admin_key = settings.admin_key.get_secret_value() if settings.admin_key else None
    if admin_key:
        try:
            check_admin_key(admin_key)  # before the models load: a weak key fails at once
        except EngramError as exc:
            raise _fail(exc) from None
    _check_port_free(host, port)  # before the store opens and the banner: a busy port is no "Engram on"
    with _engram(store, settings) as eng:
        keys = ApiKeys(eng.store)
        if admin_key:
            revoked = keys.adopt_admin_key(admin_key)
            say(
                "admin key: ENGRAM_ADMIN_KEY" + (f" (older admin keys revoked: {revoked})" if revoked else "")
            )
        elif not keys.has_admin() and log_format == "json":  # logs are kept, and read by many
            say("no admin key: set ENGRAM_ADMIN_KEY (a generated key is not written into JSON logs)")
        elif not keys.has_admin():
            key, _ = keys.create(None, label="created on first start")
            say(f"[bold]admin key[/bold] (shown once, keep it): {key}")
        else:  # printed once (or set before): say how to replace it
            say("admin key: the one this store has (lost? set ENGRAM_ADMIN_KEY to replace it)")
        say(serve_banner(host, port))
        worker = _consolidation_worker(eng, say)  # in this process only: one per store, whatever --workers
        try:
            if workers == 1:
                app = create_app(eng, keys, host=host)
                uvicorn.run(
                    app,
                    host=host,
                    port=port,
                    log_level=log_level,
                    http=JsonErrorsH11Protocol,
                    log_config=log_config(log_level, log_format),
                    access_log=False,  # the request line replaces it
                )
            else:
                _serve_processes(
                    workers,
                    eng.settings,
                    _store_url(store, eng.settings, existing=False),
                    host,
                    port,
                    log_config(log_level, log_format),
                    say,
                )
        finally:
            if worker is not None:
                worker.stop()


def serving_settings() -> EngramSettings:
    """`engram serve`'s settings: a server queues and sheds recalls under load (recall_gate), unless
    ENGRAM_RECALL_GATE (or the TOML file) says otherwise; an embedded Engram does neither by default."""
    settings = _settings()
    if "recall_gate" not in settings.model_fields_set:
        settings = _settings(recall_gate=True)
    return settings


def _check_port_free(host: str, port: int) -> None:
    """Fail with one clear line when ``host:port`` cannot be listened on (another server holds it, or
    the address is not this machine's), instead of starting, printing the banner, then failing."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise _fail(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is free
        try:
            probe.bind(address)
        except OSError as exc:
            why = "already in use (is another `engram serve` running? pick another --port)"
            detail = why if exc.errno == errno.EADDRINUSE else exc.strerror
            raise _fail(f"cannot listen on {host}:{port}: {detail}") from None


def _serve_processes(
    workers: int,
    settings: EngramSettings,
    store: str,
    host: str,
    port: int,
    log_setup: dict[str, Any],
    say: Callable[[str], None],
) -> None:
    """uvicorn's supervisor over ``workers`` processes (engram.interfaces.rest.workers), each with its
    share of the cores for its models and its recall slots (half the cores in all, at least one per
    process), so together they do not oversubscribe them."""
    import os

    import uvicorn

    from engram.interfaces.rest.protocol import JSON_ERRORS_H11
    from engram.threads import available_cores

    os.environ["ENGRAM_STORE"] = store
    os.environ["ENGRAM_RECALL_GATE"] = str(settings.recall_gate).lower()
    os.environ["ENGRAM_HOST"] = host
    if "model_threads" not in settings.model_fields_set:
        os.environ["ENGRAM_MODEL_THREADS"] = str(max(1, available_cores() // workers))
    if "recall_concurrency" not in settings.model_fields_set:
        os.environ["ENGRAM_RECALL_CONCURRENCY"] = str(max(1, available_cores() // 2 // workers))
    say(f"{workers} worker processes")
    uvicorn.run(
        "engram.interfaces.rest.workers:app_from_environment",
        factory=True,
        workers=workers,
        http=JSON_ERRORS_H11,
        host=host,
        port=port,
        log_config=log_setup,
        access_log=False,
    )


def announcer(log_format: LogFormat) -> Callable[[str], None]:
    """How `engram serve` says what it does as it starts (the admin key, where it listens): on the
    terminal as text, or with --log-format json as one JSON log line each, on stderr with the logs, so
    a log pipeline reads nothing but JSON."""
    if log_format == "text":
        return lambda text: console.print(text, highlight=False, soft_wrap=True)
    formatter = JsonFormatter()

    def say(text: str) -> None:
        plain = Text.from_markup(text).plain
        record = logging.LogRecord("engram.serve", logging.INFO, __file__, 0, plain, None, None)
        print(formatter.format(record), file=sys.stderr, flush=True)

    return say


def _consolidation_worker(eng: Engram, say: Callable[[str], None]) -> Any:
    """Start background consolidation when an LLM is configured and the worker is on."""
    s = eng.settings
    if not s.consolidation_worker:
        say("consolidation worker: off (ENGRAM_CONSOLIDATION_WORKER=false)")
        return None
    if not (s.llm_base_url and s.llm_model):
        say("consolidation: disabled: no LLM configured (ENGRAM_LLM_BASE_URL, ENGRAM_LLM_MODEL)")
        return None
    from engram.consolidation.worker import ConsolidationWorker

    worker = ConsolidationWorker(
        eng, every_episodes=s.consolidate_every_episodes, every_hours=s.consolidate_every_hours
    )
    worker.start()
    every = f"every {s.consolidate_every_episodes} new turns or {s.consolidate_every_hours} h"
    say(f"consolidation worker: {every}")
    return worker


@keys_app.command("create")
def keys_create(
    user: UserOpt,
    label: Annotated[str, typer.Option(help="a note, e.g. which agent uses it")] = "",
    scope: Annotated[
        str,
        typer.Option(
            help="read: recall and read only; write: also write and forget (the one admin key is set by "
            "ENGRAM_ADMIN_KEY or made by the first `engram serve`, not here)"
        ),
    ] = "write",
    expires_in: Annotated[
        str | None, typer.Option(help="lifetime, e.g. 30d, 12h, 90m (default: never expires)")
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="print the key alone: KEY=$(engram keys create -u U -q)")
    ] = False,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Create a key for a user and print it (only once): the key on stdout, its id on stderr."""
    from engram.auth import ApiKeys, key_scope, parse_lifetime

    try:
        lifetime = None if expires_in is None else parse_lifetime(expires_in)
        checked = key_scope(user, scope)
    except EngramError as exc:
        raise _fail(exc) from None
    with _engram(store, rerank=False) as eng:
        key, record = ApiKeys(eng.store).create(user, label, scope=checked, expires_in=lifetime)
    if as_json:
        _print_json({"key": key, **record.__dict__})
        return
    sys.stdout.write(key + "\n")
    if not quiet:
        expiry = f", expires {record.expires_at:%Y-%m-%d %H:%M} UTC" if record.expires_at else ""
        note = f"id {record.id} for user {record.user_id} ({record.scope}{expiry}); the key is shown once"
        err_console.print(note, style="dim", highlight=False, soft_wrap=True)


@keys_app.command("list")
def keys_list(
    user: Annotated[str | None, typer.Option("--user", "-u")] = None,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """List keys (ids, users, dates; never the keys), one a line: user, created, state, label, id."""
    from engram.auth import ApiKeys
    from engram.interfaces.cli.output import print_keys

    with _engram(store, existing=True, rerank=False) as eng:
        records = ApiKeys(eng.store).list(user)
    print_keys(records, as_json)


@keys_app.command("revoke")
def keys_revoke(key_id: str, store: StoreOpt = None) -> None:
    """Revoke a key by id; it stops working at once."""
    from engram.auth import ApiKeys

    with _engram(store, existing=True, rerank=False) as eng:
        ApiKeys(eng.store).revoke(key_id)
    console.print(f"revoked {key_id}")


@app.command()
def mcp(store: StoreOpt = None) -> None:
    """Serve MCP over stdio for one user: ENGRAM_API_KEY (a user key) or ENGRAM_USER picks the tenant."""
    import os

    from engram.auth import ApiKeys
    from engram.interfaces.mcp import run_stdio

    err = err_console  # stdout carries the protocol
    key, user = os.environ.get("ENGRAM_API_KEY"), os.environ.get("ENGRAM_USER")
    try:
        settings = load_settings()
        # A key can only be checked against the store that holds it: never create an empty one for it.
        why = "ENGRAM_API_KEY cannot be checked against it (is --store right?)"
        with Engram.from_settings(settings, _store_url(store, settings, existing=bool(key), why=why)) as eng:
            may_write = True  # ENGRAM_USER: a trusted local setup
            if key:
                try:
                    principal = ApiKeys(eng.store).authenticate(key)
                except Unauthenticated as exc:  # expired, or missing, unknown or revoked
                    err.print(f"error: ENGRAM_API_KEY: {exc}")
                    raise typer.Exit(1) from None
                if principal.user_id is None:
                    err.print("error: ENGRAM_API_KEY is not a live user key")
                    raise typer.Exit(1)
                if user and user != principal.user_id:  # an outside review: bob's name, alice's memory
                    err.print(f"error: ENGRAM_API_KEY is {principal.user_id}'s key, ENGRAM_USER says {user}")
                    raise typer.Exit(1)
                user, may_write = principal.user_id, principal.may_write
            if not user:
                err.print("error: set ENGRAM_API_KEY (a user key) or ENGRAM_USER")
                raise typer.Exit(1)
            run_stdio(eng, eng.for_user(user).user_id, may_write=may_write)
    except EngramError as exc:
        err.print(f"error: {exc}")
        raise typer.Exit(1) from None


PLACEHOLDER_KEY = "<API_KEY>"


def _is_http_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not any(c.isspace() for c in url)


@app.command("mcp-config")
def mcp_config(
    user: Annotated[
        str | None,
        typer.Option("--user", "-u", help="the key's user, to check (the key decides whose memory opens)"),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            help="where `engram serve` listens (default: ENGRAM_HOST and ENGRAM_PORT, as serve reads them, "
            "else http://127.0.0.1:8765)"
        ),
    ] = None,
    key: Annotated[str, typer.Option(help="the user's API key (default: a placeholder)")] = PLACEHOLDER_KEY,
    store: StoreOpt = None,
) -> None:
    """Print ready-to-paste MCP config for Claude Desktop and Cursor (stdio and HTTP), for the user whose
    key is given (checked in the store; a --user that is not the key's is refused)."""
    import shutil

    if url is not None and not _is_http_url(url):
        raise _fail(
            f"--url must be an http(s) URL with a host and no spaces (http://10.0.0.5:8765); got {url!r}"
        )
    owner = user if key == PLACEHOLDER_KEY else _key_user(key, user, store)
    command = shutil.which("engram") or "engram"
    stdio = {"command": command, "args": ["mcp", *_pinned_store(store)], "env": {"ENGRAM_API_KEY": key}}
    url = url or base_url()  # a serve on ENGRAM_PORT=8931 is not reached at 8765
    http = {"url": f"{url.rstrip('/')}/mcp", "headers": {"Authorization": f"Bearer {key}"}}
    whose = f"user {owner}" if owner else f"the user of the key you put in place of {PLACEHOLDER_KEY}"
    console.print(f"[bold]MCP config for {whose}[/bold]\n", highlight=False, soft_wrap=True)
    console.print(
        "Claude Desktop: claude_desktop_config.json\n"
        "  macOS:   ~/Library/Application Support/Claude/claude_desktop_config.json\n"
        "  Windows: %APPDATA%\\Claude\\claude_desktop_config.json\n"
        "  Linux:   ~/.config/Claude/claude_desktop_config.json\n"
        "Cursor: ~/.cursor/mcp.json (all projects) or .cursor/mcp.json (one project)\n",
        highlight=False,
    )
    console.print("stdio (Engram runs as a child process of the client, embedded store):", highlight=False)
    _print_json({"mcpServers": {"engram": stdio}})
    console.print("\nHTTP (a running `engram serve`; Cursor reads this form directly):", highlight=False)
    _print_json({"mcpServers": {"engram": http}})
    console.print(
        "\nClaude Desktop speaks stdio to local servers; to reach an HTTP server from it use a bridge:",
        highlight=False,
    )
    _print_json(
        {
            "mcpServers": {
                "engram": {
                    "command": "npx",
                    "args": ["mcp-remote", http["url"], "--header", f"Authorization: Bearer {key}"],
                }
            }
        }
    )


def _key_user(key: str, user: str | None, store: str | None) -> str:
    """The user whose memory ``key`` opens, from the store that holds it (the stdio config's store, and
    the one `engram serve` serves by default). A key that is not a live user key there, or a ``user``
    that is not the key's, is a one-line error: a config titled for one user that opens another's
    memory would mislead whoever pastes it."""
    from engram.auth import ApiKeys

    why = "--key cannot be checked against it (is --store right?)"
    settings = _settings(rerank=False, late_interaction=False)  # only the keys are read
    try:
        url = _store_url(store, settings, existing=True, why=why)
    except EngramError as exc:
        raise _fail(exc) from None
    with _engram(url, settings) as eng:
        principal = ApiKeys(eng.store).resolve(key)
    if principal is None:
        raise _fail("--key is not a live key in this store (is --store right, or was it revoked?)")
    if principal.user_id is None:
        raise _fail("--key is the admin key, which opens no memory: give a user key (engram keys create)")
    if user is not None and user != principal.user_id:
        raise _fail(
            f"--user {user} does not match --key, which opens {principal.user_id}'s memory (the key "
            f"decides): leave out --user, or give {user}'s key"
        )
    return principal.user_id


def _pinned_store(store: str | None) -> list[str]:
    """``--store URL`` for the stdio config: the client starts `engram mcp` in its own directory and
    environment, so a store other than the built-in default is named, with an absolute path."""
    try:
        url = store or load_settings().store_url()
        path = sqlite_path(url)
    except EngramError as exc:
        raise _fail(exc) from None
    if path is not None:
        url = f"sqlite:///{path.resolve()}"
        if url == EngramSettings.defaults().store_url():
            return []
    return ["--store", url]
