"""report.html's interactive section: the data it embeds, the down-sample of a large run, and,
in headless Chromium, the verdict and goodput it recomputes for an SLO set in the URL hash,
which must equal what loadgen.analysis computes for that SLO on the same records.

The fixture runs (tests/fixtures/runs) are copied first; the 100,000-request run and the
multi-stage run are synthetic (tests/stage_runs.py), summarized by loadgen's own code.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from stage_runs import Stage, make_run

from loadgen.analysis.metrics import request_frame, summarize
from loadgen.config import SlaConfig
from loadgen.config.sla import MAX_ERROR_RATE
from loadgen.report import write_report
from loadgen.report.interactive_data import KEEP_SLOWEST, MAX_REQUESTS, sample_rows, slowest_order
from loadgen.result import load_summary, load_table

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="/usr/bin/chromium not installed (Debian package 'chromium'; .ci/run installs it)",
)
COLUMNS = {"id", "stage", "status", "error", "prompt", "output", "send", "first", "last", "end"}
COLUMNS |= {"ttft_ms", "tpot_ms", "e2e_ms"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """base-a and with-errors with their reports written."""
    root = tmp_path_factory.mktemp("runs")
    for name in ("base-a", "with-errors"):
        write_report(shutil.copytree(RUNS / name, root / name))
    return root


@pytest.fixture(scope="module")
def big_run(tmp_path_factory) -> Path:
    """100,000 measured requests (one stage at concurrency 64), its report written."""
    run = make_run(tmp_path_factory.mktemp("big") / "big", [Stage(64, 100_000, 50.0, 10.0)])
    write_report(run)
    return run


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    run = make_run(
        tmp_path_factory.mktemp("sweep") / "sweep",
        [Stage(1, 20, 50, 10), Stage(4, 40, 60, 12), Stage(8, 60, 90, 20)],
    )
    write_report(run)
    return run


def embedded(run: Path) -> dict:
    page = (run / "report.html").read_text()
    raw = re.search(r'<script type="application/json" id="lg-data">(.*?)</script>', page, re.S).group(1)
    return json.loads(raw)


class TestSample:
    def test_a_run_within_the_limit_is_embedded_whole(self):
        """Every row, in record order, each standing for itself."""
        rows, weight = sample_rows(np.array([4, 0, 3, 1, 2]))
        assert rows.tolist() == [0, 1, 2, 3, 4] and weight == 1.0

    def test_a_large_run_keeps_the_slowest_and_a_fixed_uniform_sample(self):
        """At most MAX_REQUESTS rows: the KEEP_SLOWEST first of the order always, the same draw
        every time, each drawn row standing for its share of the rest."""
        order = np.arange(100_000)[::-1].copy()  # row 99,999 is the slowest
        rows, weight = sample_rows(order)
        again, _ = sample_rows(order)
        assert len(rows) == MAX_REQUESTS and len(set(rows.tolist())) == MAX_REQUESTS
        assert set(order[:KEEP_SLOWEST].tolist()) <= set(rows.tolist())
        assert rows.tolist() == again.tolist() == sorted(rows.tolist())
        assert weight == (100_000 - KEEP_SLOWEST) / (MAX_REQUESTS - KEEP_SLOWEST)


@pytest.mark.slow
class TestEmbeddedData:
    def test_columns_hold_every_measured_request_and_nothing_else(self, runs):
        """One row per measured request (warm-up excluded), numbers and error classes only."""
        run = runs / "with-errors"
        data, summary = embedded(run), load_summary(run)
        cols = data["cols"]
        assert set(cols) == COLUMNS
        assert {len(v) for v in cols.values()} == {summary["counts"]["sent"]} == {100}
        assert cols["status"].count(0) == summary["counts"]["ok"] == 90
        assert cols["status"].count(1) == summary["counts"]["failed"] == 10
        assert {e for e in cols["error"] if e is not None} == set(summary["counts"]["errors_by_class"])
        assert data["sample"] == {
            "measured": 100,
            "embedded": 100,
            "sampled": False,
            "weight": 1.0,
            "seed": 0,
            "slowest_kept": 0,
            "slowest_rows": data["sample"]["slowest_rows"],
        }
        assert data["run"]["seconds"] == summary["window"]["seconds"]
        assert cols["send"] == sorted(cols["send"])

    def test_report_md_lists_the_slowest_requests(self, runs):
        """report.md's interactive section is its table of the slowest, slowest first."""
        run = runs / "with-errors"
        table = load_table(run)
        slowest = int(slowest_order(table)[0])
        send, end = table.column("t_send_ns"), table.column("t_end_ns")
        measured = ~table.column("warmup")
        assert (end - send)[measured].max() == end[slowest] - send[slowest]
        md = (run / "report.md").read_text()
        section = md.split("## Interactive", 1)[1].split("\n## ", 1)[0]
        assert "All 100 measured requests are embedded" in section
        first = [ln for ln in section.splitlines() if ln.startswith("| ")][2]
        assert first.startswith(f"| {int(table.column('id')[slowest])} | 0 | ")

    @pytest.mark.slow
    def test_a_100000_request_run_embeds_the_sample_and_says_so(self, big_run):
        data = embedded(big_run)
        sample = data["sample"]
        assert (sample["measured"], sample["embedded"], sample["sampled"]) == (100_000, MAX_REQUESTS, True)
        assert sample["slowest_kept"] == KEEP_SLOWEST and len(data["cols"]["id"]) == MAX_REQUESTS
        table = load_table(big_run)
        slowest_ids = table.column("id")[slowest_order(table)[:KEEP_SLOWEST]].tolist()
        assert [data["cols"]["id"][i] for i in sample["slowest_rows"]] == slowest_ids
        page = (big_run / "report.html").read_text()
        assert (
            '<p id="lg-sample" data-sampled="true" data-measured="100000" data-embedded="20000">'
            "Down-sampled: 20,000 of 100,000 measured requests are embedded (the 200 slowest, always, "
            "and 19,800 of the others drawn uniformly with seed 0, each standing for 5.04 requests)"
        ) in page
        size = (big_run / "report.html").stat().st_size
        print(f"report.html of a 100,000-request run: {size:,} bytes")
        assert size < 4_000_000


