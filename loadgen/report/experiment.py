"""An experiment's report: ``experiment.md`` and a self-contained ``experiment.html``.

Read from the folder alone (``experiment.json`` and each configuration's run folders), so
``loadgen report`` can redraw it: the ranking first (capacity at the SLA with its interval, and
whether each configuration is distinguishable from the next), then each cell's state, the
curves overlaid, the Pareto plot, the output agreement between configurations that kept their
answers, and every condition the configurations' runs differ in.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from loadgen.analysis.repeats import TOO_FEW, bounded
from loadgen.analysis.saved_answers import agreements, answers_kept
from loadgen.report.blocks import Alert, Block, Image, Section, Table, Text
from loadgen.report.experiment_conditions import calibration_table, differing_rows
from loadgen.report.experiment_plots import (
    curve_images,
    mean_points,
    pareto_image,
    pareto_points,
    short_labels,
)
from loadgen.report.html import render_html
from loadgen.report.markdown import render_markdown
from loadgen.result import load_summary

__all__ = ["EXPERIMENT", "write_experiment_report"]

EXPERIMENT = "experiment.json"
# Servers loadgen started listen on ports it picked: their URLs differ by that alone.
ASSIGNED_PORTS = ("sim", "serve")


def _num(v: object, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def ranking_table(ranking: Mapping[str, Any]) -> Table:
    rows = []
    for r in ranking.get("rows", []):
        f = r["figures"]
        cap = f["capacity_rps"]
        ci = f"{cap['low']:.1f} - {cap['high']:.1f}" if bounded(cap) else TOO_FEW if cap["n"] > 1 else "-"
        vs = r.get("versus_next")
        rank = "-" if r["rank"] is None else str(r["rank"])
        rows.append(
            (
                rank,
                r["label"],
                _num(cap["mean"]),
                ci,
                _num(f["goodput_rps"]["mean"]),
                _num(f["output_tokens_per_s"]["mean"], 0),
                _num(f["usd_per_million_output_tokens"]["mean"], 3),
                _num(f["output_tokens_per_s_per_gpu"]["mean"], 0),
                _num((f.get("energy_per_output_token_j") or {}).get("mean"), 3),
                f"{r['repeats']}/{r['planned']}",
                "; ".join(r["bases"]),
                "-" if vs is None else vs["text"],
            )
        )
    return Table(
        (
            "#",
            "configuration",
            "capacity req/s",
            "95% CI",
            "goodput req/s",
            "output tok/s",
            "$ / 1M out tok",
            "tok/s per GPU",
            "J / out tok",
            "repeats",
            "how found",
            "versus the next",
        ),
        tuple(rows),
        "rlrrrrrrrrll",
    )


def _cells_table(state: Mapping[str, Any]) -> Table:
    rows = []
    for cid in state["order"]:
        c = state["cells"][cid]
        error = (c.get("error") or "").splitlines()
        rows.append((cid, c["state"], str(c["attempts"]), error[0] if error else ""))
    return Table(
        ("cell", "state", "attempts", "error (first line; the rest in experiment.json)"), tuple(rows)
    )


def _done_summaries(folder: Path, state: Mapping[str, Any], config: str) -> list[Any]:
    out = []
    for cid in state["order"]:
        c = state["cells"][cid]
        if c["config"] == config and c["state"] == "done":
            out.append((folder / c["run_dir"], load_summary(folder / c["run_dir"])))
    return out


def _agreement(folder: Path, runs: Mapping[str, list[Any]], first: str | None) -> list[Any]:
    """Each configuration's answers against the top-ranked one's (first repeats)."""
    ran = [n for n in runs if runs[n]]
    names = sorted(ran, key=lambda n: n != first)  # the reference first, the others in order
    dirs = [runs[n][0][0] for n in names]
    if len(dirs) < 2:
        return [Text("Only one configuration ran: nothing to compare answers with.")]
    kept = [answers_kept(runs[n][0][1]) for n in names]
    if not any(kept):
        return [
            Text(
                "No configuration kept its answers (`output.answers.keep: true` in the workload keeps them)."
            )
        ]
    rows = []
    for name, a in zip(names[1:], agreements(dirs, kept)):
        rows.append(
            (
                name,
                "-" if a is None or a["agreement"] is None else f"{a['agreement'] * 100:.1f} %",
                "-" if a is None else f"{a['identical']} of {a['compared']}",
            )
        )
    return [
        Text(f"Reference: {names[0]} (repeat 1)."),
        Table(("configuration", "agreement", "identical"), tuple(rows)),
    ]


def _conditions(
    labels: list[str], conditions: list[Any], ports_assigned: bool, short: dict[str, str]
) -> list[Block]:
    """The conditions the configurations' first repeats differ in, one readable value each."""
    rows = differing_rows(conditions, ports_assigned=ports_assigned) if len(conditions) > 1 else []
    if not rows:
        return [Text("none")]
    return [
        Table(("condition", *(short[label] for label in labels)), tuple(rows)),
        Text(
            "A length distribution reads mean / p50 / p99; fields that differ only in a timestamp, "
            "an id or a port loadgen picked are left out; each configuration's first repeat."
        ),
    ]


