"""Issue 24: the README's first commands and its curl quickstart, run as written on a fresh home, so they
cannot rot. The blocks are read from README.md at test time; only the port is changed (a free one)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from engram.interfaces.rest.background import free_port
from tests.interfaces.conftest import start_serve

README = Path(__file__).resolve().parents[2] / "README.md"
DEFAULT = "127.0.0.1:8765"


def bash_blocks(after: str = "") -> list[str]:
    """The ```bash blocks of the README after the first line that starts with ``after``."""
    text = README.read_text(encoding="utf-8")
    if after:
        text = text[text.index("\n" + after) :]
    return re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M)


def shell_env(home: Path) -> dict[str, str]:
    """A fresh ENGRAM_HOME, and `engram` and `python3` on PATH as this interpreter runs them."""
    bin_dir = home / "bin"
    bin_dir.mkdir(parents=True)
    for name, command in (("engram", f'"{sys.executable}" -m engram'), ("python3", f'"{sys.executable}"')):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    return dict(env, ENGRAM_HOME=str(home / "home"), PATH=f"{bin_dir}{os.pathsep}{env['PATH']}")


def run_bash(script: str, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(
        ["bash", "-c", "set -eu\n" + script], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_readme_quickstart_runs_as_written(tmp_path):
    env = shell_env(tmp_path)
    # The README's first line: install (done here), then the demo, into the store `engram serve` uses.
    first = bash_blocks()[0].splitlines()[0]
    assert first.startswith("pip install -e . && ")
    demo = first.split("&&", 1)[1].split("#", 1)[0].strip()
    assert demo == "engram demo"
    out = run_bash(demo, env, timeout=180)
    demo_key = re.search(r"a key for sarah .*: (egk_\S+)", out).group(1)
    port = free_port()
    server = start_serve(env, port)  # "`engram serve` then runs the service on that store"
    try:
        url = f"http://127.0.0.1:{port}"
        me = httpx.get(f"{url}/v1/me", headers={"Authorization": f"Bearer {demo_key}"})
        # the demo's key opens its data in the served store
        assert me.json() == {"user_id": "sarah", "scope": "write"}
        demo_facts = httpx.get(f"{url}/v1/memories", headers={"Authorization": f"Bearer {demo_key}"})
        assert any("Edinburgh" in m["text"] for m in demo_facts.json()["data"])
        assert httpx.get(url, follow_redirects=True).url.path.startswith("/inspector")

        curl = bash_blocks(after="## Quickstart over HTTP")[0]
        assert DEFAULT in curl and "supersedes_id" in curl
        out = run_bash(curl.replace(DEFAULT, f"127.0.0.1:{port}"), env, timeout=60)
    finally:
        server.terminate()
        server.wait(30)
    answers = [json.loads(line) for line in out.splitlines() if line.strip()]
    turn, recall, new, listed, history = answers
    assert turn["memory_type"] == "episodic" and "E-4021" in turn["text"] and turn["session_id"] == "chat-1"
    assert "E-4021" in recall["hits"][0]["text"] and set(recall["hits"][0]) >= {"id", "confidence"}
    old = new["supersedes"]
    assert new["text"] == "Alex lives in Edinburgh" and old
    live = [m["id"] for m in listed["data"]]
    assert listed["data"][0]["id"] == new["id"] and old not in live
    assert [m["text"] for m in history["data"]] == ["Alex lives in Bristol", "Alex lives in Edinburgh"]
