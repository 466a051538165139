"""The conditions block: what was measured, with what, on what, and when (it comes first,
because a number without its conditions is meaningless)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen.report.blocks import Section, Table, Text, num
from loadgen.summary import Summary
from loadgen.summary.conditions import ConditionsClient


def conditions_section(summary: Summary) -> Section:
    cond = summary.get("conditions") or {}
    tgt = cond.get("target") or {}
    client = cond.get("client") or {}
    host = cond.get("host") or {}
    profile = cond.get("profile") or {}
    workload = profile.get("workload") or {}
    rows = [
        (
            "run",
            f"{summary.get('run_id')}"
            + (" (interrupted: partial results)" if summary.get("interrupted") else ""),
        ),
        ("target", f"{tgt.get('url')} ({tgt.get('endpoint')} endpoint)"),
        ("model", str(tgt.get("model"))),
        *server_rows(cond.get("server") or {}, tgt.get("builtin_simulator"), profile.get("sim")),
        ("load", load_shape(summary, see="; see Load stages")),
        ("requests", _requests(workload, cond.get("load") or {})),
        ("seed", str(cond.get("seed"))),
        ("labels", ", ".join(f"{k}={v}" for k, v in (cond.get("labels") or {}).items()) or "none"),
        ("client", _client(client)),
        (
            "python",
            f"{client.get('python_implementation', 'Python')} {client.get('python')}, "
            f"event loop {client.get('event_loop')}",
        ),
        ("host", f"{host.get('cpus')} CPUs ({host.get('cpus_usable')} usable), {host.get('platform')}"),
        ("started", str(summary.get("started_at"))),
        ("ended", str(summary.get("ended_at"))),
        (
            "measured window",
            f"{num((summary.get('window') or {}).get('seconds'))} s (first measured send to last end)",
        ),
        ("prompt lengths", prompt_lengths(cond)),
        ("token counts", _sources((summary.get("metrics") or {}).get("token_count_source"))),
    ]
    blocks: list = [Table(("condition", "value"), tuple(rows))]
    blocks += lengths_blocks(cond.get("lengths") or {})
    return Section("Conditions", tuple(blocks))


def prompt_lengths(cond: Mapping[str, Any]) -> str:
    """How the prompt lengths were made, and what the server's own count added to them (its
    chat template and special tokens, from usage.prompt_tokens) when it did."""
    if cond.get("prompt_lengths_approximate"):
        return (
            "approximate (no tokenizer: one common word counted as one token; the "
            "server's usage.prompt_tokens is the realised length)"
        )
    fit = cond.get("prompt_lengths") or {}
    how = str(fit.get("method") or "").removesuffix(" (exact)")
    text = f"exact ({how})" if how else "exact"
    extra = fit.get("server_extra_tokens") or {}
    p50, lo, hi = extra.get("p50"), extra.get("min"), extra.get("max")
    if p50 is None or (lo == hi == 0):
        return text
    each = f"{lo:+g} tokens on each" if lo == hi else f"{lo:+g} to {hi:+g} tokens (median {p50:+g}) across"
    return (
        f"{text}; the server counted {each} of {extra['count']} requests over the length sent "
        "(usage.prompt_tokens: its chat template and special tokens, not in the lengths asked for)"
    )


# What a summary written before ``conditions.server.sources`` was recorded kept: the OpenAI
# protocols' probe answers (the only probe then), read where they were heard.
_SOURCES_BEFORE_RECORDED = (("version", "/version"), ("models", "/v1/models"))


def simulator_sentence(sim: Mapping[str, Any], asked: Mapping[str, Any] | None) -> str:
    """The built-in simulator as a sentence: its preset, and only the settings the run set
    (the profile's ``sim`` section, ``asked``); every other setting is the preset's own."""
    config = sim.get("config") or {}
    preset = config.get("preset") or (asked or {}).get("preset") or "the default preset"
    chosen = {k: v for k, v in (asked or {}).items() if k != "preset" and v is not None}
    said = ", ".join(f"{k} {_flat(v) if isinstance(v, (dict, list)) else v}" for k, v in chosen.items())
    return f"built-in simulator, preset {preset}" + (f"; set: {said}" if said else "; the preset's settings")


def server_rows(
    server: Mapping[str, Any], sim: Any, asked: Mapping[str, Any] | None = None
) -> list[tuple[str, str]]:
    """What the server told us about itself: response headers, then one row per answer its
    protocol's probe kept (``server["sources"]``: each answer's key and the path it was heard
    at, saved with the run), then its /metrics labels. The saved run alone says how it is
    rendered: the live protocol registry is never asked."""
    rows = []
    if sim:
        rows.append(("backend", simulator_sentence(sim, asked)))
        cal = sim.get("calibration")
        if cal:  # how far the calibration table vouches for this preset (loadgen/sim/calibration.py)
            rows.append(("simulator calibration", f"{cal['summary']} (the table: {cal['table']})"))
    headers = server.get("headers") or {}
    rows.append(
        (
            "server headers",
            ", ".join(f"{k}: {v}" for k, v in headers.items()) or "none identifying the engine",
        )
    )
    for key, path in server.get("sources") or _SOURCES_BEFORE_RECORDED:
        row = _source_row(server, key, path)
        if row is not None:
            rows.append(row)
    labels = server.get("metrics_labels")
    if labels:
        rows.append(("server /metrics labels", metrics_labels_text(labels)))
    pre = preflight_text(server.get("preflight"))
    if pre:
        rows.append(("preflight", pre))
    return rows


def preflight_text(pre: Any) -> str | None:
    """What the unmeasured request before the load found (``conditions.server.preflight``)."""
    if not isinstance(pre, Mapping) or not pre.get("sent"):
        return None
    if pre.get("note"):
        return f"{pre['note']} (it answered {pre.get('error_class')}: {pre.get('message')})"
    if pre.get("ok"):
        return "the server took the run's request body"
    return f"failed ({pre.get('error_class')}: {pre.get('message')}); the load went ahead"


# Keys of a /v1/models entry left out of its row (the id leads it; the rest say nothing of the model).
_LISTING_SKIPPED = ("id", "object", "created", "permission", "root", "parent")


def _source_row(server: Mapping[str, Any], key: str, path: str) -> tuple[str, str] | None:
    """The row of one answer the probe kept under ``server[key]``, heard at ``path``."""
    value = server.get(key)
    if key == "version":
        return f"server {path}", _flat(value) if value is not None else "not served"
    if key == "models":  # an OpenAI /v1/models listing
        listed = []
        for m in (value or {}).get("data") or []:
            extra = {k: v for k, v in m.items() if k not in _LISTING_SKIPPED}
            listed.append(f"{m.get('id')}" + (f" ({_flat(extra)})" if extra else ""))
        return f"server {path}", "; ".join(listed) or f"HTTP {server.get('models_status')}, no models listed"
    if key == "model_metadata":  # a KServe v2 model's metadata; {name} in the path is the model's
        meta = value or {}
        return (
            f"server {path.format(name=meta.get('name'))}",
            _flat({k: meta[k] for k in ("platform", "versions") if k in meta}),
        )
    return (f"server {path}", _flat(value)) if value else None


def metrics_labels_text(labels: Mapping[str, Any]) -> str:
    """What the engine's metric labels and config gauges say of its configuration, flattened
    (labels whose value is None are left out)."""
    parts = [f"engine {labels.get('engine')}"]
    parts += [f"{k}: {', '.join(v)}" for k, v in (labels.get("labels") or {}).items()]
    parts += [f"{k}={v:g}" for k, v in (labels.get("config") or {}).items()]
    for name, info in (labels.get("info") or {}).items():
        kept = ", ".join(
            f"{k}={v}" for k, v in info.items() if v not in ("None", "") and not k.startswith("_")
        )
        parts.append(f"{name}: {kept}")
    return "; ".join(parts)


def load_shape(summary: Mapping[str, Any], see: str = "") -> str:
    """How the load was offered, in one sentence, the console's ``load`` line and the report's:
    a sweep (its knob, values and stage length) or stages (their names), a trace replay (its
    requests over its scaled span), a closed loop or an open loop (its process, burstiness and
    cap), with the warm-up; ``see`` follows a staged run's sentence (the report's pointer)."""
    cond = summary.get("conditions") or {}
    load, stages = cond.get("load") or {}, summary.get("stages") or []
    traffic = cond.get("traffic") or {}
    trace, sweep = traffic.get("trace"), load.get("sweep")
    names = ": " + ", ".join(str(st.get("name")) for st in stages) if stages else ""
    if sweep:
        knob = "concurrency" if sweep.get("concurrency") is not None else "rate"
        length = ", ".join(
            f"{k} {sweep[k]}" for k in ("stage_duration_s", "stage_requests", "ramp_s") if sweep.get(k)
        )
        return f"sweep of {knob} {sweep[knob]}" + (f" ({length})" if length else "") + names + see
    if load.get("stages") or stages:
        return f"{len(load.get('stages') or stages)} stages{names}{see}"
    warm = (
        f"; {load.get('warmup_requests', 0)} warm-up requests (excluded)"
        if load.get("warmup_requests")
        else ""
    )
    if trace is not None:
        scale, span = trace.get("time_scale") or 1.0, trace.get("span_s") or 0.0
        return (
            f"trace replay {trace.get('path')}: {trace.get('requests')} requests over "
            f"{span * scale:.1f} s (the trace's {span:.1f} s, time scale {scale:g}){warm}"
        )
    if load.get("concurrency"):
        return f"closed loop, concurrency {load['concurrency']}{warm}"
    cap = f", max {load['max_concurrency']} in flight" if load.get("max_concurrency") else ""
    burst = f" (burstiness {load.get('burstiness')})" if load.get("arrival") == "gamma" else ""
    return f"open loop, {load.get('rate')} req/s {load.get('arrival')}{burst}{cap}{warm}"


def lengths_blocks(lengths: Mapping[str, Any]) -> list:
    requested = lengths.get("requested") or {}
    realised = lengths.get("realised") or {}
    sampled = realised.get("sampled") or {}
    rows = []
    for key, label, server_key in (
        ("input_tokens", "input tokens", "server_prompt_tokens"),
        ("output_tokens", "output tokens", "server_output_tokens"),
    ):
        rows.append(
            (label, length_spec(requested.get(key)), _dist(sampled.get(key)), _dist(realised.get(server_key)))
        )
    out: list = [
        Text(
            "Lengths, requested vs realised (mean / p50 / p99 / max tokens; "
            "server-reported = the server's usage counts of ok requests):"
        ),
        Table(("", "requested", "sampled by the workload", "server-reported"), tuple(rows)),
    ]
    short = realised.get("output_tokens_short_of_requested")
    if short:
        out.append(
            Text(
                f"{short} ok requests returned fewer output tokens than requested "
                "(the server stopped early: ignore_eos not honoured?)."
            )
        )
    return out


def length_spec(spec: Any) -> str:
    if not isinstance(spec, dict):
        return str(spec)
    kind = spec.get("kind", "?")
    if kind == "fixed":
        return f"fixed {spec.get('value')}"
    if kind == "empirical":
        values = spec.get("values")
        return (
            f"empirical ({len(values)} values)"
            if isinstance(values, list)
            else f"empirical {spec.get('path', '')}".strip()
        )
    rest = ", ".join(f"{k}={v}" for k, v in spec.items() if k != "kind" and v is not None)
    return f"{kind} ({rest})"


def _dist(d: Mapping[str, Any] | None) -> str:
    if not d or not d.get("count"):
        return "-"
    return " / ".join(num(d.get(k), 1) for k in ("mean", "p50", "p99", "max"))


def _requests(workload: dict, load: dict) -> str:
    if load.get("sweep") or load.get("stages"):
        return "per stage; see Load stages"
    n, dur = workload.get("num_requests"), workload.get("duration_s")
    parts = ([f"{n} measured requests"] if n is not None else []) + ([f"for at most {dur} s"] if dur else [])
    return ", ".join(parts) or "-"


def _client(client: ConditionsClient) -> str:
    commit = client.get("git_commit")
    return (
        f"loadgen {client.get('loadgen_version')}"
        + (f" (git {commit})" if commit else "")
        + f", transport {client.get('transport')}"
    )


def _sources(counts: dict | None) -> str:
    names = {
        "usage": "server usage (final count)",
        "continuous_usage": "server per-chunk usage",
        "tokenizer": "tokenizer",
        "chunks": "one per chunk (approximate)",
    }
    if not counts:
        return "-"
    return ", ".join(f"{names.get(k, k)}: {v} requests" for k, v in counts.items())


def _flat(obj: Any) -> str:
    if isinstance(obj, dict):
        return ", ".join(f"{k}={_flat(v)}" for k, v in obj.items())
    if isinstance(obj, list):
        return "[" + ", ".join(_flat(v) for v in obj) + "]"
    return str(obj)
