"""`engram serve --workers 2`: two processes serve one store, and each sees the other's writes."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx

from engram.interfaces.rest.background import free_port
from tests.interfaces.conftest import cli_user_key, start_serve


def _workers(pid: int) -> list[int]:
    """The worker processes uvicorn spawned under ``pid`` (not multiprocessing's resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if parent == pid and b"spawn_main" in command:
                found.append(int(entry.name))
    return found


def test_two_worker_processes_serve_one_store(tmp_path):
    env = dict(os.environ, ENGRAM_HOME=str(tmp_path), ENGRAM_RERANK="false")
    headers = {"Authorization": f"Bearer {cli_user_key(env, 'sarah')}"}
    port = free_port()
    server = start_serve(env, port, "--workers", "2")
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60  # /healthz answers once one worker is up; wait for the other
        while len(_workers(server.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(_workers(server.pid)) >= 2, "uvicorn did not start two worker processes"
        with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
            for i in range(6):  # new connections spread over the processes; every write is seen at once
                text = f"turn {i}: the Zigbee sensor number {i} dropped"
                assert (
                    http.post("/v1/turns", json={"text": text}, headers={"Connection": "close"}).status_code
                    == 201
                )
                hits = http.post(
                    "/v1/recall", json={"query": text, "k": 1}, headers={"Connection": "close"}
                ).json()
                assert hits["hits"][0]["memory"]["text"] == text
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
