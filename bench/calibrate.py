"""Fit recall's confidence calibration (engram.retrieval.confidence) on the development sets, and pick
the default abstention threshold.

Development data only: the knowledge-update set's dev split (bench/data/updates.json, with its "never
said" questions), and the dev splits of the evaluation corpus's own and agent-voice questions. Every
question is recalled (top 10, ``record_use=False``); a hit is labelled relevant when it is one of the
question's gold rows (never-said questions have none). Three logistic regressions (scikit-learn) are
fitted on those hits, one per stage that can give a hit its confidence:

* reranked hits: logit(cross-encoder probability) and the hit's query coverage (its match for the
  query's least-matched content word; the raw MaxSim as a further feature got a negative weight, the two
  being collinear on the reranked head);
* late interaction alone: the raw MaxSim and the coverage (the same hits, as if the cross-encoder had
  been skipped);
* the same two features on the hits that get them in a recall: a clear leader the cross-encoder left
  alone ("leader"), and the hits below what it judged that it did not score ("below");
* dense alone: the dense cosine.

It prints the coefficients to put in engram.settings (DEFAULT_CONFIDENCE_*), each calibration's
reliability (expected calibration error, ten bins) and log loss, the reliability of the confidences
recall reports now, apart for hits the cross-encoder scored and hits it did not (the two must mean
the same: a hit's confidence comes from whichever stage scored it), and, for the default threshold, the
balanced accuracy of "the top hit's confidence reaches t" between answerable and never-said questions
of the knowledge-update set at several t, with the recalls' actual confidences as fitted.

    python bench/calibrate.py [--json bench/results/calibration.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

from engram import Engram
from engram.eval.runner import import_eval_corpus, read_questions
from engram.retrieval.confidence import logit
from engram.settings import load_settings

sys.path.insert(0, str(Path(__file__).parent))
import updates  # bench/updates.py: the knowledge-update set's loader

EVAL_DATA = Path(__file__).parents[1] / "src" / "engram" / "eval" / "data"
ALONE_NOTES = ("the first only", "the leader only")


def hit_rows(hits, gold, source):
    """One row per hit: its stage scores and whether it is gold; ``alone``: a raw-turn leader that
    nothing came near, which the cross-encoder judged alone (its late-interaction features fit the
    calibration it gets when the stage is shed)."""
    raw_turns = all(h.memory.memory_type == "episodic" for h in hits)
    return [
        {
            "source": source,
            "rank": h.rank,
            # the note that says so (pipeline.py; "the leader only" before its rewording)
            "alone": raw_turns and str(h.explain.get("rerank_contenders", "")).startswith(ALONE_NOTES),
            "rerank": rerank if isinstance(rerank := h.explain.get("rerank"), float) else None,  # or a text
            "late": h.explain.get("late_interaction_raw"),
            "coverage": h.explain.get("query_coverage"),
            "dense": h.explain.get("dense_score"),
            "confidence": h.confidence,
            "missing_value": "missing_value" in h.explain,  # its confidence was lowered (asked_value.py)
            "relevant": h.memory.id in gold,
        }
        for h in hits
    ]


def collect(eng):
    """Recall every development question; returns (hit rows, per-question rows of the update set)."""
    rows, questions = [], []
    for user in [u for u in json.loads(updates.DATA.read_text())["users"] if u["split"] == "dev"]:
        mem = eng.for_user(user["user_id"])
        ids = updates.load_user(mem, user, with_facts=False)
        for q in user["questions"]:
            hits = mem.recall(q["query"], k=10, as_of=updates.ts(q["asked_at"]), record_use=False)
            rows += hit_rows(hits, {ids[k] for k in q["gold"]}, "updates")
            questions.append({"kind": q["kind"], "hits": hits})
    ids = import_eval_corpus(eng, EVAL_DATA)
    for question_set in ("own", "agent"):
        for q in read_questions(EVAL_DATA, question_set, ids):
            if q.split == "dev":
                hits = eng.for_user(q.user).recall(q.text, k=10, record_use=False)
                rows += hit_rows(hits, q.gold, question_set)
    return rows, questions


def leads_uncontested(row):
    """The first hit of a recall of raw turns where nothing came near it: a clear leader."""
    return row["alone"] and row["rank"] == 1 and row["late"] is not None


def fit(features, labels):
    model = LogisticRegression(C=10.0).fit(features, labels)
    probabilities = model.predict_proba(features)[:, 1]
    return model, probabilities


def ece(probabilities, labels, bins=10):
    """Expected calibration error: the bins' |mean confidence - share relevant|, weighted by size."""
    edges = np.linspace(0, 1, bins + 1)
    total = 0.0
    for low, high in itertools.pairwise(edges):
        inside = (probabilities >= low) & (probabilities < high if high < 1 else probabilities <= high)
        if inside.any():
            total += inside.mean() * abs(probabilities[inside].mean() - labels[inside].mean())
    return total


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", help="write the fitted coefficients and figures here")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Engram.open(f"sqlite:///{Path(tmp) / 'cal.db'}") as eng:
        rows, questions = collect(eng)
    labels = np.array([r["relevant"] for r in rows], dtype=float)
    print(f"{len(rows)} hits, {int(labels.sum())} relevant, from {len(questions)} update-set questions + dev")
    result = {}
    covered = [r["coverage"] for r in rows if r["coverage"] is not None]
    result["coverage_mean"] = float(np.mean(covered))
    print(f"coverage: {len(covered)} hits, mean {result['coverage_mean']:.3f}")
    specs = {
        "rerank": lambda r: [logit(r["rerank"]), r["coverage"]] if r["rerank"] is not None else None,
        "late": lambda r: [r["late"], r["coverage"]] if r["late"] is not None else None,
        "dense": lambda r: [r["dense"]] if r["dense"] is not None else None,
        "leader": lambda r: [r["late"], r["coverage"]] if leads_uncontested(r) else None,
        "below": lambda r: [r["late"], r["coverage"]] if r["rerank"] is None and r["rank"] > 1 else None,
    }
    for name, feature in specs.items():
        kept = [(f, r["relevant"]) for r in rows if (f := feature(r)) is not None and None not in f]
        if not kept:  # a stage no development hit reached
            print(f"{name:<7} no hits")
            continue
        x = np.array([f for f, _ in kept])
        y = np.array([label for _, label in kept], dtype=float)
        model, probabilities = fit(x, y)
        coefficients = [*map(float, model.coef_[0]), float(model.intercept_[0])]
        result[name] = {
            "coefficients": coefficients,
            "hits": len(y),
            "relevant": int(y.sum()),
            "ece": ece(probabilities, y),
            "log_loss": log_loss(y, probabilities),
        }
        shown = ", ".join(f"{c:.3f}" for c in coefficients)
        print(
            f"{name:<7} ({shown})  hits {len(y)}  relevant {int(y.sum())}  "
            f"ECE {result[name]['ece']:.3f}  log loss {result[name]['log_loss']:.3f}"
        )
    print("\nreliability of the confidence as recalled now (the coefficients in engram.settings), by stage:")
    result["as_recalled"] = {}
    for stage, chosen in (
        ("cross-encoder ran", [r for r in rows if r["rerank"] is not None]),
        ("not run, first hit", [r for r in rows if r["rerank"] is None and r["rank"] == 1]),
        ("not run, below", [r for r in rows if r["rerank"] is None and r["rank"] > 1]),
        ("all", rows),
    ):
        if not chosen:  # the first hit is always scored now, unless late interaction is off
            continue
        said = np.array([r["confidence"] for r in chosen])
        y = np.array([r["relevant"] for r in chosen], dtype=float)
        figures = {"hits": len(y), "mean_confidence": float(said.mean()), "share_relevant": float(y.mean())}
        figures["ece"] = ece(said, y)
        result["as_recalled"][stage] = figures
        print(
            f"  {stage:<22} hits {len(y):>5}  mean confidence {said.mean():.3f}  relevant {y.mean():.3f}  "
            f"ECE {figures['ece']:.3f}"
        )
    lacking, factor = [r for r in rows if r["missing_value"]], load_settings().missing_value_factor
    if lacking and factor > 0:  # the factor that calibrates them: share relevant / confidence before it
        before = float(np.mean([r["confidence"] for r in lacking])) / factor
        share = float(np.mean([r["relevant"] for r in lacking]))
        result["missing_value"] = {"hits": len(lacking), "relevant": share, "fitted_factor": share / before}
        print(
            f"\nhits without the value asked for: {len(lacking)}, relevant {share:.3f}, confidence before "
            f"the factor {before:.3f}: fitted missing_value_factor {share / before:.3f}"
        )
    print("\nthe top hit's confidence as recalled now (with the coefficients in engram.settings):")
    top = [(q["hits"][0].confidence if q["hits"] else 0.0, q["kind"] != "never") for q in questions]
    thresholds = {}
    for t in (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6):
        tpr = np.mean([c >= t for c, answerable in top if answerable])
        tnr = np.mean([c < t for c, answerable in top if not answerable])
        thresholds[t] = {"TPR": float(tpr), "TNR": float(tnr), "balanced_accuracy": float((tpr + tnr) / 2)}
        print(f"  t={t:<5} TPR {tpr:.3f}  TNR {tnr:.3f}  balanced accuracy {(tpr + tnr) / 2:.3f}")
    result["thresholds"] = thresholds
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1), encoding="utf-8")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
