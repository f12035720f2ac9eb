"""How much the packaged INT8 models' scores, and recall's order, change with the CPU (not a test).

onnxruntime's MLAS picks its INT8 kernels by CPUID at run time (AVX-512 VNNI, AVX-512, AVX2, SSE4.1) and
has no switch to turn one off, and the kernels do not round alike, so the same text scores a little
differently on another machine. This script scores a fixed set with each model: the smoke corpus
(tests/data/smoke_corpus.json) plus seeded synthetic turns, every question against every row its user
can recall (cross-encoder probability and logit, embedder cosine, late-interaction MaxSim raw and min-max
scaled as recall scales it), and runs every question through recall (default pipeline, and without the
cross-encoder). ``run`` measures here and again under qemu user-mode emulation of a CPU without AVX-512
(Debian package qemu-user; ``-cpu EPYC-Rome``: AVX2 + FMA, as on an AMD EPYC 7002), then compares.
Emulation is ~60x slower: ~20 minutes per CPU on 2 cores. qemu's models without AVX2 (SandyBridge,
Nehalem) stop on an illegal instruction in the wheels, so AVX2 is the oldest level this can measure.

    python bench/cpu_numerics.py run [--cpu EPYC-Rome ...] [--json bench/results/cpu_numerics.json]
    python bench/cpu_numerics.py measure --out here.json      # on whatever CPU runs it
    python bench/cpu_numerics.py compare here.json there.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "smoke_corpus.json"
FILLER = [
    "the boiler is acting up again",
    "my sister was great today",
    "the car needs sorting before friday",
    "work cost way more time than expected",
    "the garden seems fine now",
    "my laptop broke down on monday",
    "the landlord needs a call tomorrow",
    "the bus got cancelled, ugh",
    "the kids' school play was a total mess lol",
    "a podcast made me laugh",
    "the washing machine keeps bugging me",
    "my knee is on my mind",
]


def cpu_flags() -> list[str]:
    """The SIMD levels numpy finds on this CPU (under qemu: the emulated CPU's)."""
    from numpy._core._multiarray_umath import __cpu_features__ as features

    wanted = ("AVX2", "FMA3", "AVX512F", "AVX512_SKX", "AVX512VNNI", "AVX512_ICL")
    return [f for f in wanted if features.get(f)]


def measure(out: Path) -> None:
    """Score the fixed set with each model and run each question through recall; write JSON to ``out``."""
    from engram import Engram
    from engram.eval.corpus import load_corpus
    from engram.models import search_text_of
    from engram.retrieval.config import RetrievalConfig
    from engram.retrieval.late_interaction import late_score, pack, token_maxima

    rng = random.Random(28)
    result: dict = {"cpu": cpu_flags(), "pairs": [], "recalls": []}
    with tempfile.TemporaryDirectory() as tmp, Engram.open(f"sqlite:///{tmp}/numerics.db") as eng:
        questions, ids = load_corpus(eng, CORPUS)
        for user in sorted({q.user for q in questions}):
            turns = [f"{t}{rng.choice(['', ' tbh', ', any ideas?'])}" for t in rng.sample(FILLER, 8)]
            filler = [{"key": f"x_{user}_{i}", "text": t} for i, t in enumerate(turns)]
            made = eng.import_json({"user_id": user, "episodic": filler})
            ids.update(made["ids"])
        key_of = {v: k for k, v in ids.items()}
        catalog = eng.catalog.list(limit=1000)
        rows: dict[str, list[tuple[str, str]]] = {}
        for user in sorted({q.user for q in questions}):
            mem = eng.for_user(user)
            own = [m for t in ("episodic", "semantic", "procedural") for m in mem.list(t, limit=1000)]
            rows[user] = [(key_of.get(m.id, m.id), search_text_of(m)) for m in [*own, *catalog]]
        assert eng.reranker is not None and eng.token_encoder is not None
        encoder = eng.token_encoder
        tokens: dict[str, bytes] = {}
        for passages in rows.values():
            texts = [t for _, t in passages]
            for text, matrix in zip(texts, encoder.encode_documents(texts), strict=True):
                tokens[text] = pack(matrix)
        vectors = {}
        for passages in rows.values():
            texts = [t for _, t in passages]
            vectors.update(zip(texts, eng.embedder.embed_documents(texts), strict=True))
        for q in questions:
            passages = rows[q.user]
            texts = [t for _, t in passages]
            probs = eng.reranker.score(q.text, texts)
            query_vector = eng.embedder.embed_query(q.text)
            maxima = token_maxima(encoder.encode_query(q.text), [tokens[t] for t in texts], encoder.dim)
            raw = [late_score(m) for m in maxima]
            low, high = min(raw), max(raw)
            for (key, text), p, r in zip(passages, probs, raw, strict=True):
                result["pairs"].append(
                    {
                        "q": q.id,
                        "row": key,
                        "rerank": p,
                        "logit": math.log(max(p, 1e-300)) - math.log1p(-min(p, 1 - 1e-16)),
                        "cosine": float(np.dot(query_vector, vectors[text])),
                        "late_raw": r,
                        "late_scaled": (r - low) / (high - low) if high > low else 1.0,
                    }
                )
        for name, config in [("default", eng.config), ("no cross-encoder", RetrievalConfig(rerank=False))]:
            for q in questions:
                hits = eng.for_user(q.user).recall(q.text, k=10, config=config, record_use=False)
                result["recalls"].append(
                    {
                        "pipeline": name,
                        "q": q.id,
                        "gold": sorted(key_of[g] for g in q.gold),
                        "hits": [[key_of.get(h.memory.id, h.memory.id), h.score] for h in hits],
                    }
                )
    out.write_text(json.dumps(result))


def _flips(a: dict, b: dict, field: str) -> tuple[int, int, float]:
    """Pairs of rows scored for the same question whose order differs between the runs: (flipped, of
    how many, the largest gap in ``a`` among the flipped ones)."""
    by_q: dict[str, list[tuple[float, float]]] = {}
    for pa, pb in zip(a["pairs"], b["pairs"], strict=True):
        by_q.setdefault(pa["q"], []).append((pa[field], pb[field]))
    flipped, total, widest = 0, 0, 0.0
    for scores in by_q.values():
        for (xa, xb), (ya, yb) in itertools.combinations(scores, 2):
            total += 1
            if (xa - ya) * (xb - yb) < 0:
                flipped += 1
                widest = max(widest, abs(xa - ya))
    return flipped, total, widest


def _tiers(hits: list[list]) -> list[frozenset[str]]:
    """A recall's order up to exact ties: rows with the same final score (their order among themselves
    follows their random ids, so it differs from run to run on one machine too) form one tier."""
    tiers: list[tuple[float, set[str]]] = []
    for key, score in hits:
        if tiers and tiers[-1][0] == score:
            tiers[-1][1].add(key)
        else:
            tiers.append((score, {key}))
    return [frozenset(keys) for _, keys in tiers]


def _hit_at(keys: list[str], gold: list[str], n: int) -> bool:
    return any(k in gold for k in keys[:n])


def compare(a: dict, b: dict) -> dict:
    """Score differences between two ``measure`` outputs, and how recall's order differs."""
    keys = [(p["q"], p["row"]) for p in a["pairs"]]
    if keys != [(p["q"], p["row"]) for p in b["pairs"]]:
        raise SystemExit("the two files scored different pairs (not the same corpus or code)")
    report: dict = {"cpus": [a["cpu"], b["cpu"]], "pairs": len(keys), "scores": {}, "recall": {}}
    for field in ("rerank", "logit", "cosine", "late_raw", "late_scaled"):
        diff = np.abs(np.array([p[field] for p in a["pairs"]]) - np.array([p[field] for p in b["pairs"]]))
        flipped, total, widest = _flips(a, b, field)
        report["scores"][field] = {
            "max_abs": float(diff.max()),
            "mean_abs": float(diff.mean()),
            "p99_abs": float(np.quantile(diff, 0.99)),
            "pair_orders_flipped": flipped,
            "pair_orders": total,
            "widest_flipped_gap": widest,
        }
    for pipeline in sorted({r["pipeline"] for r in a["recalls"]}):
        ra = [r for r in a["recalls"] if r["pipeline"] == pipeline]
        rb = [r for r in b["recalls"] if r["pipeline"] == pipeline]
        same_order = same_top = same_set5 = 0
        rel, widest = [], 1.0
        hits_differ = {1: 0, 5: 0, 10: 0}
        for x, y in zip(ra, rb, strict=True):
            kx, ky = [k for k, _ in x["hits"]], [k for k, _ in y["hits"]]
            tx, ty = _tiers(x["hits"]), _tiers(y["hits"])
            same_order += tx[:-1] == ty[:-1]  # the last tier may be cut at k differently
            same_top += tx[:1] == ty[:1]
            same_set5 += set(kx[:5]) == set(ky[:5])
            for n in hits_differ:
                hits_differ[n] += _hit_at(kx, x["gold"], n) != _hit_at(ky, y["gold"], n)
            score_y = dict(y["hits"])
            rel += [abs(s - score_y[k]) / max(s, 1e-12) for k, s in x["hits"] if k in score_y and s > 1e-3]
            both = [(s, score_y[k]) for k, s in x["hits"] if k in score_y]
            for (ax, ay), (bx, by) in itertools.combinations(both, 2):
                if (ax - bx) * (ay - by) < 0 and min(ax, bx) > 0:  # swapped: how far apart were they?
                    widest = max(widest, max(ax, bx) / min(ax, bx))
        report["recall"][pipeline] = {
            "questions": len(ra),
            "same_order_up_to_ties": same_order,
            "same_top1": same_top,
            "same_top5_set": same_set5,
            "questions_whose_r_at_1_differs": hits_differ[1],
            "questions_whose_r_at_5_differs": hits_differ[5],
            "questions_whose_r_at_10_differs": hits_differ[10],
            "max_rel_final_diff": max(rel, default=0.0),
            "widest_swapped_ratio": widest,
        }
    return report


def print_report(report: dict) -> None:
    a, b = report["cpus"]
    print(f"CPU features: {a} vs {b}; {report['pairs']} (question, row) pairs")
    print(f"{'score':<12} {'max |d|':>9} {'mean |d|':>9} {'p99 |d|':>9} {'orders flipped':>16} {'widest':>8}")
    for field, s in report["scores"].items():
        flipped = f"{s['pair_orders_flipped']}/{s['pair_orders']}"
        print(
            f"{field:<12} {s['max_abs']:>9.4f} {s['mean_abs']:>9.4f} {s['p99_abs']:>9.4f} {flipped:>16} "
            f"{s['widest_flipped_gap']:>8.4f}"
        )
    for pipeline, r in report["recall"].items():
        print(
            f"recall, {pipeline}: {r['questions']} questions, order (up to exact ties) identical in "
            f"{r['same_order_up_to_ties']}, top-1 in {r['same_top1']}, top-5 set in {r['same_top5_set']}; "
            "R@1/R@5/R@10 differ on "
            f"{r['questions_whose_r_at_1_differs']}/{r['questions_whose_r_at_5_differs']}/"
            f"{r['questions_whose_r_at_10_differs']} questions; final scores differ by up to "
            f"{100 * r['max_rel_final_diff']:.1f}%; hits that swapped were within "
            f"{r['widest_swapped_ratio']:.2f}x of each other"
        )


def run(cpus: list[str], out: Path | None, keep: Path | None) -> None:
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        raise SystemExit("qemu-x86_64 not found: apt-get install qemu-user")
    with tempfile.TemporaryDirectory() as tmp:
        where = keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        host = where / "host.json"
        measure(host)
        reports = {}
        for cpu in cpus:
            emulated = where / f"{cpu}.json"
            # The venv's python under qemu finds the venv as it does natively.
            cmd = [qemu, "-cpu", cpu, sys.executable, __file__, "measure", "--out", str(emulated)]
            done = subprocess.run(cmd, stderr=subprocess.PIPE, text=True, check=False)
            print(f"\n== this machine vs qemu -cpu {cpu}")
            if done.returncode:  # e.g. a CPU older than the wheels' baseline: SIGILL
                noise = "TCG doesn't support"
                print("\n".join(ln for ln in done.stderr.splitlines() if noise not in ln)[-2000:])
                continue
            reports[cpu] = compare(json.loads(host.read_text()), json.loads(emulated.read_text()))
            print_report(reports[cpu])
    if out:
        out.write_text(json.dumps(reports, indent=2) + "\n")
    if len(reports) < len(cpus):
        raise SystemExit(f"measured {len(reports)} of {len(cpus)} CPUs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="score the fixed set here")
    m.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("compare", help="compare two measure outputs")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    c.add_argument("--json", type=Path, help="write the report here")
    r = sub.add_parser("run", help="measure here and under qemu, then compare")
    r.add_argument("--cpu", nargs="+", default=["EPYC-Rome"])
    r.add_argument("--json", type=Path, help="write the reports here")
    r.add_argument("--keep", type=Path, help="keep each CPU's measure output in this folder")
    args = parser.parse_args()
    if args.command == "measure":
        measure(args.out)
    elif args.command == "compare":
        report = compare(json.loads(args.a.read_text()), json.loads(args.b.read_text()))
        print_report(report)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2) + "\n")
    else:
        run(args.cpu, args.json, args.keep)


if __name__ == "__main__":
    main()
