"""Commands that look after a store or talk to an LLM: reindex, consolidate, chat, eval."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from engram.errors import ConfigError, EngramError
from engram.interfaces.cli.common import (
    JsonOpt,
    StoreOpt,
    _engram,
    _fail,
    _settings,
    _store_url,
    app,
    console,
    err_console,
)
from engram.interfaces.cli.output import print_consolidation


@app.command()
def reindex(store: StoreOpt = None) -> None:
    """Compute the late-interaction token vectors that rows of an older store lack or hold in an older
    format (all users; a progress bar; stop and run again at will); on
    PostgreSQL with ENGRAM_PG_ADMIN_URL, also give each heavy user (ENGRAM_ANN_MIN_ROWS) its own
    vector index. Safe while serving; run it again as users grow."""
    with _engram(store, existing=True, rerank=False) as eng:
        if eng.token_encoder is not None:
            done = eng.reindex(progress=console.is_terminal)
            console.print(f"token vectors computed or rewritten for {done} rows")
        else:
            console.print("late interaction is off (ENGRAM_LATE_INTERACTION=false): no token vectors")
        try:
            indexed = eng.index_heavy_tenants()
        except ConfigError as exc:  # PostgreSQL without its admin URL: the runtime role cannot
            console.print(f"heavy users' vector indexes skipped: {exc}")
            return
    if indexed is not None:
        console.print(f"own vector index built for {len(indexed)} heavy users")


@app.command()
def repair(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Complete or roll back the writes a crashed process left half done (OpenSearch).

    Only OpenSearch needs it: a write of several requests journals itself in the tenant's lease (the
    next write of that tenant and the next open settle it too, once the lease has expired); repair
    also drops forgotten turns' words from replies that still quote them. SQLite and PostgreSQL write
    in transactions: nothing to repair."""
    from engram.memory.stores import open_store

    try:
        settings = _settings(rerank=False)
        url = _store_url(store, settings, existing=True)
        opened = open_store(url, settings.pg_admin_url, settings.ann_min_rows, settings)
        try:
            fix = getattr(opened, "repair", None)
            nothing = {"settled": [], "quotes_cleared": 0, "held": 0}  # transactions: never half done
            report: dict[str, Any] = fix() if callable(fix) else nothing
        finally:
            opened.close()
    except EngramError as exc:
        raise _fail(exc) from None
    if as_json:
        console.print_json(json.dumps(report))
        return
    settled = report["settled"]
    console.print(
        f"{len(settled)} unfinished writes settled" + (f" ({', '.join(settled)})" if settled else "")
    )
    if report["quotes_cleared"]:
        console.print(f"{report['quotes_cleared']} replies no longer quote a forgotten turn")
    if report["held"]:
        console.print(
            f"{report['held']} tenants are being written now (or by a writer dead < 60 s): run again later"
        )