def build(folder: Path) -> tuple[str, list[Section], dict[str, bytes]]:
    state = orjson.loads((folder / EXPERIMENT).read_bytes())
    ranking = state.get("ranking") or {}
    labels = {c["id"]: c["label"] for c in state["configs"]}
    runs = {
        labels[c["id"]]: _done_summaries(folder, state, c["id"]) for c in state["configs"] if not c["results"]
    }
    short = short_labels(list(runs))
    curves = {short[label]: mean_points([s for _, s in rs]) for label, rs in runs.items() if rs}
    gpus = {short.get(c["label"], c["label"]): c["gpus"] for c in state["configs"]}
    images: list[Image] = [pareto_image(pareto_points(curves, gpus)), *curve_images(curves, state["sla"])]
    failed = [k for k, c in state["cells"].items() if c["state"] != "done"]
    head: list[Any] = [
        Text(
            f"{state['method']} per cell, {state['repeats']} repeats, seed {state['seed']}; SLA "
            + ", ".join(f"{k} < {v:g}" for k, v in state["sla"].items())
            + f", {state['attainment']:.0%} of requests meeting every SLO."
        ),
        ranking_table(ranking),
        Text(ranking.get("rule", "")),
    ]
    if failed:
        head.insert(0, Alert("warning", f"{len(failed)} cell(s) did not finish: " + ", ".join(failed)))
    ran = [label for label, rs in runs.items() if rs]
    firsts = [runs[label][0][1].get("conditions") or {} for label in ran]
    assigned = all(c["kind"] in ASSIGNED_PORTS for c in state["configs"])
    top = ranking["rows"][0]["label"] if ranking.get("rows") else None
    sections = [
        Section("Ranking", tuple(head)),
        Section("Pareto", (images[0],)),
        Section("Curves", tuple(images[1:])),
        Section("Output agreement", tuple(_agreement(folder, runs, top))),
        Section("Conditions that differ", tuple(_conditions(ran, firsts, assigned, short))),
        Section("Cells", (_cells_table(state),)),
    ]
    calibration = calibration_table(ran, firsts)
    if calibration is not None:
        pointer = Text("Each row with its source and conditions: docs/simulator.md#calibration.")
        sections.insert(-1, Section("Simulator calibration", (calibration, pointer)))
    return f"Experiment {state['name']} ({state['id']})", sections, {i.file: i.png for i in images}


def write_experiment_report(folder: str | Path) -> dict[str, Path]:
    """experiment.md, experiment.html and plots/experiment_*.png in ``folder``."""
    folder = Path(folder)
    title, sections, pngs = build(folder)
    (folder / "plots").mkdir(exist_ok=True)
    written = {}
    for name, png in pngs.items():
        (folder / name).write_bytes(png)
        written[name] = folder / name
    (folder / "experiment.md").write_text(render_markdown(title, sections))
    (folder / "experiment.html").write_text(render_html(title, sections))
    written.update({"experiment.md": folder / "experiment.md", "experiment.html": folder / "experiment.html"})
    return written
