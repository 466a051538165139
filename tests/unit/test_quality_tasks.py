"""The built-in task set (loadgen.quality.tasks) and the scoring rules (loadgen.quality.score)."""

from __future__ import annotations

import pytest

from loadgen.quality import KINDS, MATCHES, Task, TaskSet, expected_output_tokens, normalize, score


class TestTaskSet:
    def test_the_same_seed_gives_the_same_tasks(self):
        """Two sets with one seed agree task by task, and a task built alone equals it in sequence."""
        first = [TaskSet(7).task(i) for i in range(30)]
        assert [TaskSet(7).task(i) for i in range(30)] == first
        assert TaskSet(7).task(29) == first[29]

    def test_another_seed_gives_other_tasks(self):
        """No task of seed 7 reappears at the same index under seed 8."""
        a, b = TaskSet(7), TaskSet(8)
        assert all(a.task(i).prompt != b.task(i).prompt for i in range(30))

    def test_kinds_take_turns(self):
        """Task i is of kind kinds[i % len(kinds)]."""
        assert KINDS == ("arithmetic", "copy", "recall")
        assert [TaskSet(0).task(i).kind for i in range(6)] == [
            "arithmetic",
            "copy",
            "recall",
            "arithmetic",
            "copy",
            "recall",
        ]
        assert [TaskSet(0, ["recall", "copy"]).task(i).kind for i in range(3)] == ["recall", "copy", "recall"]

    def test_arithmetic_mixes_plus_minus_and_times_with_exact_answers(self):
        """Seed 0's arithmetic tasks, literally: the answer is the exact integer."""
        ts = TaskSet(0)
        assert ts.task(0) == Task(
            "arithmetic", "What is 567 + 917? Reply with the number only.", "1484", "exact"
        )
        assert ts.task(3) == Task(
            "arithmetic", "What is 588 - 291? Reply with the number only.", "297", "exact"
        )
        assert ts.task(6) == Task(
            "arithmetic", "What is 436 x 2? Reply with the number only.", "872", "exact"
        )

    def test_copy_answers_with_the_words(self):
        """A copy task's answer is the words after the colon, as given."""
        assert TaskSet(0).task(1) == Task(
            "copy",
            "Repeat the following words exactly, nothing else: desert yellow island tiger stone",
            "desert yellow island tiger stone",
            "exact",
        )

    def test_recall_answers_with_the_asked_value(self):
        """A recall task lists four facts and asks for one of them."""
        assert TaskSet(0).task(2) == Task(
            "recall",
            "Here are some facts.\nquartz: 9435\nkestrel: 8189\ndune: 7492\nnectar: 8640\n"
            "What is the value for kestrel? Reply with the value only.",
            "8189",
            "exact",
        )

    def test_prompts_do_not_repeat(self):
        """3,000 tasks of one set are 3,000 different prompts."""
        ts = TaskSet(1)
        assert len({ts.task(i).prompt for i in range(3000)}) == 3000

    def test_a_kind_listed_twice_is_drawn_twice_as_often_without_repeats(self):
        """kinds (arithmetic, copy, arithmetic): two arithmetic tasks a cycle, each a new one."""
        ts = TaskSet(0, ["arithmetic", "copy", "arithmetic"])
        arithmetic = [ts.task(i).prompt for i in range(300) if i % 3 != 1]
        assert len(arithmetic) == 200
        assert len(set(arithmetic)) == 200
        assert ts.task(0).prompt == "What is 567 + 917? Reply with the number only."
        assert ts.task(2).prompt == "What is 588 - 291? Reply with the number only."

    def test_an_unknown_kind_is_named_with_the_valid_ones(self):
        """The error says which kind is unknown and what would be valid."""
        with pytest.raises(
            ValueError, match=r"^unknown task kind 'trivia'; valid: arithmetic, copy, recall$"
        ):
            TaskSet(0, ["copy", "trivia"])
        with pytest.raises(ValueError, match=r"^no task kinds; valid: arithmetic, copy, recall$"):
            TaskSet(0, [])

    def test_a_negative_index_is_an_error(self):
        with pytest.raises(ValueError, match=r"^task index must be >= 0, got -1$"):
            TaskSet(0).task(-1)

    def test_expected_output_tokens_leaves_room_for_the_answer(self):
        """Two tokens a word, one a digit, plus six."""
        ts = TaskSet(0)
        assert expected_output_tokens(ts.task(0)) == 2 * 1 + 4 + 6  # "1484"
        assert expected_output_tokens(ts.task(1)) == 2 * 5 + 0 + 6  # five words
        assert expected_output_tokens(ts.task(3)) == 2 * 1 + 3 + 6  # "297"


class TestScore:
    def test_normalize_forgives_case_spacing_and_a_closing_stop(self):
        assert normalize("  Apple\n River. ") == "apple river"
        assert normalize("475.") == "475"
        assert normalize("Yes!?") == "yes"
        assert normalize("475 .") == "475"
        assert normalize("a\t\tb") == "a b"
        assert normalize("3.5") == "3.5"
        assert normalize("...") == ""

    def test_exact_is_equality_after_normalising(self):
        assert score("475", "475")
        assert score(" 475.\n", "475")
        assert score("Desert  yellow ISLAND", "desert yellow island")
        assert not score("476", "475")
        assert not score("The answer is 475.", "475")
        assert not score("**475**", "475")
        assert not score("desert yellow", "desert yellow island")

    def test_contains_finds_the_expected_text_anywhere(self):
        assert score("The value for kestrel is 8189.", "8189", "contains")
        assert score("PARIS", "paris.", "contains")
        assert not score("The value is 8188.", "8189", "contains")

    def test_an_empty_expected_answer_never_matches(self):
        """Saying nothing cannot pass a task without an answer."""
        assert not score("", "", "exact")
        assert not score("anything", ".", "contains")

    def test_an_unknown_match_is_named_with_the_valid_ones(self):
        assert MATCHES == ("exact", "contains")
        with pytest.raises(ValueError, match=r"^unknown match 'fuzzy'; valid: exact, contains$"):
            score("a", "a", "fuzzy")
