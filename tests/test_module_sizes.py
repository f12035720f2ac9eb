"""House rule (issue 13): no module in src/ over 450 lines, so a newcomer can read any of them whole.
Checked here so the rule cannot drift: split a module by concern when it grows past the bound."""

from pathlib import Path

import engram

MAX_LINES = 450


def test_no_module_is_over_the_bound():
    root = Path(engram.__file__).parent
    sizes = {p.relative_to(root): len(p.read_text(encoding="utf-8").splitlines()) for p in root.rglob("*.py")}
    assert len(sizes) > 50  # the package itself, not an empty install
    too_long = {str(p): n for p, n in sizes.items() if n > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"
