"""What the ``run`` flags change in the profile: each flag is a shortcut for one dotted profile
path, and a few flags also clear the setting they replace (``--rate`` clears the profile's
concurrency, ``--duration`` its request count). ``--set`` reaches every other field."""

from __future__ import annotations

import argparse
from typing import Any

from loadgen.errors import ConfigError

# CLI flag -> dotted profile path. Flags are shortcuts; --set reaches every other field.
FLAG_PATHS = {
    "model": "target.model",
    "endpoint": "target.endpoint",
    "api_key_env": "target.api_key_env",
    "transport": "target.transport",
    "prompt_format": "target.prompt_format",
    "timeout": "target.timeout_s",
    "concurrency": "load.concurrency",
    "rate": "load.rate",
    "arrival": "load.arrival",
    "burstiness": "load.burstiness",
    "max_concurrency": "load.max_concurrency",
    "warmup": "load.warmup_requests",
    "repeats": "load.repeats",
    "reset_path": "target.reset_path",
    "num_requests": "workload.num_requests",
    "duration": "workload.duration_s",
    "until": "load.until",
    "seed": "workload.seed",
    "tokenizer": "workload.prompt.tokenizer",
    "input_tokens": "workload.input_tokens",
    "output_tokens": "workload.output_tokens",
    "batch_size": "workload.batch_size",
    "dataset": "workload.dataset.path",
    "trace": "workload.trace.path",
    "time_scale": "workload.trace.time_scale",
    "workers": "client.workers",
    "ray": "client.ray",
    "out": "output.dir",
    "track": "output.track",
    "track_uri": "output.track_uri",
    "run_id": "output.run_id",
    "name": "name",
}


def overrides(a: argparse.Namespace) -> dict[str, Any]:
    """The profile changes the ``run`` flags ask for, as dotted paths (None clears a setting)."""
    out: dict[str, Any] = {}
    for flag, path in FLAG_PATHS.items():
        v = getattr(a, flag, None)
        if v is not None:
            out[path] = v
    # A limit given on the command line replaces the profile's other one (a profile's
    # num_requests would otherwise end a --duration 60 run after 200 requests), unless both are.
    if getattr(a, "duration", None) is not None and getattr(a, "num_requests", None) is None:
        out["workload.num_requests"] = None
    elif getattr(a, "num_requests", None) is not None and getattr(a, "duration", None) is None:
        out["workload.duration_s"] = None
    if a.rate is not None:
        out["load.concurrency"] = None
    elif a.concurrency is not None:
        out["load.rate"] = None
    if getattr(a, "trace", None) is not None:  # a trace's own times schedule the run
        out.setdefault("load.concurrency", None)
        out.setdefault("load.rate", None)
    urls = getattr(a, "url", None)
    if urls:  # one --url replaces the profile's replicas; several are the replicas
        many = len(urls) > 1
        out.update({"target.url": None if many else urls[0], "target.urls": urls if many else None})
    if getattr(a, "no_preflight", None):
        out["target.preflight"] = False
    if getattr(a, "keep_answers", None):
        out["output.answers.keep"] = True
    if getattr(a, "records", None):
        out["output.records"] = a.records
    if a.sim is not None:
        out["target.url"] = out["target.urls"] = None
        out["sim.preset"] = a.sim
    if a.sweep is not None:
        knob, sep, values = a.sweep.partition("=")
        if not sep or knob.strip() not in ("concurrency", "rate"):
            raise ConfigError(
                f"--sweep {a.sweep!r}: expected concurrency=VALUES or rate=VALUES, e.g. "
                f"--sweep concurrency=1,2,4,8 or --sweep rate=2..20:10",
                what="flags",
            )
        series: Any = values.strip()
        if "," in series:
            series = [v.strip() for v in series.split(",") if v.strip()]
        sweep: dict[str, Any] = {knob.strip(): series}
        if a.stage_duration is not None:
            sweep["stage_duration_s"] = a.stage_duration
        if a.ramp is not None:
            sweep["ramp_s"] = a.ramp
        out.update(
            {"load.sweep": sweep, "load.concurrency": None, "load.rate": None, "load.max_concurrency": None}
        )
    elif a.stage_duration is not None or a.ramp is not None:
        raise ConfigError(
            "--stage-duration and --ramp shape the stages of a --sweep; add --sweep "
            "(or set load.sweep in the profile and use --set load.sweep.ramp_s=...)",
            what="flags",
        )
    return out