def expected(run: Path, slos: dict[str, float], pct: str) -> dict:
    """What loadgen.analysis says for these SLOs: the page's verdict is the run's error-rate
    rule and, for each SLO set, "<pct> <slo> <= value"."""
    profile_sla = load_summary(run)["conditions"]["profile"]["sla"]
    sla = SlaConfig.model_validate(
        {
            **slos,
            "max_error_rate": profile_sla.get("max_error_rate", MAX_ERROR_RATE),
            "rules": [f"{pct} {name} <= {value}" for name, value in slos.items()],
        }
    )
    return summarize(load_table(run), sla=sla)


# Appended to a copy of a report: wheel, then drag, over the timeline, as a user would; records
# the view after each. uPlot ignores a move of no movement (a stray event), hence movementX/Y;
# it reads a drag's end after the move has been handled, hence the timeout.
USER = """<script>
window.addEventListener('load', function () {
  var tl = document.getElementById('lg-timeline'), over = tl.querySelector('.u-over');
  var r = over.getBoundingClientRect(), out = { before: JSON.parse(tl.dataset.view) };
  function at(fx, fy, more) {
    return Object.assign({ clientX: r.left + r.width * fx, clientY: r.top + r.height * fy, button: 0,
      bubbles: true, cancelable: true, view: window }, more || {});
  }
  over.dispatchEvent(new WheelEvent('wheel', at(0.5, 0.5, { deltaY: -100 })));
  out.wheeled = JSON.parse(tl.dataset.view);
  document.getElementById('lg-reset').click();
  over.dispatchEvent(new MouseEvent('mousedown', at(0.25, 0.25)));
  over.dispatchEvent(new MouseEvent('mousemove', at(0.75, 0.75, { movementX: 50, movementY: 50 })));
  setTimeout(function () {
    document.dispatchEvent(new MouseEvent('mouseup', at(0.75, 0.75)));
    out.dragged = JSON.parse(tl.dataset.view);
    document.body.dataset.user = JSON.stringify(out);
  }, 100);
});
</script>"""


