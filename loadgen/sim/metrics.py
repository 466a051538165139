"""Prometheus text exposition with vLLM's metric names, so scrapers written for vLLM work.

Counters are rendered as prometheus_client renders vLLM's: a Counter registered as
``vllm:prefix_cache_hits`` is scraped as ``vllm:prefix_cache_hits_total`` (its ``_created``
companion and vLLM's ``engine`` label are left out here, as for every other line).

Latency histograms are observed once per request when it finishes (wall-clock seconds measured
in the server, the same clock as the ground-truth log), not on the per-token hot path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the engine renders its counters through this module
    from .engine import Engine

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


class Histogram:
    __slots__ = ("name", "help", "bounds", "counts", "sum", "count")

    def __init__(self, name: str, help: str, bounds: tuple[float, ...]):
        self.name, self.help = name, help
        self.bounds = np.asarray(bounds)
        self.counts = np.zeros(len(bounds) + 1, dtype=np.int64)  # last: above every bound
        self.sum = 0.0
        self.count = 0

    def observe(self, values_s) -> None:
        v = np.asarray(values_s, dtype=np.float64).ravel()
        if v.size == 0:
            return
        # le semantics: a value equal to a bound falls in that bound's bucket
        self.counts += np.bincount(np.searchsorted(self.bounds, v, side="left"), minlength=len(self.counts))
        self.sum += float(v.sum())
        self.count += int(v.size)

    def render(self, labels: str) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        cum = np.cumsum(self.counts)
        for b, c in zip(self.bounds, cum[:-1]):
            out.append(f'{self.name}_bucket{{{labels},le="{b}"}} {c}')
        out.append(f'{self.name}_bucket{{{labels},le="+Inf"}} {cum[-1]}')
        out.append(f"{self.name}_sum{{{labels}}} {self.sum}")
        out.append(f"{self.name}_count{{{labels}}} {self.count}")
        return out


class Metrics:
    def __init__(self, model_name: str):
        esc = model_name.replace("\\", "\\\\").replace('"', '\\"')
        self.labels = f'model_name="{esc}"'
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Inter-token latency.", ITL_BUCKETS)
        self.tpot = Histogram("vllm:time_per_output_token_seconds", "Time per output token.", ITL_BUCKETS)
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "End-to-end request latency.", LATENCY_BUCKETS
        )
        self.queue = Histogram(
            "vllm:request_queue_time_seconds", "Time spent waiting in the queue.", LATENCY_BUCKETS
        )
        self.success: dict[str, int] = {}
        self.lag_s = 0.0  # wall time the pacing loop fell behind its schedule
        self.resets = 0  # POST /reset_prefix_cache or /flush_cache received

    def observe_request(self, rec: dict, chunk_ns: list[int]) -> None:
        """A finished request's ground-truth record into the counters and histograms; its inter-token
        gaps from ``chunk_ns``, the send times of its events (empty: not streamed)."""
        self.success[rec["finish_reason"]] = self.success.get(rec["finish_reason"], 0) + 1
        if rec["first_token_ns"]:
            self.ttft.observe([rec["ttft_ms"] / 1e3])
            self.queue.observe([rec["queue_ms"] / 1e3])
            self.e2e.observe([(rec["finish_ns"] - rec["arrival_ns"]) / 1e9])
            if rec["tpot_ms"] is not None:
                self.tpot.observe([rec["tpot_ms"] / 1e3])
            if len(chunk_ns) > 1:
                self.itl.observe([(b - a) / 1e9 for a, b in zip(chunk_ns, chunk_ns[1:])])

    def render_engine(self, engine: Engine) -> str:
        """The exposition of ``engine`` as it stands: its batch, queue, KV cache, token counts."""
        cache = engine.prefix_cache
        return self.render(
            engine.num_running,
            len(engine.waiting),
            engine.kv_usage,
            engine.prompt_tokens_total,
            engine.generation_tokens_total,
            preemptions=engine.preemptions,
            drafter=engine.drafter,
            prefix_cache_queries=cache.queries if cache else 0,
            prefix_cache_hits=cache.hits if cache else 0,
        )

    def render(
        self,
        running: int,
        waiting: int,
        kv_usage: float,
        prompt_total: int,
        generation_total: int,
        preemptions: int = 0,
        drafter: Any = None,
        prefix_cache_queries: int = 0,
        prefix_cache_hits: int = 0,
    ) -> str:
        lab = self.labels
        lines: list[str] = []

        def scalar(name: str, kind: str, help: str, value) -> None:
            lines.extend((f"# HELP {name} {help}", f"# TYPE {name} {kind}", f"{name}{{{lab}}} {value}"))

        scalar("vllm:num_requests_running", "gauge", "Requests in the running batch.", running)
        scalar("vllm:num_requests_waiting", "gauge", "Requests waiting to be admitted.", waiting)
        scalar("vllm:kv_cache_usage_perc", "gauge", "KV-cache block usage, 1 = full.", kv_usage)
        scalar("vllm:gpu_cache_usage_perc", "gauge", "Older name of kv_cache_usage_perc.", kv_usage)
        scalar(
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemption from the engine.",
            preemptions,
        )
        scalar("vllm:prompt_tokens_total", "counter", "Prompt tokens (cache hits too).", prompt_total)
        scalar("vllm:generation_tokens_total", "counter", "Generated tokens.", generation_total)
        # vLLM's help texts; both stay 0 with prefix caching off, as in vLLM.
        scalar(
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            prefix_cache_queries,
        )
        scalar(
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            prefix_cache_hits,
        )
        if drafter is not None:  # a draft model (speculative.py): vLLM's counters for it
            scalar(
                "vllm:spec_decode_num_drafts_total",
                "counter",
                "Number of spec decoding drafts.",
                drafter.drafts,
            )
            scalar(
                "vllm:spec_decode_num_draft_tokens_total",
                "counter",
                "Number of draft tokens.",
                drafter.draft_tokens,
            )
            scalar(
                "vllm:spec_decode_num_accepted_tokens_total",
                "counter",
                "Number of accepted tokens.",
                drafter.accepted_tokens,
            )
            name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
            lines += [f"# HELP {name} Accepted tokens per draft position.", f"# TYPE {name} counter"]
            lines += [
                f'{name}{{{lab},position="{i}"}} {n}' for i, n in enumerate(drafter.accepted_per_position)
            ]
        lines += [
            "# HELP vllm:request_success_total Finished requests by reason.",
            "# TYPE vllm:request_success_total counter",
        ]
        for reason, n in sorted(self.success.items()):
            lines.append(f'vllm:request_success_total{{{lab},finished_reason="{reason}"}} {n}')
        for h in (self.ttft, self.itl, self.tpot, self.e2e, self.queue):
            lines += h.render(lab)
        scalar(
            "loadgen_sim_pacing_lag_seconds_total",
            "counter",
            "Wall time the simulator ran behind its own schedule (it was the bottleneck).",
            self.lag_s,
        )
        scalar(
            "loadgen_sim_cache_resets_total",
            "counter",
            "Prefix-cache resets asked for (POST /reset_prefix_cache or /flush_cache).",
            self.resets,
        )
        return "\n".join(lines) + "\n"
