"""The accuracy corner on the built-in simulator: it answers the built-in tasks right at the
preset's modelled accuracy, an FP8 twin changes exactly the modelled answers, and every report
says the accuracy is modelled, not measured."""

from __future__ import annotations

import math

import pytest

from loadgen.analysis.agreement import agreement, read_answers
from loadgen.quality.score import score
from loadgen.quality.tasks import TaskSet
from loadgen.report import write_report
from loadgen.result import REQUESTS
from loadgen.sim import MODELS, SimConfig, answers

import helpers

N = 200  # profiles/quality.yaml's num_requests


def quality_run(tmp_path, preset: str):
    """profiles/quality.yaml's shape (200 built-in tasks, greedy, answers kept) on the simulator."""
    profile = helpers.profile(
        tmp_path / preset.replace("@", "_"),
        None,
        **{
            "target.endpoint": "chat",
            "target.ignore_eos": False,
            "sim": {"preset": preset, "time_scale": 0.0},
            "workload.num_requests": N,
            "workload.tasks": {},
            "workload.output_tokens": 32,
            "load.concurrency": 8,
            "load.warmup_requests": 0,
            "output.answers": {"keep": True},
        },
    )
    res = helpers.run(profile)
    write_report(res.run_dir)
    return res


def truth(preset: str, seed: int = 0) -> list[bool]:
    """The simulator's own verdict on each of the run's tasks: is its answer the right one?"""
    config = SimConfig.from_dict({"preset": preset})
    tasks = TaskSet(seed)
    return [answers.answer(config, tasks.task(i).prompt) == tasks.task(i).expected for i in range(N)]


class TestSolve:
    def test_every_built_in_task_is_recognised_and_solved(self):
        """The first 600 tasks of two seeds: the right answer scores, the wrong one never does."""
        for seed in (0, 5):
            tasks = TaskSet(seed)
            for i in range(600):
                t = tasks.task(i)
                right, wrong = answers.solve(t.prompt)
                assert right == t.expected
                assert not score(wrong, t.expected, t.match)

    def test_other_prompts_get_no_task_answer(self):
        assert answers.solve("Tell me about rivers.") is None
        assert answers.answer(SimConfig(), "What is the capital of France?") is None

    def test_the_answer_is_a_function_of_seed_and_prompt(self):
        """Same seed and prompt, same answer; the draw moves with the seed."""
        prompt = TaskSet(0).task(0).prompt
        assert answers.draw(0, prompt) == answers.draw(0, prompt)
        assert answers.draw(0, prompt) != answers.draw(1, prompt)
        a, b = SimConfig.from_dict({"seed": 3}), SimConfig.from_dict({"seed": 3})
        assert answers.answer(a, prompt) == answers.answer(b, prompt)

    def test_every_shipped_model_has_a_stated_base_accuracy(self):
        """A model added to the presets without a published score would answer nothing."""
        assert set(answers.BASE_ACCURACY) == set(MODELS)

    def test_modelled_accuracy_per_preset(self):
        """Base accuracy x the precision's retained share: FP8 weights keep 73.99 / 75.96."""
        assert answers.accuracy(SimConfig.from_dict({"preset": "llama3-8b-fp16@h100"})) == 0.796
        fp8 = answers.accuracy(SimConfig.from_dict({"preset": "llama3-8b-fp8@h100"}))
        assert fp8 == pytest.approx(0.796 * 73.99 / 75.96)
        kv8 = SimConfig.from_dict({"preset": "llama3-8b-fp16-kvfp8@h100"})
        assert answers.accuracy(kv8) == 0.796  # no published FP8-KV loss: no answer changes
        model = answers.accuracy_model(SimConfig.from_dict({"preset": "mistral-7b-fp8@l40s"}))
        assert model["note"] == "modelled by the simulator, not measured"
        assert (model["base_accuracy"], model["weights"]["precision"]) == (0.522, "fp8")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("quality")
    return {p: quality_run(out, p) for p in ("llama3-8b-fp16@h100", "llama3-8b-fp8@h100")}


