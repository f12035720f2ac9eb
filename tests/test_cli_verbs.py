"""`engram recall` with its filters and `engram record-outcome`, in process, on a store the test filled."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from tests.test_cli import run


def test_recall_filters_and_record_outcome(tmp_path, make_engram):
    eng = make_engram("engram.db")  # the store ENGRAM_HOME names
    sarah = eng.for_user("sarah")
    t0 = datetime(2025, 3, 1, tzinfo=UTC)
    web = sarah.remember_turn("the hub lost wifi", at=t0, session_id="s1", metadata={"ch": "web", "n": 5})
    app = sarah.remember_turn("the hub lost wifi again", at=t0 + timedelta(days=2), session_id="s2")
    playbook = sarah.write("", memory_type="procedural", name="Restart the hub", trigger_text="hub offline")
    eng.close()

    def recall(*options: str) -> list[str]:
        out = run("recall", "hub lost wifi", "--user", "sarah", "--json", *options, env_home=tmp_path).stdout
        return [h["memory"]["id"] for h in json.loads(out)]

    assert recall("--session-id", "s1", "--meta", "ch=web", "--meta", "n=5") == [web.id]
    assert recall("--meta", 'n="5"', "--from", "2025-03-02T00:00:00Z", "--to", "2025-04-01") == []
    assert recall("--from", "2025-03-02T00:00:00Z", "--to", "2025-04-01") == [app.id]
    bad = run("recall", "wifi", "--user", "sarah", "--from", "yesterday", env_home=tmp_path, check=False)
    assert bad.returncode == 1 and "--from must be an ISO 8601" in bad.stdout

    out = run("record-outcome", playbook.id, "--user", "sarah", "--failure", "--json", env_home=tmp_path)
    assert json.loads(out.stdout)["failure_count"] == 1
    other = run("record-outcome", playbook.id, "--user", "bob", "--success", env_home=tmp_path, check=False)
    assert other.returncode == 1 and "not found" in other.stdout
    unsaid = run("record-outcome", playbook.id, "--user", "sarah", env_home=tmp_path, check=False)
    assert unsaid.returncode == 1 and "--success or --failure" in unsaid.stdout  # click named --success only
