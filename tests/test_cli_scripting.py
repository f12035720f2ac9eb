"""Issue 24 #2: the `engram` command scripts well: --version, no wrapping off a terminal, a quiet key,
a read-only recall, playbooks without a placeholder text, a port check before serving, and clear
answers when a key is revoked twice."""

import json
import os
import re
import socket
import subprocess

import engram
from tests.test_cli import ENGRAM, run


def test_version_is_printed_alone():
    proc = subprocess.run([*ENGRAM, "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"engram {engram.__version__}\n"


def test_recall_lines_are_not_wrapped_off_a_terminal(tmp_path):
    """Piped (CliRunner's stdout is no terminal), a long hit is one line with its id at the end: rich
    wrapped at 80 columns and left the id alone on the next line, breaking grep and awk."""
    text = "Sarah's router is a FRITZ!Box 7590 " + "on the landing shelf beside the fibre socket " * 4
    run("write", text, "--user", "sarah", env_home=tmp_path)
    hits = json.loads(run("recall", "fritzbox router", "--user", "sarah", "--json", env_home=tmp_path).stdout)
    out = run("recall", "fritzbox router", "--user", "sarah", "--explain", env_home=tmp_path).stdout
    line = next(line for line in out.splitlines() if "FRITZ!Box" in line)
    assert text.strip() in line and line.split()[-1] == hits[0]["memory"]["id"], out
    assert len(out.splitlines()) == 2  # the hit and its explain, each whole


def test_recall_piped_to_cat_in_a_shell_is_not_wrapped(tmp_path):
    """The issue's own check, as a real process in a real pipe: `engram recall ... | cat`."""
    text = "Marco's hub shows error E-4012 " + "after the firmware update of the living room lights " * 3
    run("write", text, "--user", "marco", env_home=tmp_path)
    script = f'{" ".join(ENGRAM)} recall "hub error E-4012" --user marco | cat'
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"ENGRAM_HOME": str(tmp_path)}
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    [line] = proc.stdout.splitlines()
    assert text.strip() in line and line.split()[-1].startswith("sem_"), proc.stdout


def test_keys_create_quiet_prints_the_key_alone(tmp_path):
    quiet = run("keys", "create", "--user", "u", "--quiet", env_home=tmp_path)
    assert re.fullmatch(r"egk_\S+\n", quiet.stdout) and quiet.stderr == ""
    loud = run("keys", "create", "--user", "u", env_home=tmp_path)  # the key on stdout, its id on stderr
    assert re.fullmatch(r"egk_\S+\n", loud.stdout) and "id key_" in loud.stderr
    record = json.loads(run("keys", "create", "--user", "u", "--json", env_home=tmp_path).stdout)
    assert record["key"].startswith("egk_") and record["user_id"] == "u" and record["id"].startswith("key_")
    # times as REST and the memories' JSON write them (str() gave "2026-12-01 21:11:07.5+00:00")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", record["created_at"]), record
    listed = json.loads(run("keys", "list", "--json", env_home=tmp_path).stdout)
    assert record["created_at"] in [key["created_at"] for key in listed]


def test_keys_create_quiet_in_a_shell_substitution(tmp_path):
    """`KEY=$(engram keys create --user u --quiet)` holds exactly the key, as a real process in a shell."""
    script = f'KEY=$({" ".join(ENGRAM)} keys create --user u --quiet) && printf "<%s>" "$KEY"'
    env = dict(os.environ, ENGRAM_HOME=str(tmp_path))
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"<egk_[A-Za-z0-9_-]+>", proc.stdout), proc.stdout


def test_recall_records_no_use_unless_asked(tmp_path):
    """A recall from the CLI is a look, as in the inspector: use counts weigh in the ranking, so looking
    must not change them; --record-use counts the returned facts as an agent's recall does."""
    fact = json.loads(
        run("write", "Sarah drives a green Skoda", "-u", "sarah", "--json", env_home=tmp_path).stdout
    )

    def use_count() -> int:
        shown = run("get", fact["id"], "--user", "sarah", "--json", env_home=tmp_path).stdout
        return int(json.loads(shown)["use_count"])

    run("recall", "which car does Sarah drive", "--user", "sarah", env_home=tmp_path)
    run("recall", "which car does Sarah drive", "--user", "sarah", "--json", env_home=tmp_path)
    assert use_count() == 0
    run("recall", "which car does Sarah drive", "--user", "sarah", "--record-use", env_home=tmp_path)
    assert use_count() == 1


