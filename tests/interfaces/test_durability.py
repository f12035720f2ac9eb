"""kill -9 of `engram serve` under concurrent writes: every acknowledged write is there after restart."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest

from engram import Engram
from engram.interfaces.rest.background import free_port
from tests.interfaces.conftest import cli_user_key, start_serve

WRITERS = 8
LOAD_SECONDS = 4.0


def _store_env(kind: str, tmp_path, request) -> dict[str, str]:
    env = dict(os.environ, ENGRAM_HOME=str(tmp_path), ENGRAM_RERANK="false")
    if kind == "postgres":
        admin, runtime = request.getfixturevalue("pg_urls")
        env.update(ENGRAM_STORE=_as_url(runtime), ENGRAM_PG_ADMIN_URL=_as_url(admin))
    else:
        env["ENGRAM_STORE"] = f"sqlite:///{tmp_path}/engram.db"
    return env


def _as_url(conninfo: str) -> str:
    """postgresql:// URL of a libpq keyword string (the fixtures' form; Engram takes URLs)."""
    from urllib.parse import quote

    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(conninfo)
    return f"postgresql://{parts['user']}@/{parts['dbname']}?host={quote(str(parts['host']), safe='')}"


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_every_acknowledged_write_survives_kill_9(kind, tmp_path, request):
    env = _store_env(kind, tmp_path, request)
    key = cli_user_key(env, "sarah")
    port = free_port()
    server = start_serve(env, port)
    acknowledged: list[tuple[str, str]] = []  # (id, text) of every 201
    lock = threading.Lock()
    stop = threading.Event()

    def write(worker: int) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=10) as http:
            n = 0
            while not stop.is_set():
                n += 1
                text = f"writer {worker} turn {n}"
                path, body = ("/v1/memories", {"text": text}) if n % 4 == 0 else ("/v1/turns", {"text": text})
                try:
                    response = http.post(path, json=body)
                except httpx.TransportError:
                    continue  # the server died mid-request: not acknowledged, nothing promised
                if response.status_code == 201:
                    with lock:
                        acknowledged.append((response.json()["id"], text))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    try:
        time.sleep(LOAD_SECONDS)
        server.send_signal(signal.SIGKILL)  # no shutdown hook, no flush: a power cut for the process
        server.wait(10)
    finally:
        stop.set()
        for t in threads:
            t.join()
        if server.poll() is None:
            server.kill()
    assert len(acknowledged) > WRITERS  # the load really ran

    url = env["ENGRAM_STORE"]
    with Engram.open(
        url, rerank=False, late_interaction=False, pg_admin_url=env.get("ENGRAM_PG_ADMIN_URL")
    ) as eng:
        mem = eng.for_user("sarah")
        ids = [memory_id for memory_id, _ in acknowledged]
        stored = {(m.id, m.text) for m in eng.store.fetch("sarah", ids, include_catalog=False)}
        missing = [a for a in acknowledged if a not in stored]
        assert missing == [], f"{len(missing)} of {len(acknowledged)} acknowledged writes lost"
        # and the restarted store takes writes again
        assert mem.remember_turn("after the crash").text == "after the crash"
