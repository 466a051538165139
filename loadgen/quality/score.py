"""Scoring an answer against the expected one: a normalised comparison, the same for every task.

The rules are deliberately few and written down, so an accuracy figure means the same thing in
every run: ``normalize`` forgives what an instruction-tuned model adds without being wrong (case,
spacing, a closing full stop); anything else (a leading "The answer is", markdown, quotes)
counts as not following the instruction and scores false under "exact".
"""

from __future__ import annotations

MATCHES: tuple[str, ...] = ("exact", "contains")

# Closing punctuation a sentence-minded model appends to a bare answer ("475.").
_TRAILING = ".,;:!?"


def normalize(text: str) -> str:
    """``text`` stripped, casefolded, with every run of whitespace (newlines, tabs) made one
    space and trailing ``. , ; : ! ?`` removed: "  Apple\\n River. " -> "apple river"."""
    return " ".join(text.casefold().split()).rstrip(_TRAILING).rstrip()


def score(answer: str, expected: str, match: str = "exact") -> bool:
    """Whether ``answer`` is right. Both sides are normalised first; then "exact" asks for
    equality, "contains" for the expected text anywhere in the answer (for answers a model may
    phrase around: "The capital is Paris" contains "paris"). An empty expected answer never
    matches: a task without an answer cannot be passed by saying nothing."""
    if match not in MATCHES:
        raise ValueError(f"unknown match {match!r}; valid: {', '.join(MATCHES)}")
    want = normalize(expected)
    got = normalize(answer)
    if not want:
        return False
    return got == want if match == "exact" else want in got
