"""The docs, the config comments and the code's comments say what is, not when it came to be: no
"this round", "the round before", "an earlier session" and the like (a result keeps its date instead:
"measured 2026-12-02 on ..."). A benchmark's "rounds" are not history and do not match."""

import re
from pathlib import Path

from helpers import REPO

HISTORY = [re.compile(p, re.I) for p in (
    r"\b(this|that|earlier|previous|prior|last|next|former) (round|session)\b",
    r"\bthe (round|session) (before|after)\b",
    r"\b(rounds?|sessions?) ago\b",
    r"\bmeasured earlier\b",  # a figure without its date
    r"\bnot measured again since\b",
    r"\bit has more now\b",
)]
WHERE = {"README.md": None, "docs": ".md", "conf": ".yaml", "mltrain": ".py", "tests": ".py", "scripts": ".py"}


def files() -> list[Path]:
    out = []
    for name, suffix in WHERE.items():
        path = REPO / name
        out += [path] if suffix is None else sorted(p for p in path.rglob(f"*{suffix}") if p != Path(__file__))
    return out


def history_lines(path: Path, root: Path = REPO) -> list[str]:
    """`file:line: text` of each line of `path` that tells history."""
    return [f"{path.relative_to(root)}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
            if any(p.search(line) for p in HISTORY)]


def test_no_history_phrases_in_docs_config_or_code():
    found = [hit for path in files() for hit in history_lines(path)]
    assert not found, "say what is (a result: its date), not when it changed:\n" + "\n".join(found)


def test_the_phrases_are_caught_and_a_benchmark_round_is_not(tmp_path):
    caught = ["as this round showed", "0.98× the round before", "found in an earlier session",
              "Measured earlier, on a busy machine", "prefetching (not measured again since)", "(it has more now)"]
    kept = ["3 interleaved rounds of 2,000 iterations", "round(0.1 * steps)", "measured 2026-12-02 on 2 cores",
            "the run dir holds an earlier run", "set for the session (pytest's scope)"]
    page = tmp_path / "page.md"
    page.write_text("\n".join(caught + kept))
    assert [line.split(": ", 1)[1] for line in history_lines(page, tmp_path)] == caught
