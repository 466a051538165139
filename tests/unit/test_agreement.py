"""Output agreement between two runs (loadgen.analysis.agreement), and the scripted server's
answer mode that lets a test know exactly which answers must agree."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import httpx
import orjson
import pytest

from loadgen.analysis.agreement import Answer, agreement, common_prefix_tokens, read_answers
from loadgen.quality import TaskSet, score
from loadgen.testing.server import StreamServer


def ans(*pieces: str, h: str | None = "h", truncated: bool = False) -> Answer:
    return Answer(h, pieces, truncated)


class TestCommonPrefix:
    def test_counts_leading_pieces_that_agree(self):
        assert common_prefix_tokens(["The", " cat"], ["The", " dog"]) == 1
        assert common_prefix_tokens(["The", " cat", " sat"], ["The", " cat", " sat"]) == 3
        assert common_prefix_tokens(["The", " cat"], ["A", " cat"]) == 0
        assert common_prefix_tokens([], ["The"]) == 0

    def test_chunking_is_not_disagreement(self):
        """Text compared by character; a piece of `a` counts when it lies wholly inside the
        common character prefix."""
        assert common_prefix_tokens(["The", " cat"], ["The c", "at"]) == 2
        assert common_prefix_tokens(["The", " cat", " sat"], ["The ca", "r"]) == 1
        assert common_prefix_tokens(["The", " cat"], ["The", " cat", " sat"]) == 2
        assert common_prefix_tokens(["The", " cat", " sat"], ["The", " cat"]) == 2


class TestAgreement:
    def test_identical_runs_agree_fully(self):
        a = {1: ans("The", " cat"), 2: ans("4", "75")}
        assert agreement(a, dict(a)) == {
            "compared": 2,
            "identical": 2,
            "agreement": 1.0,
            "mean_common_prefix_tokens": 2.0,
            "mean_answer_tokens": 2.0,
            "prompts_differ": 0,
            "only_in_one": 0,
            "truncated": 0,
            "first_differences": [],
        }

    def test_k_of_n_changed_agree_n_minus_k_over_n(self):
        """One answer of four changes in its last piece: 3/4 agree, the prefix is 7/4 pieces."""
        a = {i: ans("x", " y", h=f"h{i}") for i in range(4)}
        b = dict(a)
        b[3] = ans("x", " z", h="h3")
        assert agreement(a, b) == {
            "compared": 4,
            "identical": 3,
            "agreement": 0.75,
            "mean_common_prefix_tokens": 1.75,
            "mean_answer_tokens": 2.0,
            "prompts_differ": 0,
            "only_in_one": 0,
            "truncated": 0,
            "first_differences": [{"id": 3, "a": "x y", "b": "x z"}],
        }

    def test_different_prompts_and_missing_ids_are_counted_not_compared(self):
        """id 2 was sent different prompts, ids 1, 4 and 5 are in one run only; unknown hashes on
        both sides (id 6) are the same prompt."""
        a = {1: ans("a"), 2: ans("a", h="p"), 3: ans("a"), 6: ans("a", h=None)}
        b = {2: ans("a", h="q"), 3: ans("b"), 4: ans("a"), 5: ans("a"), 6: ans("a", h=None)}
        out = agreement(a, b)
        assert (out["compared"], out["identical"], out["agreement"]) == (2, 1, 0.5)
        assert (out["prompts_differ"], out["only_in_one"]) == (1, 3)
        assert out["first_differences"] == [{"id": 3, "a": "a", "b": "b"}]

    def test_the_same_text_chunked_differently_is_identical(self):
        out = agreement({0: ans("The", " cat")}, {0: ans("The c", "at")})
        assert (out["identical"], out["mean_common_prefix_tokens"]) == (1, 2.0)

    def test_a_truncated_answer_is_compared_on_what_was_kept(self):
        """Kept "The ca" agrees with a full "The cat sat", not with a full "The" that ended
        where the other went on; two truncated sides are compared over the shorter."""
        a = {
            0: ans("The", " ca", truncated=True),
            1: ans("The", " ca", truncated=True),
            2: ans("The", " ca", truncated=True),
            3: ans("The", " cat"),
        }
        b = {
            0: ans("The", " cat", " sat"),
            1: ans("The"),
            2: ans("The", truncated=True),
            3: ans("The", " cat"),
        }
        out = agreement(a, b)
        assert (out["compared"], out["identical"], out["truncated"]) == (4, 3, 3)
        assert out["first_differences"] == [{"id": 1, "a": "The ca", "b": "The"}]

    def test_nothing_compared_gives_no_ratio(self):
        out = agreement({1: ans("a")}, {2: ans("a")})
        assert out["compared"] == 0
        assert out["agreement"] is None
        assert out["mean_common_prefix_tokens"] is None
        assert out["mean_answer_tokens"] is None
        assert out["only_in_one"] == 2

    def test_first_differences_keep_five_examples_of_80_characters(self):
        a = {i: ans("y" * 100) for i in range(7)}
        b = {i: ans("n" * 100) for i in range(7)}
        diffs = agreement(a, b)["first_differences"]
        assert [d["id"] for d in diffs] == [0, 1, 2, 3, 4]
        assert diffs[0] == {"id": 0, "a": "y" * 80, "b": "n" * 80}


def _line(**fields: object) -> bytes:
    base = {"id": 0, "warmup": False, "ok": True, "chunk_tokens": [1, 1], "answer_truncated": False}
    return orjson.dumps({**base, **fields}) + b"\n"


class TestReadAnswers:
    def test_keeps_measured_ok_answers_and_skips_a_torn_last_line(self, tmp_path: Path):
        path = tmp_path / "requests.jsonl"
        path.write_bytes(
            _line(id=0, warmup=True, answer=["w"], prompt_hash="h0")
            + _line(id=1, answer=["4", "75"], prompt_hash="h1")
            + _line(id=2, ok=False, answer=["x"], prompt_hash="h2")
            + _line(id=3, answer=None, prompt_hash="h3")
            + _line(id=4, answer=["a", " b"], prompt_hash=None, answer_truncated=True)
            + _line(id=5, answer=["c"])  # an older run: no prompt_hash column at all
            + b"\n"
            + b'{"id": 6, "warmup": false, "ok": tr'
        )
        assert read_answers(path) == {
            1: Answer("h1", ("4", "75"), False),
            4: Answer(None, ("a", " b"), True),
            5: Answer(None, ("c",), False),
        }

    def test_a_broken_line_before_the_end_is_an_error(self, tmp_path: Path):
        path = tmp_path / "requests.jsonl"
        path.write_bytes(_line(id=1, answer=["a"]) + b'{"id": 2, "warm\n' + _line(id=3, answer=["b"]))
        with pytest.raises(ValueError, match=r"requests\.jsonl:2: not a JSON record$"):
            read_answers(path)


# --- the scripted server's answer mode, over a socket ---------------------------------------


@pytest.fixture(scope="module")
def solver():
    with StreamServer(ttft_ms=0, itl_ms=1, answer="solve") as s:
        yield s


def ask(url: str, prompt: str, chat: bool = True, max_tokens: int | None = 64, **script: object):
    """Stream one request; its content pieces, finish reason and response id."""
    body: dict = {"model": "test-model", "stream": True, "loadgen_test": script}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if chat:
        body["messages"] = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": prompt},
        ]
    else:
        body["prompt"] = prompt
    pieces: list[str] = []
    finish = rid = None
    path = "/v1/chat/completions" if chat else "/v1/completions"
    with httpx.stream("POST", url + path, json=body, timeout=10) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            obj = json.loads(line[len("data: ") :])
            rid = obj["id"]
            for c in obj["choices"]:
                piece = c["delta"].get("content") if chat else c["text"]
                if piece:
                    pieces.append(piece)
                finish = c["finish_reason"] or finish
    return pieces, finish, rid


class TestServerAnswers:
    def test_solve_answers_the_built_in_tasks_right(self, solver):
        """Twelve tasks of seed 0, every kind: right, one word a piece, finish "stop", and the
        log says what was sent."""
        ts = TaskSet(0)
        log_ids = {}
        for i in range(12):
            task = ts.task(i)
            pieces, finish, rid = ask(solver.url, task.prompt)
            assert score("".join(pieces), task.expected, task.match), (i, pieces)
            assert finish == "stop"
            log_ids[rid] = "".join(pieces)
            if i == 0:
                assert pieces == ["1484"]
            if i == 1:
                assert pieces == ["desert", " yellow", " island", " tiger", " stone"]
        log = solver.log()
        assert {rid: log[rid]["answer"] for rid in log_ids} == log_ids

    def test_wrong_mod_changes_exactly_the_prompts_the_crc_picks(self, solver):
        """wrong_mod 3: tasks 1, 4, 7, 9, 10 of seed 0 (crc32 % 3 == 0) are answered wrong, each
        close to the right answer; the rest stay right."""
        ts = TaskSet(0)
        answers = {i: "".join(ask(solver.url, ts.task(i).prompt, wrong_mod=3)[0]) for i in range(12)}
        wrong = [i for i in range(12) if not score(answers[i], ts.task(i).expected)]
        assert wrong == [1, 4, 7, 9, 10]
        assert wrong == [i for i in range(12) if zlib.crc32(ts.task(i).prompt.encode()) % 3 == 0]
        assert answers[1] == "alpha yellow island tiger stone"
        assert answers[9] == "1132"  # 695 + 436, off by one

    def test_wrong_mod_1_answers_every_kind_wrong(self, solver):
        ts = TaskSet(0)
        answers = ["".join(ask(solver.url, ts.task(i).prompt, wrong_mod=1)[0]) for i in range(3)]
        assert answers == ["1485", "alpha yellow island tiger stone", "8190"]

    def test_max_tokens_caps_an_answer(self, solver):
        pieces, finish, _ = ask(solver.url, TaskSet(0).task(1).prompt, max_tokens=2)
        assert (pieces, finish) == (["desert", " yellow"], "length")

    def test_completions_answer_the_prompt_string(self, solver):
        pieces, finish, _ = ask(solver.url, TaskSet(0).task(3).prompt, chat=False)
        assert (pieces, finish) == (["297"], "stop")

    def test_reasoning_comes_before_the_answer(self, solver):
        """With reasoning_tokens 2 the content is still exactly the answer."""
        pieces, finish, _ = ask(solver.url, TaskSet(0).task(0).prompt, reasoning_tokens=2)
        assert (pieces, finish) == (["1484"], "stop")

    def test_an_unknown_prompt_gets_the_same_words_every_time(self, solver):
        """max_tokens words seeded by the prompt; another prompt, other words."""
        one = ask(solver.url, "Tell me a story.", max_tokens=5)
        again = ask(solver.url, "Tell me a story.", max_tokens=5)
        other = ask(solver.url, "Tell me another story.", max_tokens=5)
        assert (len(one[0]), one[1]) == (5, "length")
        assert one[0] == again[0]
        assert one[0] != other[0]
        assert not one[0][0].startswith(" ") and all(p.startswith(" ") for p in one[0][1:])

    def test_an_unknown_answer_mode_is_a_400(self, solver):
        body = {"model": "m", "prompt": "x", "stream": True, "loadgen_test": {"answer": "guess"}}
        r = httpx.post(solver.url + "/v1/completions", json=body, timeout=10)
        assert r.status_code == 400
        assert r.json()["error"]["message"] == "unknown loadgen_test.answer 'guess'; valid: solve"

    def test_without_answer_mode_the_log_still_says_what_was_sent(self):
        """The default words stream as before; the log's answer is their text."""
        with StreamServer(ttft_ms=0, itl_ms=1) as s:
            pieces, finish, rid = ask(s.url, TaskSet(0).task(0).prompt, max_tokens=3)
            assert (pieces, finish) == ([" alpha", " beta", " gamma"], "length")
            assert s.log()[rid]["answer"] == " alpha beta gamma"
