"""`engram keys create --scope --expires-in` and `engram users export/delete` in process (CliRunner)."""

import json
import re

from engram.auth import ApiKeys
from engram.storage.sqlite import SQLiteStore
from tests.storage.leftovers import sqlite_leftovers
from tests.test_cli import run

MARK = "Quillfish"


def test_keys_carry_a_scope_and_an_expiry(tmp_path):
    made = run(
        "keys", "create", "--user", "sarah", "--scope", "read", "--expires-in", "30d", env_home=tmp_path
    )
    assert re.search(r"\(read, expires \d{4}-\d\d-\d\d", made.stderr), made.stderr
    plain = run("keys", "create", "--user", "sarah", "-q", env_home=tmp_path)
    listed = json.loads(run("keys", "list", "--json", env_home=tmp_path).stdout)
    assert [(k["scope"], k["expires_at"] is not None) for k in listed] == [("read", True), ("write", False)]
    lines = run("keys", "list", env_home=tmp_path).stdout.splitlines()
    assert "live read-only expires" in lines[0] and "live read-write no expiry" in lines[1]
    assert len({line.rindex(" key_") for line in lines}) == 1  # columns line up, the id last
    store = SQLiteStore(tmp_path / "engram.db")
    try:
        keys = ApiKeys(store)
        assert keys.authenticate(made.stdout.strip()).may_write is False
        assert keys.authenticate(plain.stdout.strip()).may_write is True
    finally:
        store.close()
    for args, message in [
        (["--scope", "owner"], "scope is one of"),
        (["--scope", "admin"], "admin key"),
        (["--expires-in", "30"], "whole number and a unit"),
        (["--expires-in", "5s"], "between 60 s"),
    ]:
        refused = run("keys", "create", "--user", "sarah", *args, env_home=tmp_path, check=False)
        assert refused.returncode == 1 and message in refused.stdout, (args, refused.stdout)
    assert len(json.loads(run("keys", "list", "--json", env_home=tmp_path).stdout)) == 2


def test_users_export_then_delete_leaves_nothing_of_the_user(tmp_path):
    run("write", "--user", "sarah", f"Sarah keeps a {MARK}", env_home=tmp_path)
    run("remember-turn", "--user", "sarah", f"my {MARK} is hungry", env_home=tmp_path)
    run("write", "--user", "bob", "Bob keeps a cat", env_home=tmp_path)
    run("keys", "create", "--user", "sarah", env_home=tmp_path)
    out = tmp_path / "sarah.jsonl"
    run("users", "export", "sarah", "--file", str(out), env_home=tmp_path)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[-1]["engram_export_end"]["counts"] == {"semantic": 1, "episodic": 1, "keys": 1}
    unconfirmed = run("users", "delete", "sarah", env_home=tmp_path, check=False)
    assert unconfirmed.returncode == 1 and "--yes" in unconfirmed.stdout
    assert "sarah" in run("users", "export", "sarah", env_home=tmp_path).stdout  # nothing deleted
    erased = run("users", "delete", "sarah", "--yes", "--json", env_home=tmp_path)
    deleted = json.loads(erased.stdout)
    assert deleted["deleted"]["memories"] == 2 and deleted["deleted"]["keys"] == 1
    # the audit record, which went to a log nobody had set up in a CLI process (an operator's walk)
    assert re.search(
        r"audit: deleted user 'sarah' at .*, asked by the CLI \(.*\): .*2 memories", erased.stderr
    )
    assert MARK not in erased.stderr  # no content
    assert sqlite_leftovers(tmp_path / "engram.db", ["sarah", MARK], "sarah", words=[MARK]) == {}
    assert "nothing was left" in run("users", "delete", "sarah", "--yes", env_home=tmp_path).stdout
    gone = run("users", "export", "sarah", "--file", str(out), env_home=tmp_path, check=False)
    assert gone.returncode == 1 and "not found" in gone.stdout
    assert MARK in out.read_text()  # the earlier export is left as it was, no partial file beside it
    assert sorted(p.name for p in tmp_path.glob("sarah.jsonl*")) == ["sarah.jsonl"]
    assert "Bob keeps a cat" in run("list", "--user", "bob", env_home=tmp_path).stdout