# Appended to a copy of a report: the pointer over the middle of each plot in turn; records each
# plot's legend values (the timeline has none: its readout below it) while the pointer is there.
HOVER = """<script>
window.addEventListener('load', function () {
  var plots = document.querySelectorAll('#lg-interactive .uplot'), out = [], i = 0;
  function next() {
    if (i === plots.length) { document.body.dataset.hover = JSON.stringify(out); return; }
    var p = plots[i], over = p.querySelector('.u-over'), r = over.getBoundingClientRect();
    over.dispatchEvent(new MouseEvent('mouseenter', { bubbles: false }));
    over.dispatchEvent(new MouseEvent('mousemove', { clientX: r.left + r.width * 0.5,
      clientY: r.top + r.height * 0.5, movementX: 5, movementY: 5, bubbles: true, view: window }));
    setTimeout(function () {
      var cells = p.querySelectorAll('.u-value');
      var values = Array.prototype.map.call(cells, function (v) { return v.textContent; });
      var inTimeline = p.parentNode.id === 'lg-timeline';
      out.push(inTimeline ? [document.getElementById('lg-hover').textContent] : values);
      i++; next();
    }, 50);
  }
  next();
});
</script>"""


# Appended to a copy of a report opened at a section's anchor: types a TTFT SLO as a user would.
TYPE = """<script>
window.addEventListener('load', function () {
  var out = { at_load: location.hash }, box = document.getElementById('lg-slo-ttft_ms');
  box.value = '45';
  box.dispatchEvent(new Event('input', { bubbles: true }));
  out.after = location.hash;
  out.verdict = document.getElementById('lg-verdict').dataset.verdict;
  out.goodput = document.getElementById('lg-goodput').dataset.value;
  document.body.dataset.typed = JSON.stringify(out);
});
</script>"""


