"""What a tracked run logs, read from its folder: one list for every backend.

MLflow and W&B get the same three things, so a run looks alike in both and a test can hold
either to summary.json: the run's conditions as parameters (the whole ``conditions`` block,
flattened to dotted names), its headline figures as metrics (the list the console and compare
show, ``analysis.repeats.HEADLINE``, plus the goodput, the SLA verdict and the counts), and
its files as artifacts. Everything comes from the files the run already wrote, so tracking
can never change a result, and a run tracked later (``--resume``) logs what it logged then.

Secrets: summary.json is already redacted; parameters go through the run's ``Scrubber`` as
well (a header value or an API key a server echoed into a condition), and a string that is a
URL loses its user:password, so a credential never becomes a tracked parameter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import orjson

from loadgen import metric_defs
from loadgen.analysis.record_store import STORE
from loadgen.analysis.repeats import HEADLINE, figure_name
from loadgen.redact import Scrubber, redact_url
from loadgen.result import REQUESTS, load_summary
from loadgen.tracking.base import TrackedRun

__all__ = [
    "ARTIFACTS",
    "MAX_KEY",
    "MAX_VALUE",
    "RECORDS",
    "artifacts",
    "flatten",
    "metrics",
    "params",
    "run_facts",
    "safe_key",
    "stage_metrics",
]

# MLflow refuses a key over 250 characters; a value is cut at 500 so the runs table stays
# readable (MLflow takes 6000; a cut value says how long it was).
MAX_KEY: Final = 250
MAX_VALUE: Final = 500
# The run folder's files logged as artifacts, those it has (an embeddings run has no plots).
ARTIFACTS: Final = ("summary.json", "report.md", "report.html")
# Logged only when asked (``records=True``): they are the bulk of a run folder.
# (a columnar run's records are its store: requests.jsonl is gone once the load ended)
RECORDS: Final = (REQUESTS, STORE, "requests.parquet")
# Beside the headline: the SLA verdict as a number (1 pass, 0 fail; absent when there is no
# verdict), the goodput's two other figures and the counts.
_EXTRA: Final = {
    "goodput_output_tokens_per_s": ("metrics", "goodput", "output_tokens_per_s"),
    "goodput_attained_fraction": ("metrics", "goodput", "attained_fraction"),
    "sent": ("counts", "sent"),
    "ok": ("counts", "ok"),
    "failed": ("counts", "failed"),
}
_KEY_CHARS: Final = frozenset("_-. /:")


def run_facts(
    run_dir: Path,
    *,
    scrubber: Scrubber | None = None,
    records: bool = False,
    group: str | None = None,
    tags: dict[str, str] | None = None,
) -> TrackedRun:
    """A run folder as a backend logs it: named by its folder, grouped by its profile's name."""
    summary = load_summary(run_dir)
    profile = summary["conditions"].get("profile") or {}
    return TrackedRun(
        name=run_dir.name,
        group=group or str(profile.get("name") or "loadgen"),
        params=params(summary, scrubber),
        metrics=metrics(summary),
        artifacts=artifacts(run_dir, records=records),
        steps=stage_metrics(summary),
        tags={"loadgen.run_id": str(summary.get("run_id") or run_dir.name), **(tags or {})},
    )


def flatten(data: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """Nested dicts as one level of dotted keys; lists and scalars are leaves."""
    out: dict[str, object] = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def params(summary: Mapping[str, object], scrubber: Scrubber | None = None) -> dict[str, str]:
    """The run's conditions as parameters: dotted names, values as text (a string as it is,
    anything else as compact JSON), scrubbed, URLs without logins, each cut to ``MAX_VALUE``."""
    scrub = scrubber or Scrubber()
    out: dict[str, str] = {}
    conditions = summary.get("conditions")
    for key, value in flatten(conditions if isinstance(conditions, Mapping) else {}).items():
        text = value if isinstance(value, str) else orjson.dumps(value).decode()
        if isinstance(value, str) and "://" in value:
            text = redact_url(value) or ""
        out[safe_key(scrub.scrub(key))] = _cap(scrub.scrub(text))
    return out


def metrics(summary: Mapping[str, object]) -> dict[str, float]:
    """The headline figures the run has, by the name a gate rule gives them (``p99 ttft_ms``),
    exactly as summary.json holds them; a figure that is absent or not a number is left out."""
    out: dict[str, float] = {}
    for metric, stat in HEADLINE:
        if metric_defs.present(summary, metric):
            _put(out, figure_name(metric, stat), metric_defs.lookup(summary, metric, stat))
    for name, path in _EXTRA.items():
        node: object = summary
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        _put(out, name, node)
    sla = summary.get("sla")
    verdict = sla.get("verdict") if isinstance(sla, Mapping) else None
    if verdict in ("pass", "fail"):
        out["sla_pass"] = 1.0 if verdict == "pass" else 0.0
    return out


def stage_metrics(summary: Mapping[str, object]) -> list[tuple[int, dict[str, float]]]:
    """A sweep's or staged run's stages, each its index and its own figures as ``metrics``
    gives them, named ``stage/<figure>`` (the run's own figures keep the plain names: MLflow
    shows a series' last step as the run's value, which must stay the whole run's)."""
    stages = summary.get("stages")
    out = []
    for stage in stages if isinstance(stages, list) else []:
        out.append((int(stage["index"]), {f"stage/{k}": v for k, v in metrics(stage).items()}))
    return out


def artifacts(run_dir: Path, *, records: bool = False) -> list[Path]:
    """The run folder's files to log (``ARTIFACTS``, and ``RECORDS`` when asked), those present."""
    names = ARTIFACTS + (RECORDS if records else ())
    return [run_dir / n for n in names if (run_dir / n).is_file()]


def _put(out: dict[str, float], name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return
    out[name] = float(value)


def safe_key(key: str) -> str:
    """A name both backends accept: letters, digits and ``_-. /:``, at most ``MAX_KEY`` long."""
    return "".join(c if c.isalnum() or c in _KEY_CHARS else "_" for c in key)[:MAX_KEY]


def _cap(text: str) -> str:
    if len(text) <= MAX_VALUE:
        return text
    tail = f"... ({len(text)} chars)"
    return text[: MAX_VALUE - len(tail)] + tail
