"""`engram eval`: load the evaluation corpus into a fresh store, ask the questions through the public API,
probe for cross-tenant leaks, and report R@1/5/10, MRR (overall, per memory type, per question kind)
and latency. The corpus ships inside the package, in ``engram/eval/data/`` (data, not code; so
``engram eval`` works from an installed wheel): ``corpus/<user>.json`` import documents
with keys, ``corpus/catalog.json``, and ``questions.json`` (gold answers are keys; ``split`` is
``dev`` or ``heldout``; the CI gate uses ``heldout``, which is never tuned on). A second question
set, ``questions_agent.json``, asks about the same corpus in an agent's voice (third person, pronouns,
paraphrases without the stored words, replies that need the turn before them); it was written by
another author without seeing the retrieval code, and is reported on its own (``question_set="agent"``).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from rich.progress import Progress

from engram.auth import ApiKeys
from engram.eval.metrics import first_gold_rank, mean_reciprocal_rank, recall_at_k
from engram.interfaces.rest import create_app
from engram.interfaces.rest.background import BackgroundServer
from engram.memory import Engram
from engram.models import SemanticMemory
from engram.retrieval.config import RetrievalConfig

DEFAULT_EVAL_DIR = Path(__file__).resolve().parent / "data"
PROBES_PER_PAIR = 8  # queries built from one persona's facts, sent as each other persona


def type_of(memory_id: str) -> str:
    return {"epi": "episodic", "sem": "semantic", "pro": "procedural", "cat": "catalog"}[memory_id[:3]]


@dataclass(frozen=True)
class EvalQuestion:
    id: str
    user: str
    text: str
    gold: frozenset[str]
    gold_type: str
    kind: str
    split: str


QUESTION_SETS = {"own": "questions.json", "agent": "questions_agent.json"}


def import_eval_corpus(eng: Engram, directory: Path, progress: bool = False) -> dict[str, str]:
    """Import the catalog and every user of the corpus; returns each record's key -> its new id."""
    corpus = directory / "corpus"
    ids: dict[str, str] = {}
    ids.update(
        eng.catalog.import_json(json.loads((corpus / "catalog.json").read_text()), progress=progress)["ids"]
    )
    for path in sorted(corpus.glob("*.json")):
        if path.name != "catalog.json":
            ids.update(eng.import_json(json.loads(path.read_text()), progress=progress)["ids"])
    return ids


def _check_question_set(question_set: str) -> None:
    if question_set not in QUESTION_SETS:
        raise ValueError(f"unknown question set {question_set!r}; expected one of {sorted(QUESTION_SETS)}")


def read_questions(directory: Path, question_set: str, ids: Mapping[str, str]) -> list[EvalQuestion]:
    """One question set, its gold keys resolved to the ids the corpus import gave."""
    _check_question_set(question_set)
    questions = []
    for q in json.loads((directory / QUESTION_SETS[question_set]).read_text()):
        gold = frozenset(ids[k] for k in q["gold"])
        primary = ids[q["gold"][0]]
        questions.append(
            EvalQuestion(q["id"], q["user"], q["q"], gold, type_of(primary), q["kind"], q["split"])
        )
    return questions


def _metrics(ranks: Sequence[int | None]) -> dict[str, float]:
    return {
        "n": len(ranks),
        "r_at_1": recall_at_k(ranks, 1),
        "r_at_5": recall_at_k(ranks, 5),
        "r_at_10": recall_at_k(ranks, 10),
        "mrr": mean_reciprocal_rank(ranks),
    }


