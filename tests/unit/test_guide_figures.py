"""scripts/guide_figures.py's check, on pages and outputs made here: a figure within its
tolerance passes, one beyond it fails naming both, a lead gone from its page or on it twice
fails, and --write puts the run's figure on the page as the page writes it. Its run against the
real pages and commands is the slow tier's (tests/slow/test_guide_figures.py)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location(
        "loadgen_guide_figures", ROOT / "scripts" / "guide_figures.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def quotes(script):
    q = script.Quote
    return (
        q("p.md", r"measured ", "run", lambda o: o.at("counts", "ok"), "{:.0f}"),
        q("p.md", r"energy ", "run", lambda o: o.at("j"), "{:.3f}", rel=0.03),
        q("p.md", r"table \| ", "run", lambda o: o.at("big"), "{:,.0f}", rel=0.05),
    )


def output(script, ok=160, j=0.2548, big=4993.4):
    return {"run": script.Output({"counts": {"ok": ok}, "j": j, "big": big}, {}, "")}


PAGE = "intro\nwe measured 160 requests\nenergy 0.256 J\n| table | 5,029 |\n"


def test_figures_within_their_tolerance_pass_and_name_their_line(script):
    checks = script.check(quotes(script), output(script), {"p.md": PAGE})
    assert [(c.ok, c.line, c.page_value) for c in checks] == [
        (True, 2, 160),
        (True, 3, 0.256),
        (True, 4, 5029),
    ]


def test_a_count_that_moved_and_an_energy_beyond_three_percent_fail(script):
    checks = script.check(quotes(script), output(script, ok=144, j=0.27), {"p.md": PAGE})
    assert [c.ok for c in checks] == [False, False, True]
    assert checks[0].why == "the run's 144 is beyond ±0 of the page's"
    assert checks[1].why == "the run's 0.270 is beyond ±0.0081 of the page's"


def test_a_lead_gone_from_the_page_or_on_it_twice_fails(script):
    gone = script.check(quotes(script), output(script), {"p.md": PAGE.replace("measured", "sent")})
    assert (gone[0].ok, gone[0].line, gone[0].why) == (False, 0, "its lead is not on the page")
    twice = script.check(quotes(script), output(script), {"p.md": PAGE + "energy 0.1\n"})
    assert (twice[1].ok, twice[1].why) == (False, "its lead is on the page 2 times")


def test_write_puts_the_runs_figures_on_the_page_in_its_format(script):
    new = script.write(quotes(script), output(script, ok=144, j=0.27, big=12345.6), {"p.md": PAGE})
    assert new["p.md"] == "intro\nwe measured 144 requests\nenergy 0.270 J\n| table | 12,346 |\n"
    assert all(c.ok for c in script.check(quotes(script), output(script, ok=144, j=0.27, big=12345.6), new))


def test_every_quote_names_a_registered_command_and_an_existing_page(script):
    names = {c.name for c in script.COMMANDS}
    for q in script.QUOTES:
        assert q.command in names and (ROOT / q.page).is_file(), q
        assert q.rel > 0 or q.abs > 0 or q.fmt == "{:.0f}", q  # only whole counts are held exactly


def test_every_quote_leads_to_exactly_one_figure_on_its_page(script):
    """A page edited under a quote fails here, in the fast tier, before the slow run says so."""
    pages = {q.page: (ROOT / q.page).read_text() for q in script.QUOTES}
    for q in script.QUOTES:
        found = re.findall(q.lead + script.NUMBER + (f"(?={q.trail})" if q.trail else ""), pages[q.page])
        assert len(found) == 1, (q.page, q.lead, found)