def test_playbook_write_needs_no_placeholder_text(tmp_path):
    args = ["--type", "procedural", "--name", "reset hub", "--trigger", "hub offline", "--step", "unplug"]
    row = json.loads(
        run("write", "--user", "sarah", *args, "--step", "wait 10 s", "--json", env_home=tmp_path).stdout
    )
    assert row["memory_type"] == "procedural" and [s["instruction"] for s in row["steps"]] == [
        "unplug",
        "wait 10 s",
    ]
    empty = run("write", "--user", "sarah", env_home=tmp_path, check=False)  # a fact still needs its text
    assert empty.returncode == 1 and "error:" in empty.stdout


def test_revoking_a_revoked_key_says_so(tmp_path):
    key_id = json.loads(run("keys", "create", "--user", "sarah", "--json", env_home=tmp_path).stdout)["id"]
    run("keys", "revoke", key_id, env_home=tmp_path)
    again = run("keys", "revoke", key_id, env_home=tmp_path, check=False)
    assert again.returncode == 1 and f"API key {key_id!r} is already revoked" in again.stdout
    assert "not found" not in again.stdout


def test_serve_on_a_busy_port_fails_before_its_banner(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run("serve", "--port", str(port), env_home=tmp_path, check=False)
    assert proc.returncode == 1 and f"cannot listen on 127.0.0.1:{port}: already in use" in proc.stdout
    assert "Engram on" not in proc.stdout and "admin key" not in proc.stdout
    assert not (tmp_path / "engram.db").exists()  # nothing created either


def test_serve_refuses_an_unknown_log_level(tmp_path):
    proc = run("serve", "--log-level", "loud", env_home=tmp_path, check=False)
    assert proc.returncode == 2 and not (tmp_path / "engram.db").exists()


def test_one_human_format_and_json_on_every_data_command(tmp_path):
    """`list`, `get`, `write` dumped every null field as JSON while `recall` printed lines: now a list is
    one memory a line with its id last (as recall's hits), one memory is `field  value` lines without
    empty fields, and --json gives the JSON on each."""
    fact = run("write", "Sarah drives a green Skoda", "-u", "sarah", env_home=tmp_path).stdout
    fields = dict(line.split(None, 1) for line in fact.splitlines())
    assert fields["memory_type"] == "semantic" and fields["text"] == "Sarah drives a green Skoda"
    assert "superseded_by" not in fields and "null" not in fact and "None" not in fact
    newer = json.loads(
        run(
            "write",
            "Sarah drives a red Fiat",
            "-u",
            "sarah",
            "--supersedes",
            fields["id"],
            "--json",
            env_home=tmp_path,
        ).stdout
    )
    assert newer["supersedes"] == fields["id"] and newer["valid_to"] is None  # JSON keeps every field
    listed = run("list", "-u", "sarah", "--include-superseded", env_home=tmp_path).stdout.splitlines()
    assert [line.split()[-1] for line in listed] == [newer["id"], fields["id"]]
    assert "(superseded)" in listed[1] and listed[0].split()[0] == "semantic"
    history = run("history", fields["id"], "-u", "sarah", env_home=tmp_path).stdout.splitlines()
    assert [line.split()[-1] for line in history] == [fields["id"], newer["id"]]
    for args in (
        ["list", "-u", "sarah"],
        ["history", fields["id"], "-u", "sarah"],
        ["get", newer["id"], "-u", "sarah"],
    ):
        assert json.loads(run(*args, "--json", env_home=tmp_path).stdout)
    assert json.loads(run("info", "--json", env_home=tmp_path).stdout)["counts"]["semantic"] == 2
    assert "counts.semantic" in run("info", env_home=tmp_path).stdout
    item = json.loads(
        run(
            "catalog", "add", "Hub v2 has Zigbee radios", "--title", "Hub", "--json", env_home=tmp_path
        ).stdout
    )
    assert run("catalog", "list", env_home=tmp_path).stdout.split()[-1] == item["id"]
    assert run("catalog", "get", item["id"], env_home=tmp_path).stdout.startswith(
        f"id           {item['id']}\n"
    )
    gone = run("forget", newer["id"], "-u", "sarah", env_home=tmp_path).stdout
    assert gone == f"forgot semantic {newer['id']}\n"
    tombstone = json.loads(run("catalog", "forget", item["id"], "--json", env_home=tmp_path).stdout)
    assert tombstone["id"] == item["id"] and "forgotten_at" in tombstone
    assert (
        run("list", "-u", "nobody", "-t", "procedural", env_home=tmp_path).stdout
        == "  (no procedural memories)\n"
    )
    doc = tmp_path / "bob.json"
    doc.write_text(json.dumps({"user_id": "bob", "semantic": [{"text": "Bob lives in York"}]}))
    assert json.loads(run("import", str(doc), "--json", env_home=tmp_path).stdout)["semantic"] == 1
