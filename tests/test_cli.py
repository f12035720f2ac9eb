"""The `engram` command: in process through Typer's CliRunner (models load once per test session),
and as a real subprocess where the process itself is under test (the entry point, the stdio server)."""

import contextlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from engram.interfaces.cli import app

ENGRAM = [sys.executable, "-m", "engram"]


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def run(*args, env_home, check=True, cwd=None, env=None):
    """`engram ARGS` in this process with ENGRAM_HOME (and ``env``) set; a crash is re-raised (not taken
    for a clean exit 1) so a traceback fails the test."""
    with contextlib.chdir(cwd or os.getcwd()):
        result = CliRunner().invoke(app, list(args), env={"ENGRAM_HOME": str(env_home), **(env or {})})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    ran = Ran(result.exit_code, result.stdout, result.stderr)
    if check:
        assert ran.returncode == 0, ran.stderr + ran.stdout
    return ran


def test_demo_runs_and_explains(tmp_path):
    """Through the installed entry point (`python -m engram`), as a user runs it."""
    env = dict(os.environ, ENGRAM_HOME=str(tmp_path))
    proc = subprocess.run(
        [*ENGRAM, "demo", "--explain"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "loaded demo_sarah.json" in out and "rrf=" in out and "decay=" in out
    assert "(superseded)" in out  # the include_superseded recall shows the old fact
    assert (tmp_path / "engram.db").is_file()  # the store `engram serve` uses


def test_import_recall_forget_round_trip(tmp_path):
    doc = {"user_id": "sarah", "semantic": [{"text": "Sarah's router is a FRITZ!Box 7590"}]}
    path = tmp_path / "sarah.json"
    path.write_text(json.dumps(doc))
    assert "imported 1 semantic" in run("import", str(path), env_home=tmp_path).stdout
    hits = json.loads(run("recall", "fritzbox 7590", "--user", "sarah", "--json", env_home=tmp_path).stdout)
    assert hits[0]["memory"]["text"] == "Sarah's router is a FRITZ!Box 7590" and "rrf" in hits[0]["explain"]
    nobody = run("recall", "fritzbox", "--user", "bob", "--json", env_home=tmp_path)
    assert json.loads(nobody.stdout) == [] and "user 'bob' has no memories in this store" in nobody.stderr
    assert "has no memories" not in run("recall", "x", "--user", "sarah", env_home=tmp_path).stderr
    listed = run("list", "--user", "bob", env_home=tmp_path)  # as recall says it (an outside review)
    assert "no semantic memories" in listed.stdout and "user 'bob' has no memories" in listed.stderr
    assert "has no memories" not in run("list", "--user", "sarah", "-t", "episodic", env_home=tmp_path).stderr
    memory_id = hits[0]["memory"]["id"]
    denied = run("forget", memory_id, "--user", "bob", env_home=tmp_path, check=False)
    assert denied.returncode == 1 and "not found" in denied.stdout
    table = run("recall", "fritzbox 7590", "--user", "sarah", env_home=tmp_path).stdout
    assert "confidence=" in table and hits[0]["memory"]["created_at"][:10] in table  # its event date
    sure = run("recall", "fritzbox 7590", "--user", "sarah", "--min-confidence", "1", env_home=tmp_path)
    assert "nothing reaches confidence 1: probably nothing relevant is stored" in sure.stderr
    assert sure.stdout == ""  # each line of stdout ends with an id (an outside review's awk)
    run("forget", memory_id, "--user", "sarah", env_home=tmp_path)
    assert json.loads(run("recall", "fritzbox", "--user", "sarah", "--json", env_home=tmp_path).stdout) == []


def test_recall_prints_stored_text_as_it_is(tmp_path):
    """Stored text is never rich markup: "[/b]" made `engram recall` (and the demo, which prints hits the
    same way) crash with a MarkupError, other tags restyled the output; control characters are dropped."""
    text = "the hub says [/b] then [red]E-4012[/red] \x1b[2J after the update"
    run("remember-turn", text, "--user", "sarah", env_home=tmp_path)
    shown = run("recall", "hub E-4012 update", "--user", "sarah", "--explain", env_home=tmp_path).stdout
    assert "the hub says [/b] then [red]E-4012[/red] [2J after the update" in " ".join(shown.split())
    assert "\x1b" not in shown
    missing = run("forget", "[/b]", "--user", "sarah", env_home=tmp_path, check=False)  # quoted in the error
    assert missing.returncode == 1 and "[/b]" in missing.stdout


def test_bad_import_file_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"user_id": "sarah", "episodic": [{"text": "ok"}, {"text": ""}]}')
    proc = run("import", str(path), env_home=tmp_path, check=False)
    assert proc.returncode == 1 and "episodic[1].text" in proc.stdout
    path.write_text("{not json")
    proc = run("import", str(path), env_home=tmp_path, check=False)
    assert proc.returncode == 1 and "not valid JSON" in proc.stdout


def test_every_command_has_help():
    """Every command is registered and answers --help (in process: no model is loaded for help)."""
    import typer
    from typer.testing import CliRunner

    from engram.interfaces.cli import app

    group = typer.main.get_command(app)
    expected = {
        "demo", "import", "export", "recall", "remember-turn", "write", "get", "history", "forget", "list",
        "info", "reindex", "repair", "serve", "mcp", "mcp-config", "consolidate", "eval", "chat", "catalog",
        "keys", "remember",  # the old name of remember-turn, hidden
    }  # fmt: skip
    assert expected <= set(group.commands), expected - set(group.commands)  # type: ignore[attr-defined]
    runner = CliRunner()
    for command in sorted(expected):
        result = runner.invoke(app, [command, "--help"])
        assert result.exit_code == 0 and "Usage" in result.output, (command, result.output)


def test_help_lists_each_command_with_its_summary_and_cuts_no_option_name():
    """`engram --help` broke summaries where the docstrings' lines broke, and rich's option table cut
    option names at 80 columns ("--include-supe…" in `engram list --help`): plain help lists each
    command with its first paragraph, rewrapped, and every option whole."""
    import inspect

    import typer

    group = typer.main.get_command(app)
    shown = " ".join(CliRunner().invoke(app, ["--help"]).output.split())  # as read, not as wrapped
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        if command.hidden:
            continue
        summary = " ".join(inspect.cleandoc(command.help).split("\n\n", 1)[0].split())
        assert f" {name} {summary[:40]}" in shown, name
    listed = CliRunner().invoke(app, ["list", "--help"], env={"COLUMNS": "80"}).output
    assert "--include-superseded / --no-include-superseded" in listed and "…" not in listed


def test_remember_turn_and_its_old_name_store_turns(tmp_path):
    """`engram remember-turn` takes the facade's verb; `engram remember` (its old name, with the old
    --session) keeps working for existing scripts, hidden from --help (in process)."""
    from typer.testing import CliRunner

    from engram.interfaces.cli import app

    runner = CliRunner()
    store = ["--store", f"sqlite:///{tmp_path / 'turns.db'}"]
    new = runner.invoke(
        app,
        ["remember-turn", "we moved to Edinburgh", "--user", "sarah", "--session-id", "c1", "--json", *store],
    )
    assert new.exit_code == 0, new.output
    old = runner.invoke(
        app, ["remember", "yes, last week", "-u", "sarah", "--session", "c1", "--json", *store]
    )
    assert old.exit_code == 0, old.output
    first, second = json.loads(new.output), json.loads(old.output)
    assert first["memory_type"] == second["memory_type"] == "episodic"
    assert second["session_id"] == "c1" and second["context_id"] == first["id"]  # one session, both names
    listed = runner.invoke(app, ["list", "--user", "sarah", "--type", "episodic", "--json", *store])
    assert [m["text"] for m in json.loads(listed.output)] == ["yes, last week", "we moved to Edinburgh"]
    shown = runner.invoke(app, ["--help"]).output
    assert "\n  remember-turn " in shown and "\n  remember " not in shown  # the commands list
    assert "Old name of `remember-turn`" in runner.invoke(app, ["remember", "--help"]).output
    said = [
        "remember-turn",
        "we live in Bristol btw",
        "-u",
        "sarah",
        "--at",
        "2024-05-01T10:00:00Z",
        "--json",
    ]
    back = runner.invoke(app, [*said, *store])
    assert back.exit_code == 0 and json.loads(back.output)["timestamp"].startswith("2024-05-01T10:00:00")
    garbled = runner.invoke(app, ["remember-turn", "hi", "-u", "sarah", "--at", "last may", *store])
    assert garbled.exit_code != 0 and "--at must be an ISO 8601" in garbled.output


def test_demo_loads_into_the_store_serve_uses_once(tmp_path):
    """Issue 24: the demo wrote demo.db while `engram serve` served an empty engram.db. It loads into the
    store serve uses, prints a live key for sarah, suggests commands that reach its data without --store,
    and a second run writes nothing twice: it says the data is there and how to see it."""
    import shlex

    from engram.auth import ApiKeys
    from engram.storage.sqlite import SQLiteStore

    out = run("demo", env_home=tmp_path).stdout
    assert not (tmp_path / "demo.db").exists() and (tmp_path / "engram.db").is_file()
    assert "rrf=" not in out and "confidence=" in out and "demo --explain" in out  # the hits, compact
    key = re.search(r"a key for sarah .*: (egk_\S+)", out).group(1)
    assert "engram serve" in out and "http://127.0.0.1:8765/inspector" in out
    # the cross-tenant question says why nothing of sarah's can answer, and as the agent recalls it
    # (min_confidence 0.1) nothing does: marco's unrelated hits at 0.03 read as an answer (a newcomer)
    crossed = out.split("marco asks: where does sarah live?")[1].split("\n\n")[0]
    assert "never sarah's" in crossed and "Sarah lives" not in crossed and "epi_" not in crossed
    assert "nothing reaches confidence 0.1" in crossed
    tried = out.split("Try it yourself")[1]
    suggested = [shlex.split(line) for line in tried.splitlines() if line.startswith("  engram ")]
    assert suggested and not any("--store" in args for args in suggested)
    recall = next(args for args in suggested if args[1] == "recall")
    hits = run(*recall[1:], "--json", env_home=tmp_path).stdout
    assert json.loads(hits)[0]["memory"]["text"].startswith("Sarah lives in Edinburgh")
    for args in suggested:
        assert run(*args[1:], env_home=tmp_path).stdout.strip()
    marco = run("list", "--user", "marco", env_home=tmp_path)  # facts, and a word on the rest
    assert "semantic" in marco.stdout and "also has 2 episodic: --type to list them" in marco.stderr
    listed = run(
        "list", "--user", "sarah", "--type", "semantic", "--include-superseded", "--json", env_home=tmp_path
    )
    before = json.loads(listed.stdout)

    again = run("demo", env_home=tmp_path).stdout
    assert "already have memories in this store (sarah, marco)" in again and "loaded " not in again
    assert "engram list --user sarah" in again and "/inspector" in again
    listed = run(
        "list", "--user", "sarah", "--type", "semantic", "--include-superseded", "--json", env_home=tmp_path
    )
    assert json.loads(listed.stdout) == before  # nothing written twice
    store = SQLiteStore(tmp_path / "engram.db")
    try:
        principal = ApiKeys(store).resolve(key)
        assert principal is not None and principal.user_id == "sarah"
    finally:
        store.close()


def test_demo_into_a_store_of_its_own(tmp_path):
    """--store keeps the sample apart; the commands it suggests name that store."""
    store = f"sqlite:///{tmp_path / 'sample.db'}"
    out = run("demo", "--store", store, env_home=tmp_path).stdout
    assert "loaded demo_sarah.json" in out and f"engram serve --store {store}" in out
    assert not (tmp_path / "engram.db").exists()
    tried = out.split("Try it yourself")[1]
    suggested = [line.split() for line in tried.splitlines() if line.startswith("  engram ")]
    assert suggested and all(args[-2:] == ["--store", store] for args in suggested)
    again = run("demo", "--store", store, env_home=tmp_path).stdout  # nothing loaded twice: how to see it
    assert f"engram serve --store {store}, then" in again and "A fresh copy" not in again


def test_demo_refuses_a_store_that_holds_other_users(tmp_path):
    """An outside bug hunt: the demo wrote its catalog rows into a store of real users, where they
    joined every recall. It loads nothing there, and says where a demo goes instead."""
    store = f"sqlite:///{tmp_path / 'real.db'}"
    run("remember-turn", "my router is a FRITZ!Box", "--user", "alice", "--store", store, env_home=tmp_path)
    refused = run("demo", "--store", store, env_home=tmp_path, check=False)
    assert refused.returncode == 1 and "other users' memories (alice)" in refused.stdout
    assert "engram demo --store sqlite:///PATH/demo.db" in refused.stdout
    listed = run("catalog", "list", "--json", "--store", store, env_home=tmp_path)
    assert json.loads(listed.stdout) == []


def test_forgetting_a_catalog_row_as_a_user_names_the_command_that_does(tmp_path):
    refused = run("forget", "cat_AAAAAAAAAAAAAAAAAAAAAA", "--user", "alice", env_home=tmp_path, check=False)
    assert refused.returncode == 1 and "`engram catalog forget` removes it" in refused.stdout


def test_mcp_config_refuses_a_url_that_is_no_http_url(tmp_path):
    for bad in ("ftp://x y", "127.0.0.1:8765", "http://", "http://host with space:1"):
        refused = run("mcp-config", "--url", bad, env_home=tmp_path, check=False)
        assert refused.returncode == 1 and "--url must be an http(s) URL" in refused.stdout, bad
    assert (
        '"url": "https://mem.example/mcp"'
        in run("mcp-config", "--url", "https://mem.example/", env_home=tmp_path).stdout
    )


def test_store_urls_are_printed_without_their_password():
    """The demo prints its store and suggests commands: a password in the URL is never printed (the
    commands then leave --store out and say to set ENGRAM_STORE)."""
    from engram.interfaces.cli.urls import without_password

    assert without_password("postgresql://app:s3cret@db:5432/engram") == "postgresql://app:***@db:5432/engram"
    assert (
        without_password("opensearchs://admin:p%40ss@a:9200,b:9200")
        == "opensearchs://admin:***@a:9200,b:9200"
    )
    shown = without_password("postgresql://app@db/engram?sslmode=require&password=s3cret&SSLPASSWORD=k")
    assert shown == "postgresql://app@db/engram?sslmode=require&password=***&SSLPASSWORD=***"
    for plain in ("sqlite:////tmp/engram.db", "postgresql://app@db/engram?sslmode=require", "/tmp/e.db"):
        assert without_password(plain) == plain


def test_store_that_is_not_a_url_or_path_is_refused(tmp_path):
    """Issue 12 #19: a libpq keyword string is not taken for a SQLite file name."""
    for bad in ("host=localhost dbname=x", "dbname=engram", "mysql://localhost/x", "sqlite:x.db"):
        args = ("remember-turn", "hi", "--user", "sarah", "--store", bad)
        proc = run(*args, env_home=tmp_path / "home", cwd=tmp_path, check=False)
        assert proc.returncode == 1 and "unsupported store URL" in proc.stdout, proc.stdout + proc.stderr
    assert list(tmp_path.iterdir()) == []  # no file created, not even the home


def test_mcp_config_store_reaches_engram_mcp(tmp_path):
    """Issue 12 #25: `mcp-config --store` puts the store (absolute) into the stdio config, and `engram mcp`
    started from that config serves that store, creating no default store."""
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    home = tmp_path / "home"
    (tmp_path / "elsewhere").mkdir()
    created = run(
        "keys",
        "create",
        "--user",
        "sarah",
        "--store",
        "sqlite:///elsewhere/m.db",
        env_home=home,
        cwd=tmp_path,
    )
    key = created.stdout.split()[0]
    run(
        "remember-turn",
        "my bike is a green Brompton",
        "--user",
        "sarah",
        "--store",
        "elsewhere/m.db",
        env_home=home,
        cwd=tmp_path,
    )
    out = run(
        "mcp-config",
        "--user",
        "sarah",
        "--key",
        key,
        "--store",
        "elsewhere/m.db",
        env_home=home,
        cwd=tmp_path,
    ).stdout
    stdio = json.loads(re.findall(r"^\{.*?^\}", out, re.S | re.M)[0])["mcpServers"]["engram"]
    assert stdio["args"] == ["mcp", "--store", f"sqlite:///{tmp_path / 'elsewhere' / 'm.db'}"]

    async def recall() -> str:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "engram", *stdio["args"]],
            env={**os.environ, **stdio["env"], "ENGRAM_HOME": str(home)},
            cwd=str(home.parent.parent),  # the client's own directory, not the store's
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("recall_memory", {"query": "which bike do I have?"})
            return json.dumps(result.structured_content)

    assert "green Brompton" in anyio.run(recall)
    assert not (home / "engram.db").exists()


