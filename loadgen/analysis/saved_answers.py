"""What saved runs answered: whether a run kept its answers, reading them back, and each later
run's output agreement with the first (``compare``'s and ``gate``'s ``output_agreement``).

Pure: reads a saved run's ``summary.json`` block and its records (the store or requests.jsonl);
the comparison of two runs' answers is ``loadgen.analysis.agreement``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadgen.analysis.agreement import Answer, agreement, read_answers
from loadgen.analysis.record_store import STORE, store_rows
from loadgen.analysis.runs import REQUESTS
from loadgen.errors import ResultError
from loadgen.summary import Summary


def answers_kept(summary: Summary) -> bool:
    """Whether a run kept its measured answers (``output.answers.keep``): its summary counts
    them, so a run that kept none is known without reading its records."""
    quality = summary.get("quality")
    return bool(quality and quality.get("answers_kept"))


def run_answers(run: str | Path) -> dict[int, Answer]:
    """``read_answers`` of a saved run (its directory or its summary.json); a missing or
    damaged requests.jsonl is a ``ResultError``."""
    folder = Path(run).parent if Path(run).is_file() else Path(run)
    if (folder / STORE).exists():
        return _store_answers(folder / STORE)
    path = folder / REQUESTS
    if not path.exists():
        raise ResultError(f"{path} is missing: the run's answers are kept there")
    try:
        return read_answers(path)
    except ValueError as exc:
        raise ResultError(str(exc)) from None


def _store_answers(store: Path) -> dict[int, Answer]:
    """``read_answers`` of a record store: the same rows left out (warm-up, failed, none kept)."""
    cols = ("id", "warmup", "ok", "answer", "prompt_hash", "answer_truncated")
    return {
        int(r["id"]): Answer(r["prompt_hash"], tuple(r["answer"]), bool(r["answer_truncated"]))
        for r in store_rows(store, cols)
        if r["ok"] and not r["warmup"] and r["answer"] is not None
    }


def agreements(run_dirs: Sequence[Path], kept: Sequence[bool]) -> tuple[dict[str, Any] | None, ...]:
    """Each later run's agreement with the first (None where either kept no answers): the
    reference's answers and one other run's are held at a time, as pieces of text (never a
    DataFrame)."""
    if not kept[0]:
        return tuple(None for _ in run_dirs[1:])
    ref = run_answers(run_dirs[0])
    return tuple(agreement(ref, run_answers(d)) if k else None for d, k in zip(run_dirs[1:], kept[1:]))
