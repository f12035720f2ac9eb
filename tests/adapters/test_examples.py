"""Each worked example in examples/ runs as a user would run it (a fresh interpreter, a temporary home),
and says what it shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SHOWN = {
    "langgraph_store.py": "history of 'home': ['Sarah lives in Edinburgh', 'Sarah moved to Glasgow in May']",
    "langchain_memory.py": "1. 'Sarah is allergic to peanuts'",
    "llamaindex_memory.py": "stored in Engram: [",
}


def test_every_example_is_run_here():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(SHOWN)


@pytest.mark.parametrize("name", sorted(SHOWN))
def test_example_runs(name: str, tmp_path: Path):
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {
        **os.environ,
        "ENGRAM_HOME": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLES / name)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert SHOWN[name] in done.stdout
    assert done.stderr == ""  # no warning, no unclosed resource


def test_the_docs_quickstarts_run(tmp_path: Path):
    """The first Python block of each framework's docs/integrations page, copied and pasted into one
    interpreter (the TypeScript page's quickstart runs in tests/clients)."""
    folder = EXAMPLES.parent / "docs" / "integrations"
    pages = [folder / f"{name}.md" for name in ("langchain", "langgraph", "llamaindex")]
    blocks = [p.read_text(encoding="utf-8").split("```python\n", 1)[1].split("```", 1)[0] for p in pages]
    script = "\n".join(
        f"exec(compile({block!r}, {page.name!r}, 'exec'), {{'__name__': '__main__'}})"
        for page, block in zip(pages, blocks, strict=True)
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {
        **os.environ,
        "ENGRAM_HOME": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Dr. Alvarez" in done.stdout  # LangGraph's graph answered from Engram
    assert "\nI don't know\n" in done.stdout  # ... and, asked what was never said, nothing (a newcomer)
    assert "window, always" in done.stdout  # LangChain's retriever found the turn
    # LlamaIndex: the flushed turn reached Engram, its block recalled it, and so did the retriever
    # (a turn that never left Memory's buffer would show only the other pages' memories here)
    block = done.stdout.split("<engram>\n", 1)[-1].split("</engram>", 1)[0]
    assert re.search(r"^- \[\d{4}-\d\d-\d\d\] two of my guests are vegan$", block, re.MULTILINE)
    assert re.search(r"^\S+ two of my guests are vegan \d{4}-", done.stdout, re.MULTILINE)
