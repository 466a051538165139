"""``loadgen capacity --repeats N``: the capacity search N times, one run folder.

Each repeat is a whole search (``capacity.run_capacity``) in ``repeat-K/``, with its own
simulator, connections and reset hook, and its own seed (the profile's, then +1, +2, ...): where
capacity is a saturation cliff, a search's error is mostly which bursts of arrivals its Poisson
schedules happened to hold (a 3-minute run 3 % past the cliff meets a 99 % attainment about half
the time: docs/metrics.md), so searches on the same schedules would repeat the same luck and
their spread would say nothing; on their own schedules the t interval covers the long-run
answer (bench/capacity_virtual.py --repeats). The parent
is a repeated run like ``run``'s (``runner.repeats``): every stage's records pooled, and the
``repeats`` block with ``capacity_rps`` over the repeats. Its ``capacity`` block (and
capacity.json) is the search of the repeat whose capacity is the median, with ``capacity_rps``
the repeats' mean and ``ci95`` the between-repeat t interval: a search's own interval comes
from one search's stages, and a gate on ``capacity_rps`` of two repeated searches should see
how much the capacity moves from search to search.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson

from loadgen.analysis.repeats import TOO_FEW, bounded
from loadgen.config import Profile
from loadgen.result import RunResult, write_summary
from loadgen.runner import capacity, repeats
from loadgen.summary import Capacity, Summary

CAPACITY_FIGURE = "capacity_rps"


def capacity_figures(summary: Summary) -> list[tuple[str, str | None, float | None]]:
    """A search's capacity, then the headline figures of all its stages pooled."""
    cap: Any = summary.get("capacity") or {}
    return [(CAPACITY_FIGURE, None, cap.get("capacity_rps")), *repeats.headline_figures(summary)]


async def run_capacity_repeated(profile: Profile, **search: Any) -> capacity.CapacityRun:
    """``capacity.run_capacity(profile, **search)`` ``profile.load.repeats`` times, pooled."""
    start = search.get("start_rate") or profile.load.rate or 1.0
    sla = capacity.capacity_profile(profile, start, search.get("slos")).sla

    async def one(p: Profile) -> RunResult:
        found = await capacity.run_capacity(p, **search)
        return RunResult(found.run_dir, found.summary)

    status = search.get("on_status") or (lambda _m: None)
    res = await repeats.run_repeated(
        profile,
        one,
        stop=search.get("stop"),
        status=status,
        figures=capacity_figures,
        sla=sla,
        seed_step=1,
    )
    summary = res.summary
    block = _capacity_block(res)
    summary["capacity"] = block
    write_summary(res.run_dir, summary)
    (res.run_dir / capacity.CAPACITY).write_bytes(orjson.dumps(block, option=orjson.OPT_INDENT_2))
    return capacity.CapacityRun(res.run_dir, summary, block)


def _capacity_block(res: RunResult) -> Capacity:
    """The median repeat's search, with the repeats' mean capacity and their t interval."""
    runs: Any = res.summary.get("repeats") or {}
    fig = next(f for f in runs["figures"] if f["figure"] == CAPACITY_FIGURE)
    found = [(v, r["path"]) for v, r in zip(fig["values"], runs["runs"]) if v is not None]
    first = repeats.load_repeat(res.run_dir, runs["runs"][0]["path"])
    if not found:
        return first["capacity"]
    found.sort()
    median = repeats.load_repeat(res.run_dir, found[(len(found) - 1) // 2][1])
    block: Any = copy.deepcopy(median["capacity"])
    block["capacity_rps"] = fig["mean"]
    block["ci95"] = [fig["low"], fig["high"]] if bounded(fig) else [None, None]
    block["statement"] = (
        f"mean {fig['mean']:.3g} req/s of the rates {len(found)} of {runs['count']} searches confirmed "
        f"(each held by its own confirming run; the mean itself was not run); the median search's: "
        f"{block.get('statement')}"
    )
    block["method"] = (
        f"mean of {fig['n']} repeated searches, each on its own seed (found in {len(found)} of "
        f"{runs['count']}), 95% CI: "
        + ("Student t over them" if bounded(fig) else f"none, {TOO_FEW}")
        + f"; stages shown: the median search's, {found[(len(found) - 1) // 2][1]}. "
        f"Each search: {block.get('method')}"
    )
    return block
