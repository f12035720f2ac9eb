"""The `engram` command, run as a real subprocess."""

import json
import subprocess
import sys
from pathlib import Path

ENGRAM = [sys.executable, "-m", "engram"]


def run(*args, env_home, check=True):
    import os

    env = dict(os.environ, ENGRAM_HOME=str(env_home))
    proc = subprocess.run([*ENGRAM, *args], capture_output=True, text=True, env=env, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc


def test_demo_runs_and_explains(tmp_path):
    out = run("demo", env_home=tmp_path).stdout
    assert "loaded demo_sarah.json" in out and "rrf=" in out and "decay=" in out
    assert "(superseded)" in out  # the include_superseded recall shows the old fact
    assert (tmp_path / "demo.db").is_file()


def test_import_recall_forget_round_trip(tmp_path):
    doc = {"user_id": "sarah", "semantic": [{"text": "Sarah's router is a FRITZ!Box 7590"}]}
    path = tmp_path / "sarah.json"
    path.write_text(json.dumps(doc))
    assert "imported 1 semantic" in run("import", str(path), env_home=tmp_path).stdout
    hits = json.loads(run("recall", "fritzbox 7590", "--user", "sarah", "--json", env_home=tmp_path).stdout)
    assert hits[0]["memory"]["text"] == "Sarah's router is a FRITZ!Box 7590" and "rrf" in hits[0]["explain"]
    assert json.loads(run("recall", "fritzbox", "--user", "bob", "--json", env_home=tmp_path).stdout) == []
    memory_id = hits[0]["memory"]["id"]
    denied = run("forget", memory_id, "--user", "bob", env_home=tmp_path, check=False)
    assert denied.returncode == 1 and "not found" in denied.stdout
    run("forget", memory_id, "--user", "sarah", env_home=tmp_path)
    assert json.loads(run("recall", "fritzbox", "--user", "sarah", "--json", env_home=tmp_path).stdout) == []


def test_bad_import_file_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"user_id": "sarah", "episodic": [{"text": "ok"}, {"text": ""}]}')
    proc = run("import", str(path), env_home=tmp_path, check=False)
    assert proc.returncode == 1 and "episodic[1].text" in proc.stdout
    path.write_text("{not json")
    proc = run("import", str(path), env_home=tmp_path, check=False)
    assert proc.returncode == 1 and "not valid JSON" in proc.stdout


def test_every_command_has_help():
    out = subprocess.run([*ENGRAM, "--help"], capture_output=True, text=True, check=True).stdout
    for command in (
        "demo",
        "import",
        "recall",
        "remember",
        "write",
        "get",
        "history",
        "forget",
        "list",
        "catalog",
    ):
        assert command in out
    assert Path(sys.executable).exists()
