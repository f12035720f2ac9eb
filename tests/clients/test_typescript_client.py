"""The TypeScript client (clients/typescript) against a live `engram serve`: its node test suite
(test/client.test.ts: every verb, the errors, isolation between keys) run by node's test runner, its
generated types checked against the OpenAPI document this server serves, and the quickstart of
docs/integrations/typescript.md run as written, importing the package by its name.

`npm ci` runs only when package-lock.json changed since the last install (a stamp in node_modules), so
the test costs a compile and the node run after the first time."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from engram.interfaces.rest.background import free_port
from tests.interfaces.conftest import cli_user_key, start_serve

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"
DOCS = ROOT / "docs" / "integrations" / "typescript.md"
STAMP = PACKAGE / "node_modules" / ".engram-package-lock.sha256"
ADMIN_KEY = "adm_" + hashlib.sha256(b"the typescript client's test admin").hexdigest()


def npm(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    npm_path = shutil.which("npm")
    assert npm_path, "node and npm are needed (CI installs them: .ci/run)"
    done = subprocess.run(
        [npm_path, *args], cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"npm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def installed() -> None:
    """node_modules as package-lock.json says (npm ci), unless it already is."""
    lock = hashlib.sha256((PACKAGE / "package-lock.json").read_bytes()).hexdigest()
    if not (STAMP.exists() and STAMP.read_text() == lock):
        npm("ci", "--no-audit", "--no-fund", "--prefer-offline")
        STAMP.write_text(lock)


def test_the_typescript_client_against_a_live_server(tmp_path: Path) -> None:
    def built() -> None:
        installed()
        npm("run", "lint")  # prettier --check, as ruff format --check for the Python
        npm("run", "build")

    # The package's install, lint and build (node) run while the keys are made and the server starts
    # (Python processes): neither needs the other, and on a fresh clone `npm ci` mostly waits on the
    # registry and the disk (~40 s of this test's ~65 s there), time the Python side can use.
    with ThreadPoolExecutor(1) as pool:
        building = pool.submit(built)
        env = dict(os.environ, ENGRAM_HOME=str(tmp_path), ENGRAM_ADMIN_KEY=ADMIN_KEY)
        sarah, bob = cli_user_key(env, "sarah"), cli_user_key(env, "bob")
        port = free_port()
        server = start_serve(env, port)
    url = f"http://127.0.0.1:{port}"
    try:
        building.result()  # its failure (lint, build) fails the test here, the server stopped below
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        radios = {"text": "The Lumio Hub v2 supports Zigbee 3.0 and Thread", "title": "Hub v2 radios"}
        catalog = httpx.post(f"{url}/v1/catalog", json=radios, headers=admin, timeout=30)
        assert catalog.status_code == 201, catalog.text

        # The committed types are what `npm run generate` makes of this server's document.
        (tmp_path / "openapi.json").write_bytes(httpx.get(f"{url}/openapi.json", timeout=30).content)
        generated = tmp_path / "openapi.ts"
        npm(
            "run",
            "generate",
            "--",
            str(generated),
            env=dict(os.environ, ENGRAM_OPENAPI=str(tmp_path / "openapi.json")),
        )
        assert generated.read_text() == (PACKAGE / "src" / "openapi.ts").read_text(), (
            "clients/typescript/src/openapi.ts is out of date: run `npm run generate` there against "
            "`engram serve` (see docs/integrations/typescript.md)"
        )

        node_env = dict(
            os.environ,
            ENGRAM_URL=url,
            ENGRAM_KEY_SARAH=sarah,
            ENGRAM_KEY_BOB=bob,
            ENGRAM_ADMIN_KEY=ADMIN_KEY,
            ENGRAM_CATALOG_ID=catalog.json()["id"],
        )
        node = shutil.which("node")
        assert node, "node is needed (CI installs it: .ci/run)"
        run = subprocess.run(
            [node, "--test", "--test-reporter=spec", "dist/test/client.test.js"],
            cwd=PACKAGE,
            env=node_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert "# fail 0" in run.stdout or "ℹ fail 0" in run.stdout, run.stdout
        assert "pass 0" not in run.stdout  # the suite ran tests

        (quickstart,) = re.findall(r"^```js\n(.*?)^```", DOCS.read_text(encoding="utf-8"), re.S | re.M)
        app = tmp_path / "my-agent"
        (app / "node_modules" / "@engram-memory").mkdir(parents=True)
        (app / "node_modules" / "@engram-memory" / "client").symlink_to(PACKAGE)  # as npm install links it
        (app / "package.json").write_text(json.dumps({"name": "my-agent", "type": "module"}))
        (app / "quickstart.js").write_text(quickstart)
        ran = subprocess.run(
            [node, "quickstart.js"],
            cwd=app,
            env=dict(os.environ, ENGRAM_URL=url, ENGRAM_KEY=sarah),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
        lines = ran.stdout.splitlines()
        assert lines[0] == "memory of sarah" and lines[-1].startswith("forgotten: sem_"), ran.stdout
        assert any(line.startswith("1 ") and line.endswith("Sarah lives in Edinburgh") for line in lines)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
