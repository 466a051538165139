"""Synthetic multi-stage runs on disk, no server: literal records with ``stage`` fields, summarized
by the same code a real run uses (``metrics.summarize``, ``curve.steady_state``, ``curve.curve``).

``make_run(dir, [Stage(c, n, ttft_ms, tpot_ms), ...])`` writes requests.jsonl and summary.json
of a closed-loop sweep: stage ``i`` runs ``n`` requests at concurrency ``c``, each request's TTFT
and TPOT its stage's values times a small deterministic jitter (so percentiles differ from
means and intervals have width), one request finishing every ``e2e / c``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.analysis import curve, metrics
from loadgen.config import SlaConfig
from loadgen.records import RequestRecord, write_records
from loadgen.result import REQUESTS, SCHEMA_VERSION, write_summary

SLA = SlaConfig.model_validate(
    {"ttft_ms": 100, "tpot_ms": 20, "rules": ["p99 ttft_ms < 100", "p99 tpot_ms < 20"]}
)
OUTPUT_TOKENS = 16
MS = 1_000_000
# What every summary has and these runs do not vary (load_summary checks the layout): a saved
# run's server answers, profile, realised lengths, client build, host and client health.
SAVED = json.loads((Path(__file__).parent / "fixtures" / "runs" / "base-a" / "summary.json").read_text())
KEPT = ("server", "profile", "prompt_lengths_approximate", "client", "host")


@dataclass(frozen=True)
class Stage:
    concurrency: int
    n: int
    ttft_ms: float
    tpot_ms: float


def _jitter(j: int) -> float:
    return 1.0 + 0.2 * (((j * 7) % 11) / 10 - 0.5)  # 0.9 .. 1.1, no randomness


def stage_records(index: int, stage: Stage, t0_ns: int, first_id: int) -> tuple[list[RequestRecord], int]:
    """The records of one stage from ``t0_ns``; returns them and the stage's end time."""
    out = []
    e2e_ns = int((stage.ttft_ms + stage.tpot_ms * (OUTPUT_TOKENS - 1)) * MS)
    gap = e2e_ns // stage.concurrency
    end = t0_ns
    for j in range(stage.n):
        send = t0_ns + j * gap
        first = send + int(stage.ttft_ms * _jitter(j) * MS)
        step = int(stage.tpot_ms * _jitter(j + 3) * MS)
        chunks = [first + k * step for k in range(OUTPUT_TOKENS)]
        out.append(
            RequestRecord(
                id=first_id + j,
                warmup=False,
                t_sched_ns=send,
                t_send_ns=send,
                requested_output_tokens=OUTPUT_TOKENS,
                requested_prompt_tokens=64,
                ok=True,
                http_status=200,
                t_first_byte_ns=first,
                t_first_token_ns=first,
                t_first_content_ns=first,
                t_end_ns=chunks[-1],
                chunk_times_ns=chunks,
                chunk_tokens=[1] * OUTPUT_TOKENS,
                prompt_tokens=64,
                output_tokens=OUTPUT_TOKENS,
                token_source="usage",
                prompt_tokens_source="usage",
                stage=index,
            )
        )
        end = max(end, chunks[-1])
    return out, end


def make_run(
    run_dir: Path,
    stages: list[Stage],
    *,
    labels: dict[str, str] | None = None,
    preset: str = "llama3-8b-fp16@h100",
    capacity: dict[str, Any] | None = None,
) -> Path:
    """Write a multi-stage run into ``run_dir`` (its name is the run id); returns ``run_dir``."""
    run_dir.mkdir(parents=True)
    records: list[RequestRecord] = []
    blocks = []
    t = 1_000 * MS
    for i, st in enumerate(stages):
        recs, end = stage_records(i, st, t, len(records))
        records += recs
        load = {"concurrency": st.concurrency, "rate": None, "duration_s": None, "num_requests": st.n}
        block: dict[str, Any] = {
            "index": i,
            "name": f"c={st.concurrency}",
            "load": load,
            "interrupted": False,
        }
        block.update(metrics.summarize(recs, sla=SLA))
        block["steady_state"] = curve.steady_state(recs)
        blocks.append(block)
        t = end + 100 * MS
    write_records(run_dir / REQUESTS, records)
    sweep = {"concurrency": [s.concurrency for s in stages], "stage_requests": [s.n for s in stages]}
    summary: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_dir.name,
        "started_at": "2025-01-01T00:00:00+00:00",
        "ended_at": "2025-01-01T00:01:00+00:00",
        "interrupted": False,
        "complete": True,
        "conditions": {
            **{key: SAVED["conditions"][key] for key in KEPT},
            "target": {
                "url": f"http://127.0.0.1/{run_dir.name}",
                "endpoint": "chat",
                "model": "m",
                "transport": "httptools",
                "builtin_simulator": {"config": {"preset": preset}},
            },
            "seed": 0,
            "load": {"concurrency": None, "rate": None, "sweep": sweep},
            "lengths": {
                "requested": {"input_tokens": 64, "output_tokens": OUTPUT_TOKENS},
                "realised": SAVED["conditions"]["lengths"]["realised"],
            },
            "labels": dict(labels or {}),
        },
        "client": SAVED["client"],
    }
    summary.update(metrics.summarize(records, sla=SLA))
    summary["stages"] = blocks
    summary["curve"] = curve.curve(blocks)
    if capacity is not None:
        summary["capacity"] = capacity
    write_summary(run_dir, summary)
    return run_dir
