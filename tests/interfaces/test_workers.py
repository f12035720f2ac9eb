"""`engram serve --workers 2`: two processes serve one store, and each sees the other's writes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from engram.interfaces.rest.background import free_port


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
    created = subprocess.run(
        [sys.executable, "-m", "engram", "keys", "create", "--user", "sarah"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    key = re.search(r"(egk_\S+)", created).group(1)
    headers = {"Authorization": f"Bearer {key}"}
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "engram", "serve", "--port", str(port), "--workers", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200 and len(_workers(server.pid)) >= 2:
                    break
            except httpx.TransportError:
                pass
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
