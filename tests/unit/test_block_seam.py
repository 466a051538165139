"""The summary's optional blocks are one list (runner/blocks.py): every block in it has a
summary type, a report entry and a console entry (or says where it is shown instead), and
``summarize`` has no block of its own: a block added to the list reaches summary.json."""

from __future__ import annotations

import re
from pathlib import Path

from loadgen.cli import console
from loadgen.report import sections
from loadgen.runner import blocks, repeats_blocks
from loadgen.summary import StageSummary, Summary

import helpers

ROOT = Path(__file__).resolve().parents[2]


def test_every_block_has_a_type_a_section_and_a_console_entry():
    names = set(blocks.NAMES)
    assert len(names) == len(blocks.NAMES), "a block named twice"
    assert names - set(Summary.__annotations__) == set(), "blocks with no field in Summary"
    staged = {b.name for b in blocks.BLOCKS if b.stage}
    assert staged - set(StageSummary.__annotations__) == set(), "stage blocks with no field in StageSummary"
    for where in (sections, console):
        drawn = {name for name, _ in (where.REPORT if where is sections else where.CONSOLE)}
        said = set(where.NOT_SHOWN)
        assert names - drawn - said == set(), f"{where.__name__}: blocks with no entry"
        assert drawn & said == set(), f"{where.__name__}: drawn and said to be elsewhere"
        assert where.CORE & names == set(), f"{where.__name__}: a block marked core"
        assert set(where.NOT_SHOWN) <= names


def test_every_block_is_pooled_by_repeats_or_says_why_not():
    """A repeated run's parent pools each block of BLOCKS (in BLOCKS' order, so a pooling may
    read an earlier block) or names why it does not; nothing else is pooled."""
    pooled = [name for name, _make in repeats_blocks.POOLED]
    assert set(pooled).isdisjoint(repeats_blocks.NOT_POOLED)
    assert sorted([*pooled, *repeats_blocks.NOT_POOLED]) == sorted(b.name for b in blocks.BLOCKS)
    order = [b.name for b in blocks.BLOCKS]
    assert pooled == sorted(pooled, key=order.index)
    assert all(why.strip() for why in repeats_blocks.NOT_POOLED.values())


def test_summarize_names_no_block():
    """The per-block wiring is gone from summarize.py: no block is assigned there by name."""
    src = (ROOT / "loadgen/runner/summarize.py").read_text()
    assigned = set(re.findall(r'summary\["(\w+)"\]\s*=', src))
    assert assigned == {"sla"}, assigned  # the SLA verdict: last and once


def test_a_block_added_to_the_list_reaches_the_summary_and_its_stages(tmp_path, monkeypatch):
    """A new block is its builder and its list entry (types and renderers aside): it reaches
    summary.json and, marked ``stage``, each stage's summary, after the blocks before it."""
    seen = []

    def probe(m, built):
        seen.append(sorted(built))
        return {"requests": len(m.table), "stage": None if m.stage is None else m.stage.stage.index}

    monkeypatch.setattr(blocks, "BLOCKS", (*blocks.BLOCKS, blocks.Block("probe", probe, stage=True)))
    sweep = {"concurrency": [1, 2], "stage_requests": 4, "ramp_s": 0}
    profile = helpers.profile(
        tmp_path,
        None,
        sim={"time_scale": 0.0},
        load__concurrency=None,
        workload__num_requests=None,
        load__sweep=sweep,
        load__warmup_requests=0,
    )
    res = helpers.run(profile)
    assert [s["probe"] for s in res.summary["stages"]] == [
        {"requests": 4, "stage": 0},
        {"requests": 4, "stage": 1},
    ]
    assert res.summary["probe"] == {"requests": 8, "stage": None}
    assert "stages" in seen[-1] and "curve" in seen[-1]  # the run's probe ran after the stages
