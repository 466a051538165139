"""Output agreement between runs, end to end: real runs of the built-in task set against the
scripted server over real sockets, compared with `loadgen compare` and judged by `loadgen gate`.

The server answers every task right (``answer: "solve"``); the "changed" server also gets the
prompts whose crc32 % WRONG_MOD == 0 wrong (``wrong_mod``), so exactly those k prompts of N
change and agreement must be exactly (N - k) / N. The prompt a request sent is rebuilt from the
profile's workload (records keep its digest, not its text).
"""

from __future__ import annotations

import asyncio
import json
import zlib
from pathlib import Path

import pytest

from loadgen.analysis.compare import compare
from loadgen.analysis.gate import GateRules, gate, load_rules
from loadgen.errors import ConfigError
from loadgen.report import compare as compare_report
from loadgen.runner import api
from loadgen.testing.server import StreamServer
from loadgen.workload import Workload

import helpers
from helpers import cli

ROOT = Path(__file__).parents[2]
N = 40
WRONG_MOD = 4


def profile(url: str, out: Path, keep: bool = True):
    return helpers.profile(
        out,
        url,
        **{
            "target.ignore_eos": False,
            "workload.num_requests": N,
            "workload.output_tokens": 16,
            "workload.tasks": {},
            "load.concurrency": 4,
            "load.warmup_requests": 0,
            "output.answers": {"keep": keep},
            "output.dir": str(out),
        },
    )


def run(url: str, out: Path, keep: bool = True) -> Path:
    return asyncio.run(api.run_async(profile(url, out, keep))).run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """base and same: two runs of one solving server; changed: a server that gets the
    crc32 % 4 == 0 prompts wrong; unkept: the solving server, answers not kept."""
    out = tmp_path_factory.mktemp("runs")
    with StreamServer(ttft_ms=2, itl_ms=1, answer="solve") as good:
        base, same = run(good.url, out), run(good.url, out)
        unkept = run(good.url, out, keep=False)
    with StreamServer(ttft_ms=2, itl_ms=1, answer="solve", wrong_mod=WRONG_MOD) as bad:
        changed = run(bad.url, out)
    return {"base": base, "same": same, "changed": changed, "unkept": unkept}


@pytest.fixture(scope="module")
def changed_ids() -> list[int]:
    """The ids whose prompt (the last user message, as the server reads it) the rule changes:
    10 of the 40 tasks of seed 0."""
    work = Workload(profile("http://127.0.0.1:9", Path("unused")).workload, "chat")
    ids = [i for i in range(N) if zlib.crc32(str(work.request(i).prompt).encode()) % WRONG_MOD == 0]
    assert len(ids) == 10 and ids[:5] == [1, 2, 3, 5, 7]
    return ids


def rules(*entries: dict) -> GateRules:
    return GateRules.model_validate({"rules": list(entries), "bootstrap": {"resamples": 100}})