def run_questions(
    eng: Engram,
    questions: Sequence[EvalQuestion],
    config: RetrievalConfig | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    ranks: list[int | None] = []
    latencies: list[float] = []
    by_type: dict[str, list[int | None]] = defaultdict(list)
    by_kind: dict[str, list[int | None]] = defaultdict(list)
    misses = []
    foreign = 0
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("questions", total=len(questions))
        for q in questions:
            start = time.perf_counter()
            hits = eng.for_user(q.user).recall(q.text, k=10, config=config, record_use=False)
            latencies.append(1000 * (time.perf_counter() - start))
            foreign += sum(1 for h in hits if h.memory.user_id not in (q.user, None))
            rank = first_gold_rank([h.memory.id for h in hits], q.gold)
            ranks.append(rank)
            by_type[q.gold_type].append(rank)
            by_kind[q.kind].append(rank)
            if rank is None or rank > 5:
                misses.append({"id": q.id, "q": q.text, "rank": rank})
            bar.advance(task)
    latencies.sort()
    return {
        **_metrics(ranks),
        "per_type": {t: _metrics(r) for t, r in sorted(by_type.items())},
        "per_kind": {k: _metrics(r) for k, r in sorted(by_kind.items())},
        "latency_p50_ms": latencies[len(latencies) // 2] if latencies else 0.0,
        "latency_p95_ms": latencies[int(len(latencies) * 0.95)] if latencies else 0.0,
        "foreign_hits": foreign,
        "misses": misses,
    }


def leak_probes(
    eng: Engram, recallers: dict[str, Callable[[str, str], list[dict[str, Any]]]]
) -> tuple[int, int, list[dict[str, str]]]:
    """Every persona asks for other personas' distinctive facts, through each entry point.

    ``recallers`` maps an entry-point name to ``fn(user, query) -> hits as JSON``. Returns
    (probes sent, leaks, leak details). A leak is any hit owned by another user.
    """
    users = sorted({u for u in eng.store.tenants()})
    facts = {
        u: [m for m in eng.for_user(u).list("semantic", limit=500) if isinstance(m, SemanticMemory)]
        for u in users
    }
    probes = leaks = 0
    details = []
    for asker in users:
        for owner in users:
            if owner == asker:
                continue
            for fact in facts[owner][:PROBES_PER_PAIR]:
                for path, recall in recallers.items():
                    probes += 1
                    for hit in recall(asker, fact.text):
                        if hit["memory"]["user_id"] not in (asker, None):
                            leaks += 1
                            details.append(
                                {"path": path, "asker": asker, "query": fact.text, "got": hit["memory"]["id"]}
                            )
    return probes, leaks, details


def rest_recaller(eng: Engram) -> tuple[Callable[[str, str], list[dict[str, Any]]], Callable[[], None]]:
    """Serve the REST API on a free loopback port with one key per user; return (recall fn, stop fn)."""
    keys = ApiKeys(eng.store)
    tokens = {u: keys.create(u, "eval leak probe")[0] for u in eng.store.tenants()}
    server = BackgroundServer(create_app(eng, keys))
    client = httpx.Client(base_url=server.__enter__(), timeout=60)

    def recall(user: str, query: str) -> list[dict[str, Any]]:
        r = client.post(
            "/v1/recall",
            json={"query": query, "k": 10, "include_superseded": True},
            headers={"Authorization": f"Bearer {tokens[user]}"},
        )
        r.raise_for_status()
        return list(r.json()["hits"])

    def stop() -> None:
        client.close()
        server.__exit__(None, None, None)

    return recall, stop


def python_recaller(eng: Engram) -> Callable[[str, str], list[dict[str, Any]]]:
    def recall(user: str, query: str) -> list[dict[str, Any]]:
        hits = eng.for_user(user).recall(query, k=10, include_superseded=True, record_use=False)
        return [h.model_dump(mode="json") for h in hits]

    return recall


def evaluate_corpus(
    eng: Engram,
    directory: Path = DEFAULT_EVAL_DIR,
    *,
    split: str = "heldout",
    question_set: str = "own",
    configs: dict[str, RetrievalConfig] | None = None,
    rest: bool = True,
    progress: bool = False,
    imported: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Load, ask, probe. With ``configs`` (an ablation), every config answers the same questions.
    ``imported``: the ids of a corpus already imported into ``eng`` (evaluation recalls record no
    use, so one import can answer several question sets)."""
    _check_question_set(question_set)  # before the import, which takes a while
    ids = imported if imported is not None else import_eval_corpus(eng, directory, progress=progress)
    questions = read_questions(directory, question_set, ids)
    chosen = [q for q in questions if split == "all" or q.split == split]
    if not chosen:
        raise ValueError(f"no questions in split {split!r}")
    result: dict[str, Any] = {"question_set": question_set, "split": split, "questions": len(chosen)}
    main = run_questions(eng, chosen, progress=progress)
    result.update({k: v for k, v in main.items() if k != "n"})
    if configs:
        result["ablation"] = {
            name: {
                k: v for k, v in run_questions(eng, chosen, cfg, progress=progress).items() if k != "misses"
            }
            for name, cfg in configs.items()
        }
    recallers = {"python": python_recaller(eng)}
    stop = None
    if rest:
        recallers["rest"], stop = rest_recaller(eng)
    try:
        probes, leaks, details = leak_probes(eng, recallers)
    finally:
        if stop is not None:
            stop()
    result.update({"leak_probes": probes, "leaks": leaks, "leak_details": details})
    return result


def ablation_chart(ablation: dict[str, dict[str, Any]], path: Path) -> None:
    """A grouped bar chart of R@1, R@5, R@10 and MRR per pipeline stage."""
    # Imported here: matplotlib is the optional "eval" extra (the CLI says so on ImportError).
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = list(ablation)
    metrics = ["r_at_1", "r_at_5", "r_at_10", "mrr"]
    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / len(metrics)
    for i, metric in enumerate(metrics):
        xs = [s + i * width for s in range(len(stages))]
        ax.bar(xs, [ablation[s][metric] for s in stages], width, label=metric.replace("_at_", "@").upper())
    ax.set_xticks([s + 0.4 - width / 2 for s in range(len(stages))], stages, rotation=15, ha="right")
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("score")
    ax.set_title("Engram retrieval ablation (evaluation corpus)")
    ax.legend(loc="upper center", ncol=len(metrics), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
