"""`engram serve`, `engram keys` and `engram mcp-config` as real processes."""

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time

import httpx

from engram.interfaces.rest.background import free_port
from tests.interfaces.conftest import cli_user_key


def test_serve_prints_admin_key_once_and_serves(tmp_path):
    env = dict(os.environ, ENGRAM_HOME=str(tmp_path))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # Lines are read on a thread, so a silent server fails the test at the deadline instead of
        # hanging it in readline().
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
        admin_key = None
        deadline = time.time() + 60
        while admin_key is None and time.time() < deadline:
            try:
                line = lines.get(timeout=max(0.01, deadline - time.time()))
            except queue.Empty:
                break
            match = re.search(r"admin key.*: (egk_\S+)", line)
            admin_key = match.group(1) if match else None
        assert admin_key, "no admin key printed"
        url = f"http://127.0.0.1:{port}"
        # Issue 24: the banner names every surface with its URL (the inspector was never mentioned).
        banner = ""
        while "/mcp" not in banner and time.time() < deadline:
            banner += lines.get(timeout=max(0.01, deadline - time.time()))
        for surface in ("/inspector", "/docs", "/mcp", "/v1"):
            assert f"{url}{surface}" in banner, banner
        while time.time() < deadline:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        admin = {"Authorization": f"Bearer {admin_key}"}
        key = httpx.post(f"{url}/v1/keys", json={"user_id": "sarah"}, headers=admin).json()["key"]
        turn = httpx.post(
            f"{url}/v1/turns",
            json={"text": "hello from the real server"},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert turn.status_code == 201
        assert httpx.get(f"{url}/docs").status_code == 200
    finally:
        proc.terminate()
        proc.wait(20)
        proc.stdout.close()
    # a second start finds the admin key already there and prints none
    listed = subprocess.run(
        [sys.executable, "-m", "engram", "keys", "list", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    keys = json.loads(listed.stdout)
    assert [k["user_id"] for k in keys] == [None, "sarah"]


def test_keys_cli_create_and_revoke(tmp_path):
    env = dict(os.environ, ENGRAM_HOME=str(tmp_path))

    def engram(*args):
        return subprocess.run(
            [sys.executable, "-m", "engram", *args], env=env, capture_output=True, text=True, check=True
        )

    created = engram("keys", "create", "--user", "bob", "--label", "laptop")
    key = created.stdout.strip()  # the key alone on stdout; its id on stderr
    key_id = re.search(r"id (key_\S+)", created.stderr).group(1)
    records = json.loads(engram("keys", "list", "--user", "bob", "--json").stdout)
    assert records[0]["label"] == "laptop" and key not in json.dumps(records)
    engram("keys", "revoke", key_id)
    assert json.loads(engram("keys", "list", "--json").stdout)[0]["revoked_at"] is not None
    listed = engram("keys", "list").stdout.split()  # one key a line: user, created, state, label, id
    assert listed[0] == "bob" and listed[3:] == ["revoked", listed[4], "laptop", key_id]


def test_mcp_config_is_pasteable_json(tmp_path):
    env = dict(os.environ, ENGRAM_HOME=str(tmp_path))
    key = cli_user_key(env, "sarah")
    out = subprocess.run(
        [sys.executable, "-m", "engram", "mcp-config", "--user", "sarah", "--key", key],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "MCP config for user sarah" in out
    blocks = [json.loads(b) for b in re.findall(r"^\{.*?^\}", out, re.S | re.M)]
    stdio, http = blocks[0]["mcpServers"]["engram"], blocks[1]["mcpServers"]["engram"]
    # ENGRAM_HOME is set, so the store is not the default one: the config names it
    store = f"sqlite:///{(tmp_path / 'engram.db').resolve()}"
    assert stdio["args"] == ["mcp", "--store", store] and stdio["env"] == {"ENGRAM_API_KEY": key}
    assert http["url"] == "http://127.0.0.1:8765/mcp" and http["headers"]["Authorization"] == f"Bearer {key}"
    assert "Application Support/Claude" in out and "%APPDATA%" in out and ".cursor/mcp.json" in out
    # a service on another port (ENGRAM_PORT, as `engram serve` reads it) is the one the config names
    moved = subprocess.run(
        [sys.executable, "-m", "engram", "mcp-config", "--key", key],
        env=env | {"ENGRAM_PORT": "8931"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert '"url": "http://127.0.0.1:8931/mcp"' in moved and "127.0.0.1:8765" not in moved


def test_mcp_config_takes_the_user_from_the_key(tmp_path):
    """Issue 24: `mcp-config --user sarah --key <marco's key>` printed a config titled for Sarah that
    opens Marco's memory. The key decides: its user titles the config, a --user that is not the key's
    is refused with a clear error, and so is a key the store does not hold (or the admin key)."""
    env = dict(os.environ, ENGRAM_HOME=str(tmp_path))
    marco = cli_user_key(env, "marco")

    def config(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "engram", "mcp-config", *args], env=env, capture_output=True, text=True
        )

    mismatch = config("--user", "sarah", "--key", marco)
    assert mismatch.returncode == 1 and "mcpServers" not in mismatch.stdout
    assert "--user sarah does not match --key, which opens marco's memory" in mismatch.stdout
    derived = config("--key", marco)
    assert derived.returncode == 0 and "MCP config for user marco" in derived.stdout
    unknown = config("--key", "egk_" + "x" * 43)
    assert unknown.returncode == 1 and "not a live key" in unknown.stdout
    placeholder = config()  # no key yet: a template, with the placeholder where the key goes
    assert placeholder.returncode == 0 and "<API_KEY>" in placeholder.stdout


def test_serve_logs_each_request(tmp_path):
    """Issue 24: `engram serve` logged no requests (uvicorn ran at "warning"): a line per request at the
    default --log-level info (issue 25: the route template, status, duration and the request id that
    X-Request-ID returns; JSON with --log-format json), none at --log-level warning."""

    def served(*args: str, home: str = "") -> str:
        env = dict(os.environ, ENGRAM_HOME=str(tmp_path / home))
        port = free_port()
        log = tmp_path / f"serve-{port}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "engram", "serve", "--port", str(port), *args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            try:
                deadline = time.time() + 60
                while time.time() < deadline and proc.poll() is None:
                    try:
                        if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                            break
                    except httpx.TransportError:
                        time.sleep(0.1)
                refused = httpx.get(
                    f"http://127.0.0.1:{port}/v1/memories/m-1", headers={"X-Request-ID": "r-7"}
                )
                assert refused.status_code == 401 and refused.headers["X-Request-ID"] == "r-7"
            finally:
                proc.terminate()
                proc.wait(20)
        return log.read_text()

    logged = served()
    assert "GET /healthz 200" in logged, logged
    assert re.search(r"GET /v1/memories/\{memory_id\} 401 [\d.]+ ms request_id=r-7\n", logged), logged
    assert "m-1" not in logged and "HTTP/1.1" not in logged  # no raw path, no second (uvicorn) line
    # JSON: every line is JSON (the start lines too: the admin key, where it listens), for a log pipeline;
    # a first start writes no generated admin key into them (a diff review)
    first = [
        json.loads(line) for line in served("--log-format", "json", home="json-home").splitlines() if line
    ]
    told = " ".join(line.get("message", "") for line in first if line["logger"] == "engram.serve")
    assert "no admin key: set ENGRAM_ADMIN_KEY" in told and "egk_" not in json.dumps(first)
    as_json = [json.loads(line) for line in served("--log-format", "json").splitlines() if line.strip()]
    said = " ".join(line.get("message", "") for line in as_json if line["logger"] == "engram.serve")
    assert "admin key: the one this store has" in said and "Engram on http://127.0.0.1:" in said
    assert "[bold]" not in said
    requests = [line for line in as_json if line.get("event") == "request"]
    assert {
        "method": "GET",
        "route": "/v1/memories/{memory_id}",
        "status": 401,
        "request_id": "r-7",
    }.items() <= (requests[-1].items()), requests
    assert requests[-1]["duration_ms"] >= 0 and any(
        "Uvicorn running" in line.get("message", "") for line in as_json
    )
    quiet = served("--log-level", "warning")
    assert "GET /healthz" not in quiet and "Engram on" in quiet
