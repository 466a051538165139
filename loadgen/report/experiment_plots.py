"""An experiment's plots: every configuration's curve overlaid, and the Pareto plot.

A configuration's curve is its stages' points averaged over its finished repeats, stage by
stage (the repeats ran the same stages). The Pareto plot is the picture serving teams publish:
each stage of each configuration as a point of output tokens/s per user (1000 / median TPOT,
the speed one stream sees) against output tokens/s per GPU (what the hardware delivers); the
frontier joins the points no other point beats on both. A lever that moves a configuration
up and to the right is worth its price; one that trades along the frontier is a choice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.report.blocks import Image
from loadgen.report.plots import new_figure, to_png

__all__ = ["curve_images", "mean_points", "pareto_frontier", "pareto_image", "pareto_points", "short_labels"]

CURVES = (("ttft_ms", "p99", "p99 TTFT (ms)"), ("tpot_ms", "p99", "p99 TPOT (ms)"))


def short_labels(labels: Sequence[str]) -> dict[str, str]:
    """Legend labels without the words every label shares (one backend: its name)."""
    words = [label.split() for label in labels]
    common = set.intersection(*(set(w) for w in words)) if words else set()
    return {label: " ".join(x for x in w if x not in common) or label for label, w in zip(labels, words)}


def mean_points(summaries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Stage-by-stage means over repeats of the figures the plots draw."""
    per_repeat = [((s.get("curve") or {}).get("points") or []) for s in summaries]
    n = min((len(p) for p in per_repeat), default=0)
    out = []
    for i in range(n):
        pts = [p[i] for p in per_repeat]

        def mean(get: Any, pts: list[Any] = pts) -> float | None:
            xs = [v for v in (get(p) for p in pts) if v is not None]
            return sum(xs) / len(xs) if xs else None

        point = {
            "name": pts[0].get("name"),
            "throughput_rps": mean(lambda p: p.get("throughput_rps")),
            "output_tokens_per_s": mean(lambda p: p.get("output_tokens_per_s")),
            "tpot_p50": mean(lambda p: (p.get("tpot_ms") or {}).get("p50")),
        }
        for metric, stat, _ in CURVES:
            point[f"{metric}_{stat}"] = mean(lambda p, m=metric, s=stat: (p.get(m) or {}).get(s))
        out.append(point)
    return out


def curve_images(curves: Mapping[str, list[dict[str, Any]]], sla: Mapping[str, float]) -> list[Image]:
    """p99 TTFT and p99 TPOT against throughput, one line per configuration, the SLO dashed."""
    out = []
    for metric, stat, title in CURVES:
        fig = new_figure((9.6, 4.4))
        ax = fig.add_subplot()
        ax.grid(True, color="#eeeeee")
        for label, pts in curves.items():
            xy = [(p["throughput_rps"], p[f"{metric}_{stat}"]) for p in pts]
            xy = [(x, y) for x, y in xy if x is not None and y is not None]
            if xy:
                ax.plot(*zip(*xy), marker="o", ms=3.5, lw=1.3, label=label)
        if metric in sla:
            ax.axhline(sla[metric], color="#c62828", ls="--", lw=1.1, label=f"SLO {metric} < {sla[metric]:g}")
        ax.set_yscale("log")
        ax.set_xlabel("throughput (req/s, measured)")
        ax.set_ylabel(title)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        out.append(
            Image(
                f"plots/experiment_{metric}_{stat}.png",
                f"{title} against throughput",
                "Each configuration's stages, averaged over its repeats.",
                to_png(fig),
            )
        )
    return out


def pareto_points(
    curves: Mapping[str, list[dict[str, Any]]], gpus: Mapping[str, float]
) -> list[dict[str, Any]]:
    """(configuration, stage, tokens/s per user, tokens/s per GPU) of every averaged point."""
    out = []
    for label, pts in curves.items():
        for p in pts:
            if p["tpot_p50"] and p["output_tokens_per_s"] is not None:
                out.append(
                    {
                        "config": label,
                        "stage": p["name"],
                        "per_user": 1000.0 / p["tpot_p50"],
                        "per_gpu": p["output_tokens_per_s"] / gpus.get(label, 1.0),
                    }
                )
    return out


def pareto_frontier(points: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The points no other point beats on both axes, by tokens/s per GPU."""
    front = [
        p
        for p in points
        if not any(
            q["per_user"] >= p["per_user"]
            and q["per_gpu"] >= p["per_gpu"]
            and q is not p
            and (q["per_user"], q["per_gpu"]) != (p["per_user"], p["per_gpu"])
            for q in points
        )
    ]
    return sorted(front, key=lambda p: p["per_gpu"])


def pareto_image(points: Sequence[Mapping[str, Any]]) -> Image:
    fig = new_figure((9.6, 4.8))
    ax = fig.add_subplot()
    ax.grid(True, color="#eeeeee")
    for label in dict.fromkeys(p["config"] for p in points):
        mine = [p for p in points if p["config"] == label]  # in stage order: as the load grows
        ax.plot(
            [p["per_gpu"] for p in mine],
            [p["per_user"] for p in mine],
            marker="o",
            ms=4,
            lw=0.8,
            alpha=0.85,
            label=label,
        )
    front = pareto_frontier(points)
    if front:
        ax.plot(
            [p["per_gpu"] for p in front],
            [p["per_user"] for p in front],
            color="#111111",
            lw=2.2,
            alpha=0.35,
            label="Pareto frontier",
        )
    ax.set_xlabel("output tokens/s per GPU")
    ax.set_ylabel("output tokens/s per user (1000 / p50 TPOT)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.text(0.5, 0.5, "no stage finished", transform=ax.transAxes, ha="center", va="center")
    return Image(
        "plots/experiment_pareto.png",
        "Pareto: tokens/s per user against tokens/s per GPU",
        "Every stage of every configuration (averaged over repeats); the frontier joins the points "
        "no other beats on both axes.",
        to_png(fig),
    )