@pytest.mark.slow
class TestCompare:
    @pytest.mark.slow
    def test_two_runs_of_one_server_agree_exactly(self, runs):
        """Same prompts, same server: every answer identical, the common prefix the whole answer."""
        cmp = compare([runs["base"], runs["same"]])
        assert cmp.answers_kept == (True, True)
        assert cmp.agreements == (
            {
                "compared": 40,
                "identical": 40,
                "agreement": 1.0,
                "mean_common_prefix_tokens": 2.625,
                "mean_answer_tokens": 2.625,
                "prompts_differ": 0,
                "only_in_one": 0,
                "truncated": 0,
                "first_differences": [],
            },
        )

    @pytest.mark.slow
    def test_wrong_mod_changes_exactly_the_k_prompts(self, runs, changed_ids):
        """Agreement is exactly (N - k) / N; the first differences are the first changed ids,
        each the baseline's answer made wrong the server's way (a number off by one, else the
        first word changed), so a changed answer shares no whole leading piece: the common
        prefix is the unchanged answers' pieces over N."""
        a = compare([runs["base"], runs["changed"]]).agreements[0]
        k = len(changed_ids)
        assert (a["compared"], a["identical"], a["agreement"]) == (N, N - k, (N - k) / N) == (40, 30, 0.75)
        assert [d["id"] for d in a["first_differences"]] == changed_ids[:5]
        assert a["first_differences"] == [
            {"id": 1, "a": "desert yellow island tiger stone", "b": "alpha yellow island tiger stone"},
            {"id": 2, "a": "8189", "b": "8190"},
            {"id": 3, "a": "297", "b": "298"},
            {"id": 5, "a": "9750", "b": "9751"},
            {
                "id": 7,
                "a": "garden lantern island engine yellow ocean guitar river",
                "b": "alpha lantern island engine yellow ocean guitar river",
            },
        ]
        answers = {r["id"]: r["answer"] for r in _records(runs["base"])}
        unchanged = sum(len(p) for i, p in answers.items() if i not in changed_ids)
        assert (
            (a["mean_common_prefix_tokens"], a["mean_answer_tokens"])
            == (unchanged / N, 2.625)
            == (1.625, 2.625)
        )

    @pytest.mark.slow
    def test_the_console_shows_agreement_before_the_metrics_and_accuracy_side_by_side(self, runs, tmp_path):
        """`loadgen compare` prints the agreement line ahead of every latency, and each run's
        accuracy as a table row; compare.json carries the whole block."""
        r = cli("compare", str(runs["base"]), str(runs["changed"]), "-o", "cmp", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        line = "output agreement 75.0 % (30 of 40 identical; mean common prefix 1.6 of 2.6 tokens)"
        assert lines.index(line) < next(i for i, x in enumerate(lines) if x.startswith("## Metrics"))
        assert "| quality.accuracy | 1 | 0.75 | -25.0% |" in lines
        assert "| quality.scored | 40 | 40 | +0.0% |" in lines
        data = json.loads((tmp_path / "cmp" / "compare.json").read_text())["output_agreement"]
        assert data["runs"][runs["changed"].name]["agreement"] == 0.75

    @pytest.mark.slow
    def test_a_run_without_answers_says_how_to_keep_them(self, runs):
        cmp = compare([runs["base"], runs["unkept"]])
        assert cmp.answers_kept == (True, False) and cmp.agreements == (None,)
        assert (
            f"output agreement: not measured: {runs['unkept'].name} kept no answers; run with "
            "`--keep-answers` (profile: `output.answers.keep: true`) to compare what the runs said"
        ) in compare_report.markdown(cmp).splitlines()
        assert cmp.to_dict()["output_agreement"] == {
            "reference": runs["base"].name,
            "answers_kept": {runs["base"].name: True, runs["unkept"].name: False},
            "runs": {runs["unkept"].name: None},
        }

    def test_agreement_line_format(self):
        """One decimal for the percentage and the token means, none for a whole mean."""
        a = {"agreement": 0.975, "identical": 39, "compared": 40}
        a |= {"mean_common_prefix_tokens": 57.3, "mean_answer_tokens": 60.0}
        assert compare_report.agreement_line(a) == (
            "output agreement 97.5 % (39 of 40 identical; mean common prefix 57.3 of 60 tokens)"
        )


class TestGate:
    @pytest.mark.slow
    def test_identical_runs_pass_at_one(self, runs):
        res = gate(runs["same"], runs["base"], rules({"metric": "output_agreement", "min": 1.0}))
        assert res.exit_code == 0
        assert res.results[0].message == (
            f"output agreement 1 ({N} of {N} answers identical), bound >= 1; not resampled: within the bound"
        )

    @pytest.mark.slow
    def test_the_changed_run_fails_at_099_with_exit_1(self, runs, tmp_path):
        (tmp_path / "rules.yaml").write_text("rules:\n  - {metric: output_agreement, min: 0.99}\n")
        r = cli(
            "gate",
            str(runs["changed"]),
            "--baseline",
            str(runs["base"]),
            "--rules",
            "rules.yaml",
            cwd=tmp_path,
        )
        assert r.returncode == 1, r.stdout + r.stderr
        assert (
            "| ❌ FAIL | `output_agreement min 0.99` | — | 0.75 | — | — | ≥ 0.99 | output agreement 0.75 "
            "(30 of 40 answers identical), bound >= 0.99; not resampled: beyond the bound |"
        ) in r.stdout.splitlines()

    @pytest.mark.slow
    def test_no_kept_answers_is_an_error_naming_the_flag(self, runs):
        res = gate(runs["unkept"], runs["base"], rules({"metric": "output_agreement", "min": 0.95}))
        assert res.exit_code == 2
        assert res.results[0].status == "error"
        assert res.results[0].message == (
            "output_agreement cannot be measured: the candidate kept no answers; run both with "
            "--keep-answers (profile: output.answers.keep: true)"
        )

    @pytest.mark.slow
    def test_accuracy_is_the_candidates_own(self, runs):
        """quality.accuracy bounds the candidate's summary; the baseline's is shown beside it."""
        assert (
            gate(runs["same"], runs["base"], rules({"metric": "quality.accuracy", "min": 1.0})).exit_code == 0
        )
        res = gate(runs["changed"], runs["base"], rules({"metric": "quality.accuracy", "min": 1.0}))
        r = res.results[0]
        assert (res.exit_code, r.baseline, r.candidate) == (1, 1.0, 0.75)
        assert r.message == (
            "quality.accuracy of the candidate 0.75 (30 of 40 right), bound >= 1; "
            "not resampled: beyond the bound"
        )

    @pytest.mark.parametrize(
        "rule,problem",
        [
            (
                "{metric: output_agreement, min_ratio: 0.9}",
                "rules[0].min_ratio: output_agreement takes an absolute bound on the candidate (min or "
                "max), not one relative to the baseline; write e.g. {metric: output_agreement, min: 0.95}",
            ),
            (
                "{metric: output_agreement, stat: p50, min: 0.9}",
                "rules[0].stat: output_agreement is a fraction of the whole run and takes no stat; drop stat",
            ),
            (
                "{metric: quality.accuracy, min: 90}",
                "rules[0].min: quality.accuracy is a fraction; expected 0 to 1, got 90",
            ),
        ],
    )
    def test_bad_rules_name_the_yaml_path(self, tmp_path, rule, problem):
        path = tmp_path / "gate.yaml"
        path.write_text(f"rules:\n  - {rule}\n")
        with pytest.raises(ConfigError) as err:
            load_rules(path)
        assert err.value.problems[0] == problem


def _records(run_dir: Path) -> list[dict]:
    import orjson

    return [orjson.loads(line) for line in (run_dir / "requests.jsonl").read_bytes().splitlines() if line]