@app.command()
def consolidate(
    user: Annotated[str | None, typer.Option("--user", "-u", help="the user to consolidate")] = None,
    all_users: Annotated[bool, typer.Option("--all", help="every user with memories")] = False,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Turn new episodes into facts and playbooks with the configured LLM (ENGRAM_LLM_BASE_URL,
    ENGRAM_LLM_MODEL, ENGRAM_LLM_API_KEY); prints one report per user (a line: the user, counts,
    status; --json for the ids)."""
    if bool(user) == all_users:
        console.print("[red]error:[/red] give --user U or --all")
        raise typer.Exit(2)
    settings = _settings(rerank=False)
    if not (settings.llm_base_url and settings.llm_model):
        raise _fail(
            "consolidation is disabled: no LLM configured. It needs an OpenAI-compatible chat endpoint: "
            "set ENGRAM_LLM_BASE_URL (e.g. http://localhost:11434/v1) and ENGRAM_LLM_MODEL"
        )
    with _engram(store, settings, existing=True) as eng:
        known = eng.store.tenants()
        if user is not None and user not in known:  # a typo reported "ok" with every count 0
            raise _fail(f"no memories for user {user!r} in this store: nothing to consolidate")
        users = known if user is None else [user]
        reports = [eng.consolidate(u).as_dict() for u in users]
    if not users:
        err_console.print("no users with memories in this store: nothing to consolidate")
    print_consolidation(reports, as_json)
    if any(r["status"].startswith("error") for r in reports):
        raise typer.Exit(1)


@app.command()
def chat(
    user: Annotated[str | None, typer.Option("--user", "-u", help="the user you chat as")] = None,
    url: Annotated[str | None, typer.Option(help="chat through a running `engram serve` at this URL")] = None,
    key: Annotated[str | None, typer.Option(envvar="ENGRAM_API_KEY", help="a user key, with --url")] = None,
    store: StoreOpt = None,
) -> None:
    """Chat with a support agent that remembers (ENGRAM_LLM_BASE_URL and ENGRAM_LLM_MODEL: an
    OpenAI-compatible endpoint with tool calling); each reply shows what was recalled and written.
    In the chat, /help lists the commands; logs go to $ENGRAM_HOME/logs/chat.log."""
    from engram.agent import Agent
    from engram.agent.chat import logging_to, run_chat

    settings = _settings()
    if not (settings.llm_base_url and settings.llm_model):
        raise _fail(
            "engram chat needs an LLM: set ENGRAM_LLM_BASE_URL (an OpenAI-compatible endpoint with tool "
            "calling, e.g. http://localhost:11434/v1) and ENGRAM_LLM_MODEL"
        )
    if url is None and not user:
        raise _fail("give --user U (or --url and --key to chat through a running service)")
    if url is not None and (not key or store):
        raise _fail("--url needs --key (or ENGRAM_API_KEY), a user key; the service has its own store")
    # Log records would print into the line being typed: the chat's go to a file (path shown once).
    with logging_to(settings.home / "logs" / "chat.log") as log_path:
        if url is None:
            assert user is not None
            if store is not None:  # a typo in --store starts a new store: say so (a newcomer's walk)
                try:
                    _store_url(store, settings, existing=True)
                except EngramError:
                    err_console.print(f"note: no store was at {store}: this chat starts a new, empty one")
            with _engram(store, settings) as eng, Agent.for_engram(eng, user) as agent:
                where = _store_url(store, settings, existing=False)
                run_chat(agent, console, user=user, where=where, log_path=log_path)
            return
        from engram.client import Client

        assert key is not None
        try:
            with Client(url, key) as client:
                if user and user != client.user_id:
                    raise _fail(f"the key is {client.user_id}'s, not {user}'s")
                with Agent.from_settings(client, settings) as agent:
                    run_chat(agent, console, user=client.user_id, where=url, log_path=log_path)
        except EngramError as exc:
            raise _fail(exc) from None


def _metrics_table(
    title: str, rows: dict[str, dict[str, Any]], *, n: bool = True, latency: tuple[str, ...] = ()
) -> Table:
    """A titled table of R@k/MRR (plus the ``latency`` percentiles, e.g. "p50"), one row per entry."""
    table = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("", no_wrap=True)
    for column in (["n"] if n else []) + ["R@1", "R@5", "R@10", "MRR"] + [f"{p} ms" for p in latency]:
        table.add_column(column, justify="right")
    for name, m in rows.items():
        cells = [name] + ([str(m.get("n", m.get("questions")))] if n else [])
        cells += [f"{m[k]:.3f}" for k in ("r_at_1", "r_at_5", "r_at_10", "mrr")]
        cells += [f"{m[f'latency_{p}_ms']:.0f}" for p in latency]
        table.add_row(*cells)
    return table


@app.command("eval")
def eval_(
    split: Annotated[str, typer.Option(help="dev, heldout (the CI gate's split) or all")] = "heldout",
    questions: Annotated[
        str, typer.Option(help="own (questions.json) or agent (questions_agent.json: the agent's voice)")
    ] = "own",
    json_path: Annotated[Path | None, typer.Option("--json", help="write the figures as JSON here")] = None,
    ablate: Annotated[
        bool, typer.Option("--ablate", help="also run each pipeline stage alone; PNG chart")
    ] = False,
    chart: Annotated[Path, typer.Option(help="where --ablate writes its chart")] = Path("eval-ablation.png"),
    corpus: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            file_okay=False,
            help="evaluation directory (default: the corpus shipped in the package)",
        ),
    ] = None,
    store: Annotated[
        str | None, typer.Option("--store", help="store URL to load into (default: a fresh temporary SQLite)")
    ] = None,
) -> None:
    """Evaluate recall on the evaluation corpus: R@1/5/10, MRR per type, latency, leak probes."""
    import tempfile

    from engram.eval.runner import DEFAULT_EVAL_DIR, ablation_chart, evaluate_corpus
    from engram.retrieval.recipes import ABLATION

    with tempfile.TemporaryDirectory() as tmp, _engram(store or f"sqlite:///{tmp}/eval.db") as eng:
        try:
            result = evaluate_corpus(
                eng,
                corpus or DEFAULT_EVAL_DIR,
                split=split,
                question_set=questions,
                configs=ABLATION if ablate else None,
                progress=console.is_terminal,  # off when piped: a finished bar would leave a blank line
            )
        except ValueError as exc:  # an unknown split or question set, or a malformed corpus file
            raise _fail(exc) from None
    console.print(f"[bold]{result['questions']} questions ({questions}), split {split}[/bold]")
    console.print(_metrics_table("overall", {"all": result}, latency=("p50", "p95")))
    console.print(_metrics_table("per memory type", result["per_type"]))
    console.print(_metrics_table("per question kind", result["per_kind"]))
    console.print(f"leak probes: {result['leak_probes']}, leaks: {result['leaks']}")
    if ablate:
        stages = result["ablation"]
        console.print(_metrics_table("ablation: each pipeline stage", stages, n=False, latency=("p50",)))
        try:
            ablation_chart(stages, chart)
            console.print(f"chart: {chart}")
        except ImportError:
            console.print("chart skipped: install matplotlib (pip install -e '.[eval]' in Engram's checkout)")
    if json_path:
        json_path.write_text(json.dumps(result, indent=2, default=str))