def page_state(run: Path, tmp: Path, fragment: str, page: str = "report.html") -> tuple[dict, str]:
    """Chromium's DOM of the report after its script ran, with ``fragment`` as the URL hash:
    the attributes of <body> and every element with an id, and the DOM."""
    url = (run / page).as_uri() + "#" + fragment
    profile = tmp / f"chromium-profile-{len(list(tmp.glob('chromium-profile-*')))}"
    cmd = [
        str(CHROMIUM),
        *("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"),
        *("--disable-component-update", "--disable-sync", f"--user-data-dir={profile}"),
        *("--window-size=1280,4000", "--virtual-time-budget=10000", "--dump-dom", url),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    out = {}
    for tag, attrs in re.findall(r"<(\w+)((?:\s+[\w-]+=\"[^\"]*\")*)\s*>", dom):
        fields = {k: html.unescape(v) for k, v in re.findall(r'([\w-]+)="([^"]*)"', attrs)}
        key = fields.get("id") or (tag if tag == "body" else None)
        if key:
            out[key] = fields
    body = out["body"]
    assert body["data-loaded"] == "1" and json.loads(body["data-errors"]) == []
    assert out["lg-interactive"]["data-ready"] == "1"
    return out, dom


def slider_rows(dom: str, how: str) -> dict[str, str]:
    """{figure: value} of the load slider's readout rows labelled ``how``."""
    row = r'<tr data-figure="([^"]*)" data-value="([^"]*)"><td>[^<]*</td><td[^>]*>[^<]*</td><td>'
    return dict(re.findall(row + how, dom))


@pytest.mark.slow
@needs_chromium
class TestInChromium:
    @pytest.mark.parametrize(
        ("run_name", "slos", "pct", "verdict"),
        [
            ("with-errors", {"ttft_ms": 50.0}, "p99", "fail"),  # failures count against attainment
            ("base-a", {"ttft_ms": 60.0, "tpot_ms": 10.2}, "p90", "pass"),
            ("base-a", {"ttft_ms": 52.0, "e2e_ms": 285.0}, "p50", "fail"),
        ],
    )
    def test_verdict_and_goodput_for_an_slo_in_the_hash_are_loadgens(
        self, runs, tmp_path, run_name, slos, pct, verdict
    ):
        """The SLOs in the hash (the others cleared) and the percentile give the page's verdict,
        rule values and goodput, each equal to what summarize computes with that SLA."""
        run = runs / run_name
        cleared = {name: "" for name in ("ttft_ms", "tpot_ms", "e2e_ms")}
        params = {**cleared, **{k: f"{v:g}" for k, v in slos.items()}}
        fragment = "&".join(f"slo.{k}={v}" for k, v in params.items()) + f"&pct={pct}"
        state, dom = page_state(run, tmp_path, fragment)
        want = expected(run, slos, pct)
        assert state["lg-verdict"]["data-verdict"] == want["sla"]["verdict"] == verdict
        goodput = want["metrics"]["goodput"]
        assert float(state["lg-goodput"]["data-value"]) == goodput["requests_per_s"]
        assert float(state["lg-goodput-tokens"]["data-value"]) == goodput["output_tokens_per_s"]
        assert float(state["lg-attained"]["data-value"]) == goodput["attained_fraction"]
        shown = re.findall(r'<tr data-rule="([^"]*)" data-value="([^"]*)" data-passed="(\w+)"', dom)
        details = want["sla"]["details"]
        assert [html.unescape(r) for r, _, _ in shown] == [d["rule"] for d in details]
        assert [float(v) for _, v, _ in shown] == [d["value"] for d in details]
        assert [p == "true" for _, _, p in shown] == [d["passed"] for d in details]

    def test_typing_an_slo_recomputes_and_the_url_follows(self, runs, tmp_path):
        """Opened at a section's anchor, the page keeps it; typing 45 in the TTFT box gives
        summarize's verdict and goodput for TTFT <= 45 ms (the run's TPOT SLO, 15 ms, kept) and
        puts the inputs in the URL."""
        run = runs / "with-errors"
        page = (run / "report.html").read_text().replace("</body>", TYPE + "</body>")
        (tmp_path / "typed.html").write_text(page)
        state, _ = page_state(tmp_path, tmp_path, "latency", page="typed.html")
        typed = json.loads(state["body"]["data-typed"])
        want = expected(run, {"ttft_ms": 45.0, "tpot_ms": 15.0}, "p99")
        assert typed["at_load"] == "#latency"
        assert typed["after"] == "#slo.ttft_ms=45&slo.tpot_ms=15&slo.e2e_ms=&pct=p99"
        assert typed["verdict"] == want["sla"]["verdict"] == "fail"
        assert float(typed["goodput"]) == want["metrics"]["goodput"]["requests_per_s"]

    def test_slowest_button_zooms_to_the_slowest_request(self, runs, tmp_path):
        """Pressed twice (slowest=2 in the hash), it shows loadgen's second slowest request."""
        run = runs / "with-errors"
        table = load_table(run)
        second = int(table.column("id")[slowest_order(table)[1]])
        state, _ = page_state(run, tmp_path, "slowest=2")
        assert state["lg-slowest"]["data-shown"] == str(second)
        assert state["lg-hover"]["data-row"] == str(embedded(run)["cols"]["id"].index(second))

    def test_timeline_colours_each_request_by_its_tpot_against_the_slo(self, runs, tmp_path):
        """Green within the TPOT SLO, red over it, black failed: as many of each as the
        request frame has ok requests within, over, and failed requests."""
        run = runs / "with-errors"
        frame = request_frame(load_table(run))
        frame = frame[~frame["warmup"]]
        ok, tpot = frame["ok"].astype(bool), frame["tpot_ms"]
        state, _ = page_state(run, tmp_path, "slo.tpot_ms=10.03")
        timeline = state["lg-timeline"]
        counts = {k: int(timeline[f"data-{k}"]) for k in ("within", "over", "none", "failed")}
        assert counts == {
            "within": int((ok & (tpot <= 10.03)).sum()),
            "over": int((ok & (tpot > 10.03)).sum()),
            "none": int((ok & tpot.isna()).sum()),
            "failed": int((~ok).sum()),
        }
        assert counts["within"] and counts["over"] and counts["failed"] == 10

    def test_timeline_zooms_by_wheel_and_by_drag(self, runs, tmp_path):
        """A wheel step up zooms to 0.8 of the span around the pointer; a drag from a quarter to
        three quarters of the plot shows that middle half, in time and in requests."""
        run = runs / "with-errors"
        page = (run / "report.html").read_text().replace("</body>", USER + "</body>")
        (tmp_path / "user.html").write_text(page)
        state, _ = page_state(tmp_path, tmp_path, "", page="user.html")
        views = json.loads(state["body"]["data-user"])
        full, wheeled, dragged = views["before"], views["wheeled"], views["dragged"]
        for lo, hi in (("x0", "x1"), ("y0", "y1")):
            span = full[hi] - full[lo]
            assert wheeled[hi] - wheeled[lo] == pytest.approx(0.8 * span, rel=1e-9)
            assert dragged[lo] == pytest.approx(full[lo] + 0.25 * span, abs=0.01 * span)
            assert dragged[hi] == pytest.approx(full[lo] + 0.75 * span, abs=0.01 * span)

    def test_every_plot_shows_the_values_under_the_pointer(self, sweep, tmp_path):
        """Each CDF and load curve fills its legend with the values at the pointer; the timeline
        names the request under it."""
        page = (sweep / "report.html").read_text().replace("</body>", HOVER + "</body>")
        (tmp_path / "hover.html").write_text(page)
        state, _ = page_state(tmp_path, tmp_path, "", page="hover.html")
        shown = json.loads(state["body"]["data-hover"])
        assert len(shown) == 3 + 5 + 1  # the CDFs, the load curves, the timeline
        for values in shown[:-1]:
            assert values and all(v != "-" for v in values), values
        assert re.fullmatch(r"[\d,.]+ ms; request \d+ \(stage \d, c=\d+\): sent at .*", shown[-1][0])

    def test_load_slider_reads_the_curves_between_stages(self, sweep, tmp_path):
        """At c=6, halfway between the stages at c=4 and c=8, each figure is the mean of theirs
        and is labelled interpolated; at c=4 it is the stage's own, labelled measured."""
        points = load_summary(sweep)["curve"]["points"]
        state, dom = page_state(sweep, tmp_path, "load=6")
        assert state["lg-load-value"]["data-value"] == "6"
        rows = slider_rows(dom, "interpolated")
        assert float(rows["TTFT p99"]) == pytest.approx(
            (points[1]["ttft_ms"]["p99"] + points[2]["ttft_ms"]["p99"]) / 2, rel=1e-12
        )
        assert float(rows["output tokens/s"]) == pytest.approx(
            (points[1]["output_tokens_per_s"] + points[2]["output_tokens_per_s"]) / 2, rel=1e-12
        )
        _, dom = page_state(sweep, tmp_path, "load=4")
        rows = slider_rows(dom, "measured")
        assert float(rows["TPOT p50"]) == points[1]["tpot_ms"]["p50"]

    @pytest.mark.slow
    def test_a_100000_request_page_renders_its_estimate(self, big_run, tmp_path):
        """The down-sampled page loads without an error and labels its verdict an estimate."""
        state, dom = page_state(big_run, tmp_path, "slo.ttft_ms=52&pct=p99")
        exact = expected(big_run, {"ttft_ms": 52.0, "tpot_ms": 20.0}, "p99")  # TPOT: the run's own SLO
        assert state["lg-verdict"]["data-verdict"] == exact["sla"]["verdict"] == "fail"
        assert "(estimated)" in dom.split('id="lg-verdict"', 1)[1].split("</output>", 1)[0]
        goodput = exact["metrics"]["goodput"]
        assert float(state["lg-attained"]["data-value"]) == pytest.approx(
            goodput["attained_fraction"], abs=0.02
        )
        assert float(state["lg-attained"]["data-value"]) != goodput["attained_fraction"]  # an estimate