def test_engram_mcp_with_a_key_refuses_a_missing_store(tmp_path):
    env = dict(os.environ, ENGRAM_HOME=str(tmp_path), ENGRAM_API_KEY="egk_" + "x" * 40)
    proc = subprocess.run([*ENGRAM, "mcp"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1 and "no store at" in proc.stderr and "ENGRAM_API_KEY" in proc.stderr
    assert not (tmp_path / "engram.db").exists()


def test_engram_chat_says_when_the_store_named_is_new(tmp_path):
    """A newcomer's walk: a typo in --store started the agent on a new, empty store without a word."""
    env = dict(os.environ, ENGRAM_HOME=str(tmp_path), ENGRAM_LLM_BASE_URL="http://127.0.0.1:9/v1")
    typo = tmp_path / "nothere.db"
    proc = subprocess.run(
        [*ENGRAM, "chat", "--user", "sarah", "--store", str(typo)],
        capture_output=True,
        text=True,
        env={**env, "ENGRAM_LLM_MODEL": "m"},
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert "no store was at" in proc.stderr and "starts a new, empty one" in proc.stderr


def test_consolidate_without_llm_says_it_is_disabled(tmp_path):
    """Issue 12 #26: no LLM configured: a clear message and exit code 1, not `[]`."""
    no_llm = {k: None for k in os.environ if k.startswith("ENGRAM_LLM_")}  # None: unset while it runs
    for args in (["--all"], ["--user", "sarah"]):
        proc = run("consolidate", *args, env_home=tmp_path, env=no_llm, check=False)
        assert proc.returncode == 1, proc.stdout
        assert "consolidation is disabled: no LLM configured" in proc.stdout
        assert "ENGRAM_LLM_BASE_URL" in proc.stdout and "[]" not in proc.stdout


def test_consolidate_a_user_without_memories_is_an_error(tmp_path):
    """A typo in --user printed "ok" with every count 0, exit 0 (noticed in a bug hunt)."""
    run("remember", "--user", "sarah", "we live in Bristol btw", env_home=tmp_path)
    llm = {"ENGRAM_LLM_BASE_URL": "http://127.0.0.1:9/v1", "ENGRAM_LLM_MODEL": "unused"}  # never called
    proc = run("consolidate", "--user", "sarha", env_home=tmp_path, env=llm, check=False)
    assert proc.returncode == 1
    assert "no memories for user 'sarha' in this store: nothing to consolidate" in proc.stdout


def test_keys_revoke_unknown_id_names_the_key(tmp_path):
    """Issue 12 #28: not "memory 'key_nope' not found"."""
    run("keys", "create", "--user", "sarah", env_home=tmp_path)
    proc = run("keys", "revoke", "key_nope", env_home=tmp_path, check=False)
    assert proc.returncode == 1 and "API key 'key_nope' not found" in proc.stdout
    assert "memory" not in proc.stdout


def _tiny_eval_corpus(root: Path) -> Path:
    (root / "corpus").mkdir(parents=True)
    (root / "corpus" / "catalog.json").write_text(
        json.dumps([{"key": "c01", "title": "Hub radios", "text": "The Lumio Hub v2 has Zigbee 3.0 radios."}])
    )
    for user, key, text in [
        ("ann", "af01", "Ann has a grey cat called Miso"),
        ("ben", "bf01", "Ben drives a Skoda"),
    ]:
        doc = {"user_id": user, "semantic": [{"key": key, "days_ago": 5, "text": text}]}
        (root / "corpus" / f"{user}.json").write_text(json.dumps(doc))
    questions = [
        {
            "id": "a1",
            "user": "ann",
            "q": "what is my cat called?",
            "gold": ["af01"],
            "kind": "para",
            "split": "heldout",
        },
        {
            "id": "b1",
            "user": "ben",
            "q": "which car do I drive?",
            "gold": ["bf01"],
            "kind": "para",
            "split": "dev",
        },
        {
            "id": "a2",
            "user": "ann",
            "q": "hub radios?",
            "gold": ["c01"],
            "kind": "catalog",
            "split": "heldout",
        },
    ]
    (root / "questions.json").write_text(json.dumps(questions))
    return root


def test_eval_prints_titled_tables_without_blank_lines(tmp_path):
    """Issue 12 #27: every table has a title and the output has no stray blank lines."""
    corpus = _tiny_eval_corpus(tmp_path / "tiny")
    out = run("eval", "--corpus", str(corpus), "--split", "all", env_home=tmp_path, cwd=tmp_path).stdout
    lines = out.splitlines()
    assert lines[0] == "3 questions (own), split all"
    assert all(line.strip() for line in lines), out
    for title in ("overall", "per memory type", "per question kind"):
        assert any(line.strip() == title for line in lines), out
    assert any(line.split()[:2] == ["catalog", "1"] for line in lines) and "leaks: 0" in out


def test_eval_corpus_ships_inside_the_package():
    """Issue 12 #27: the corpus is package data (src/engram/eval/data), so `engram eval` works from an
    installed wheel; the repo has one copy of it."""
    import engram
    from engram.eval.runner import DEFAULT_EVAL_DIR

    package = Path(engram.__file__).resolve().parent
    assert DEFAULT_EVAL_DIR.is_relative_to(package)
    assert (DEFAULT_EVAL_DIR / "questions.json").is_file() and (
        DEFAULT_EVAL_DIR / "questions_agent.json"
    ).is_file()
    assert len(list((DEFAULT_EVAL_DIR / "corpus").glob("*.json"))) >= 5
    assert not (package.parents[1] / "eval").exists()


def test_repair_on_sqlite_has_nothing_to_do(tmp_path):
    """SQLite writes in transactions: `engram repair` opens the store and reports nothing half done."""
    from engram.storage.sqlite import SQLiteStore

    SQLiteStore(tmp_path / "engram.db").close()
    ran = run("repair", "--json", "--store", f"sqlite:///{tmp_path / 'engram.db'}", env_home=tmp_path)
    assert json.loads(ran.stdout) == {"settled": [], "quotes_cleared": 0, "held": 0}
    missing = run("repair", "--store", f"sqlite:///{tmp_path / 'none.db'}", env_home=tmp_path, check=False)
    assert missing.returncode == 1 and "no store at" in missing.stderr + missing.stdout


def test_reindex_rewrites_a_legacy_store_s_token_vectors(tmp_path, token_encoder):
    from engram.retrieval.late_interaction import pack
    from engram.retrieval.token_format import is_lean
    from engram.storage.sqlite import SQLiteStore

    doc = {"user_id": "sarah", "semantic": [{"text": "Sarah's router is a FRITZ!Box 7590"}]}
    (tmp_path / "sarah.json").write_text(json.dumps(doc))
    lean = {"ENGRAM_LEAN_TOKEN_VECTORS": "true"}
    run("import", str(tmp_path / "sarah.json"), env_home=tmp_path, env=lean)
    store = SQLiteStore(tmp_path / "engram.db")
    try:
        (row,) = store.list_memories("sarah", "semantic")
        assert is_lean(store.token_vectors("sarah", [row.id])[row.id])  # new writes: the lean format
        legacy = pack(token_encoder.encode_documents([row.text])[0])  # as Engram 0.1 stored it
        store.set_tokens("sarah", {row.id: legacy})
    finally:
        store.close()
    assert "computed or rewritten for 1 rows" in run("reindex", env_home=tmp_path, env=lean).stdout
    assert "computed or rewritten for 0 rows" in run("reindex", env_home=tmp_path, env=lean).stdout
    store = SQLiteStore(tmp_path / "engram.db")
    try:
        assert is_lean(store.token_vectors("sarah", [row.id])[row.id])
    finally:
        store.close()
