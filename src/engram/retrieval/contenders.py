"""Which candidates the cross-encoder scores: among raw turns, the leader's near-ties, not a fixed window.

After late interaction, a leading raw turn far ahead of the rest by raw MaxSim keeps its place under
the cross-encoder far more often than not, and where the cross-encoder reorders a long window of
chatty turns it trades as many right answers away as it finds. Among the LoCoMo dev questions where it
moved the first gold turn, it helped in 130 and hurt in 128; those it helped had a median margin of
0.006 between the two leading raw MaxSims, those it left alone 0.019. On distilled memories (facts,
playbooks, catalog items: short, cheap to score) it is worth its cost: skipping it whenever a turn
led cost R@1 and MRR on the evaluation corpus's dev split (0.676 -> 0.662, 0.786 -> 0.774). So a
window of raw turns gets only its leader's near-ties scored; a window holding any distilled memory is
scored whole. Measured on the development sets in docs/benchmarks.md ("Cross-encoder on near-ties").
"""

from __future__ import annotations

from collections.abc import Sequence

from engram.models import EpisodicMemory
from engram.retrieval.candidate import Candidate


def contenders(window: Sequence[Candidate], gap: float, query: str) -> int:
    """How many of the window's leading candidates the cross-encoder should score.

    A window of raw turns, led by ``window[0]`` (the head's best after late interaction and the
    multipliers): ``n = |{i : late_raw_i >= late_raw_0 - gap}|``, and the first ``n`` are scored; 0
    when the leader stands alone (``n < 2``: nothing for the cross-encoder to decide). The count says
    how many places are contested, the head's order which rows hold them (scoring the prefix through
    the last near-tie instead cost pairs and measured no better). The whole window when it holds a
    distilled memory, or when a raw score is missing (late interaction off, failed, or skipped).

    Leading echoes of the query (a row whose text is the query itself, ignoring case and surrounding
    space) are scored with the contenders but do not lead them: an agent writes the user's turn, then
    recalls by its words, and that turn, first by far, would otherwise leave every recall a clear leader.

    Example (turns): raw MaxSims [0.86, 0.85, 0.80, 0.855], gap 0.015 -> 3 (three within 0.015 of the
    leader); [0.86, 0.82, 0.80] -> 0; an echo then [0.76, 0.755] -> 3.
    """
    said = query.strip().casefold()
    echoes = 0
    while echoes < len(window) and window[echoes].memory.text.strip().casefold() == said:
        echoes += 1
    rest = window[echoes:]
    raws = [c.late_raw for c in rest]
    if not rest:
        return 0
    if any(not isinstance(c.memory, EpisodicMemory) for c in rest) or any(r is None for r in raws):
        return len(window)
    leader = raws[0]
    assert leader is not None
    n = sum(1 for r in raws if r is not None and r >= leader - gap)
    return echoes + n if n >= 2 else 0