@pytest.mark.slow
class TestQualityRun:
    @pytest.mark.slow
    def test_accuracy_is_the_simulators_exactly_and_the_preset_within_the_binomial_band(self, runs):
        """200 tasks: the client's score equals the simulator's own verdicts, and that count is
        within 3 standard deviations of 200 x the modelled accuracy."""
        for preset, res in runs.items():
            q = res.summary["quality"]
            right = sum(truth(preset))
            assert (q["scored"], q["correct"]) == (N, right)
            p = answers.accuracy(SimConfig.from_dict({"preset": preset}))
            assert abs(right - N * p) <= 3 * math.sqrt(N * p * (1 - p))

    @pytest.mark.slow
    def test_fp8_twin_disagrees_on_exactly_the_modelled_answers(self, runs):
        """Output agreement FP16 vs FP8 = 1 - (tasks whose draw falls between the two accuracies)
        / 200: the simulator's ground truth, and only right-to-wrong flips."""
        fp16, fp8 = (read_answers(r.run_dir / REQUESTS) for r in runs.values())
        got = agreement(fp16, fp8)
        t16, t8 = truth("llama3-8b-fp16@h100"), truth("llama3-8b-fp8@h100")
        flips = sum(a != b for a, b in zip(t16, t8))
        assert all(a or not b for a, b in zip(t16, t8))  # never wrong at FP16 and right at FP8
        assert flips > 0
        assert (got["compared"], got["identical"]) == (N, N - flips)
        assert got["agreement"] == 1 - flips / N

    @pytest.mark.slow
    def test_summary_and_report_say_modelled(self, runs):
        """The quality block carries the model; the report's quality corner and the console line
        say it is modelled by the simulator, not measured."""
        res = runs["llama3-8b-fp16@h100"]
        q = res.summary["quality"]
        assert q["modelled"]["note"] == "modelled by the simulator, not measured"
        assert q["modelled"]["accuracy"] == 0.796
        report = (res.run_dir / "report.md").read_text()
        corner = next(ln for ln in report.splitlines() if ln.startswith("| quality | "))
        assert corner.startswith(
            f"| quality | accuracy {q['accuracy'] * 100:.1f}% ({q['correct']} of 200 scored answers right), "
            "modelled by the simulator, not measured: the preset is set to 79.6% (Llama 3 model card"
        )

    @pytest.mark.slow
    def test_conditions_carry_the_calibration_status(self, runs):
        """conditions.target.builtin_simulator holds the calibration status, and the report's
        conditions table says it next to the backend row."""
        res = runs["llama3-8b-fp8@h100"]
        sim = res.summary["conditions"]["target"]["builtin_simulator"]
        assert sim["calibration"]["status"] == "calibrated"
        assert next(r["id"] for r in sim["calibration"]["rows"]) == "trt-h100-llama31-8b-fp8-128-2048"
        lines = (res.run_dir / "report.md").read_text().splitlines()
        at = next(i for i, ln in enumerate(lines) if ln.startswith("| backend | built-in simulator, preset "))
        row = lines[at + 1]
        assert row.startswith(
            "| simulator calibration | calibrated: 3 row(s) of the calibration table "
            "cover llama3-8b fp8 on h100 as tensorrt-llm ran it (kv_allocation reserve, scheduling "
            "chunked): trt-h100-llama31-8b-fp8-128-2048 +13.4 %"
        )
        assert row.endswith("(the table: docs/simulator.md#calibration) |")


class TestOverTheWire:
    def test_answer_then_end_of_text_or_the_word_stream_with_ignore_eos(self, sim, client):
        """A copy task: without ignore_eos the reply is the simulator's answer and stops after
        it; with ignore_eos it is exactly max_tokens long and opens with the same answer."""
        prompt = TaskSet(0).task(1).prompt
        expected = answers.answer(SimConfig(time_scale=0.05, seed=7), prompt)
        assert expected is not None
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 20}
        short = client.post("/v1/chat/completions", json=body).json()
        assert short["choices"][0]["message"]["content"] == expected
        assert short["choices"][0]["finish_reason"] == "stop"
        assert short["usage"]["completion_tokens"] == len(expected.split())
        full = client.post("/v1/chat/completions", json={**body, "ignore_eos": True}).json()
        assert full["choices"][0]["message"]["content"].startswith(expected + " ")
        assert (full["usage"]["completion_tokens"], full["choices"][0]["finish_reason"]) == (20, "length")


def test_console_line_says_modelled():
    """The line `loadgen run` prints for the quality block names the simulator's model."""
    from loadgen.cli.console import traffic_lines

    q = {"scored": 4, "correct": 3, "accuracy": 0.75, "answers_kept": 0, "answers_truncated": 0}
    assert traffic_lines({"quality": {**q, "max_chars": None}}) == [
        "quality     accuracy 75.0% (3 of 4 scored answers right)"
    ]
    modelled = {**q, "max_chars": None, "modelled": answers.accuracy_model(SimConfig())}
    assert traffic_lines({"quality": modelled}) == [
        "quality     accuracy 75.0% (3 of 4 scored answers right) (modelled by the simulator, not measured)"
    ]
