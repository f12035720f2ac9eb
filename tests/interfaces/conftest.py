"""A real server: uvicorn on a free port in a thread, over a fresh SQLite file, with real models."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from engram import Engram
from engram.auth import ApiKeys
from engram.interfaces.rest import create_app
from engram.interfaces.rest.background import BackgroundServer
from engram.settings import EngramSettings
from engram.storage.sqlite import SQLiteStore


@dataclass
class Service:
    url: str
    engram: Engram
    keys: ApiKeys
    admin_key: str
    user_keys: dict[str, str]
    clients: list[httpx.Client] = field(default_factory=list)

    def client(self, user: str | None = None, key: str | None = None) -> httpx.Client:
        token = key or (self.admin_key if user is None else self.user_keys[user])
        headers = {"Authorization": f"Bearer {token}"} if token != "-" else {}
        client = httpx.Client(base_url=self.url, headers=headers, timeout=30)
        self.clients.append(client)
        return client


@pytest.fixture
def make_service(tmp_path, embedder, reranker, token_encoder):
    """``with make_service(**settings) as svc:`` a server over its own store, with those settings."""

    @contextlib.contextmanager
    def serve(name: str = "svc.db", **settings: object) -> Iterator[Service]:
        engram = Engram(
            SQLiteStore(tmp_path / name),
            embedder,
            reranker,
            token_encoder=token_encoder,
            settings=EngramSettings(**settings),  # type: ignore[arg-type]
        )
        keys = ApiKeys(engram.store)
        admin_key, _ = keys.create(None, "test admin")
        user_keys = {user: keys.create(user)[0] for user in ("sarah", "bob")}
        try:
            with BackgroundServer(create_app(engram, keys)) as url:
                svc = Service(url, engram, keys, admin_key, user_keys)
                yield svc
                for client in svc.clients:
                    client.close()
        finally:
            engram.close()

    return serve


@pytest.fixture
def service(make_service):
    with make_service() as svc:
        yield svc


def cli_user_key(env: dict[str, str], user: str) -> str:
    """A user key made by `engram keys create` on the store ``env`` names."""
    import re
    import sys

    created = subprocess.run(
        [sys.executable, "-m", "engram", "keys", "create", "--user", user],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    match = re.search(r"(egk_\S+)", created)
    assert match, created
    return match.group(1)


def start_serve(env: dict[str, str], port: int, *args: str) -> subprocess.Popen[bytes]:
    """`engram serve` as a real process on ``port``, once /healthz answers (killed if it never does)."""
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "engram", "serve", "--port", str(port), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("engram serve did not come up")


@contextlib.asynccontextmanager
async def mcp_session(url: str, key: str, path: str = "/mcp") -> AsyncIterator[ClientSession]:
    """An initialized session of the official MCP client, over streamable HTTP with a bearer key."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        streamable_http_client(f"{url}{path}", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


# -- the inspector's browser tests: Debian's headless Chromium driven by Playwright, one per test module
# (``browser``), a fresh context (no cookies) per test (``tab``). Needs /usr/bin/chromium
# (``apt-get install -y chromium chromium-driver``; .ci/run installs it) or ENGRAM_CHROMIUM naming a
# Chromium binary. Playwright's own browser downloads are never used.
CHROMIUM = Path(os.environ.get("ENGRAM_CHROMIUM", "/usr/bin/chromium"))
# This machine's network is closed: Chromium's background services would only fail to connect.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"the inspector's browser tests need Chromium at {CHROMIUM}: install Debian's "
            "(apt-get install -y chromium chromium-driver) or set ENGRAM_CHROMIUM to a Chromium binary"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the inspector's browser tests need the playwright package: pip install -e '.[dev]'")
    with sync_playwright() as pw:
        # Playwright starts it headless with a fresh temporary profile (--user-data-dir).
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@dataclass
class Tab:
    """A page of a fresh browser context, and what it saw: dialogs, script errors, request URLs."""

    page: Any
    url: str
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def sign_in(self, key: str, lands_on: str) -> None:
        self.page.goto(self.url + "/inspector")
        self.page.wait_for_url("**/inspector/sign-in")
        self.page.fill("#key", key)
        self.page.click("form button[type=submit]")
        self.page.wait_for_url(f"**/inspector/{lands_on}")

    def open_tab(self, name: str) -> None:
        self.page.click(f"nav.tabs a[data-tab={name}]")
        self.page.wait_for_selector(f"nav.tabs a.active[data-tab={name}]")
        self.settled()

    def settled(self) -> None:
        """Wait until htmx has swapped and settled the new page: it wires the new elements' triggers
        (the user picker's change) while settling, and a change made before that sends nothing."""
        self.page.wait_for_function(
            "() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')"
        )

    def text(self) -> str:
        return str(self.page.inner_text("body"))


@pytest.fixture
def tab(browser, service) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    page = context.new_page()
    t = Tab(page, service.url)
    page.on("dialog", lambda d: (t.dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: t.errors.append(str(e)))
    page.on("request", lambda r: t.requests.append(r.url))
    yield t
    context.close()
