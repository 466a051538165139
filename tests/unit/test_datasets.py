"""Prompt datasets from local files: ShareGPT and JSONL layouts, their errors, and seeded selection."""

import json
from pathlib import Path

import pytest

from loadgen.errors import LoadgenError
from loadgen.workload.datasets import DatasetError, Entry, load_dataset, select, word_count

ROOT = Path(__file__).resolve().parents[2]
SHAREGPT = ROOT / "data" / "sharegpt_sample.json"
PROMPTS = ROOT / "data" / "prompts_sample.jsonl"


def turn(who: str, text: str) -> dict:
    return {"from": who, "value": text}


def write(path: Path, content: str) -> Path:
    path.write_text(content)
    return path


def write_json(path: Path, obj: object) -> Path:
    return write(path, json.dumps(obj))


def message(excinfo: pytest.ExceptionInfo) -> str:
    return str(excinfo.value)


class TestShareGPT:
    def test_sample_parses(self):
        """The shipped sample: 60 conversations, all usable, each its first exchange."""
        ds = load_dataset(SHAREGPT)
        assert (len(ds), ds.skipped, ds.fmt) == (60, 0, "sharegpt")
        assert (ds[0].line, ds[0].output_tokens, ds[0].expected) == (0, 156, None)
        assert ds[0].prompt.startswith("What should I know before training for a first 10k run? The result")
        assert (ds[-1].line, ds[-1].output_tokens) == (59, 97)
        assert ds[-1].prompt.startswith("Why is planning a weekend in Lisbon harder than it looks?")

    def test_first_human_turn_and_the_reply_after_it(self, tmp_path):
        """A leading system turn is skipped: the prompt is the first human turn, the length its reply's."""
        path = write_json(
            tmp_path / "c.json",
            [
                {
                    "conversations": [
                        turn("system", "be brief"),
                        turn("human", "name three rivers"),
                        turn("gpt", "the Nile, the Amazon and the Danube"),
                        turn("human", "and a fourth"),
                    ]
                }
            ],
        )
        assert load_dataset(path) == [Entry("name three rivers", 7, None, 0)]

    def test_short_conversations_are_skipped_and_counted(self, tmp_path):
        """Fewer than two turns, or a human turn with no reply, is skipped, not an error."""
        path = write_json(
            tmp_path / "c.json",
            [
                {"conversations": [turn("human", "hello")]},
                {"conversations": [turn("human", "hi there"), turn("gpt", "hello, how can I help")]},
                {"conversations": [turn("gpt", "welcome"), turn("human", "thanks")]},
            ],
        )
        ds = load_dataset(path)
        assert (list(ds), ds.skipped) == ([Entry("hi there", 5, None, 1)], 2)

    def test_no_usable_conversation_is_an_error(self, tmp_path):
        """A file where every conversation is skipped says so, with the count."""
        path = write_json(
            tmp_path / "c.json", [{"conversations": []}, {"conversations": [turn("human", "x")]}]
        )
        with pytest.raises(DatasetError) as e:
            load_dataset(path)
        assert message(e) == (
            f"{path}: no usable conversations among 2 (each needs a human turn followed by a reply)"
        )

    def test_entry_that_is_not_an_object(self, tmp_path):
        """The error names the entry's index and what it should be."""
        path = write_json(tmp_path / "c.json", [{"conversations": []}, 7])
        with pytest.raises(DatasetError) as e:
            load_dataset(path)
        assert message(e) == f"{path} entry 1: the entry is a number, expected an object with conversations"

    def test_missing_conversations(self, tmp_path):
        """An entry without `conversations` names the field and its shape."""
        path = write_json(tmp_path / "c.json", [{"id": "a"}])
        with pytest.raises(DatasetError) as e:
            load_dataset(path)
        assert (
            message(e) == f'{path} entry 0: conversations is missing, expected a list of {{"from", "value"}}'
        )

    def test_turn_value_not_a_string(self, tmp_path):
        """A turn whose value is not text names the entry, the turn and the field."""
        path = write_json(
            tmp_path / "c.json",
            [
                {"conversations": [turn("human", "a"), turn("gpt", "b")]},
                {"conversations": [turn("human", "a"), {"from": "gpt", "value": 3}]},
            ],
        )
        with pytest.raises(DatasetError) as e:
            load_dataset(path)
        assert message(e) == f"{path} entry 1: conversations[1].value is a number, expected a string"

    def test_top_level_not_an_array(self, tmp_path):
        """A ShareGPT file is one array of conversations."""
        path = write_json(tmp_path / "c.json", {"conversations": []})
        with pytest.raises(DatasetError) as e:
            load_dataset(path)
        assert message(e) == f"{path}: the top level is an object, expected an array of conversations"


class TestJsonl:
    def test_sample_parses(self):
        """The shipped sample: 40 prompts, 14 with an expected answer, 17 with an answer length."""
        ds = load_dataset(PROMPTS)
        assert (len(ds), ds.skipped, ds.fmt) == (40, 0, "jsonl")
        assert ds[0] == Entry("What is 43 + 50? Answer with the number only.", 4, "93", 1)
        assert ds[-1] == Entry("What is 4 times 10? Answer with the number only.", None, "40", 40)
        assert sum(e.expected is not None for e in ds) == 14
        assert sum(e.output_tokens is not None for e in ds) == 17

    def test_blank_lines_are_skipped_and_lines_counted_from_one(self, tmp_path):
        """Entries keep the file's own line numbers, blank lines included in the count."""
        path = write(tmp_path / "p.jsonl", '\n{"prompt": "a b"}\n\n{"prompt": "c", "output_tokens": 3}\n')
        assert load_dataset(path) == [Entry("a b", None, None, 2), Entry("c", 3, None, 4)]

    def test_other_keys_are_ignored(self, tmp_path):
        """Ids and tags ride along in real files; only the three known keys mean anything."""
        path = write(tmp_path / "p.jsonl", '{"id": 9, "prompt": "x", "expected": "y", "tags": ["t"]}\n')
        assert load_dataset(path) == [Entry("x", None, "y", 1)]

    @pytest.mark.parametrize(
        ("line", "error"),
        [
            (
                '{"prompt": "x", "output_tokens": "ten"}',
                "output_tokens is 'ten', expected a positive integer",
            ),
            ('{"prompt": "x", "output_tokens": 0}', "output_tokens is 0, expected a positive integer"),
            ('{"prompt": "x", "output_tokens": true}', "output_tokens is True, expected a positive integer"),
            ('{"output_tokens": 5}', "prompt is missing, expected a string"),
            ('{"prompt": 12}', "prompt is 12, expected a string"),
            ('{"prompt": "x", "expected": 42}', "expected is 42, expected a string (the answer's text)"),
            ('["x"]', 'the line is an array, expected an object {"prompt": "..."}'),
        ],
    )
    def test_bad_line_names_file_line_field_and_fix(self, tmp_path, line, error):
        """The seventh line is bad: the message says where, which field, and what is wanted."""
        path = write(tmp_path / "x.jsonl", '{"prompt": "fine"}\n' * 6 + line + "\n")
        with pytest.raises(DatasetError) as e:
            load_dataset(path)
        assert message(e) == f"{path} line 7: {error}"

    def test_invalid_json_line(self, tmp_path):
        """A line that is not JSON at all is named too."""
        path = write(tmp_path / "x.jsonl", '{"prompt": "a"}\n{"prompt": \n')
        with pytest.raises(DatasetError) as e:
            load_dataset(path)
        assert message(e).startswith(f"{path} line 2: not valid JSON (")


class TestFiles:
    def test_missing_file(self, tmp_path):
        """A missing file is a one-line error, and one the CLI reports as a user error."""
        path = tmp_path / "nope.jsonl"
        with pytest.raises(LoadgenError) as e:
            load_dataset(path)
        assert message(e) == f"{path}: no such file (give a local ShareGPT .json or prompts .jsonl file)"

    def test_empty_file(self, tmp_path):
        """An empty (or all-blank) file says it is empty."""
        path = write(tmp_path / "p.jsonl", "\n  \n")
        with pytest.raises(DatasetError) as e:
            load_dataset(path)
        assert message(e) == (
            f"{path}: the file is empty (expected ShareGPT JSON or one prompt object a line)"
        )

    def test_format_from_content_when_the_name_does_not_say(self, tmp_path):
        """Other extensions are read by their first character: '[' ShareGPT, '{' JSONL."""
        conv = [{"conversations": [turn("human", "q"), turn("gpt", "a b")]}]
        assert load_dataset(write_json(tmp_path / "a.txt", conv)) == [Entry("q", 2, None, 0)]
        assert load_dataset(write(tmp_path / "b.txt", '{"prompt": "p"}\n')) == [Entry("p", None, None, 1)]

    def test_explicit_format_wins_over_the_extension(self, tmp_path):
        """fmt='jsonl' reads a .json file line by line."""
        path = write(tmp_path / "lines.json", '{"prompt": "p"}\n')
        assert load_dataset(path, "jsonl") == [Entry("p", None, None, 1)]

    def test_unknown_content(self, tmp_path):
        """A file neither name nor content identifies asks for a name or a format."""
        path = write(tmp_path / "a.txt", "hello")
        with pytest.raises(DatasetError) as e:
            load_dataset(path)
        assert message(e) == (
            f"{path}: cannot tell the format; name it .json (ShareGPT) or .jsonl, or pass fmt"
        )


ENTRIES = [
    Entry("one", 2, None, 1),
    Entry("one two three", None, None, 2),
    Entry("one two three four five", 2, None, 3),
    Entry("one two three four five six seven", 9, None, 4),
]


class TestSelect:
    def test_word_count(self):
        """Whitespace words, however spaced."""
        assert word_count("  a b\n c\t") == 3

    def test_same_seed_same_order(self):
        """A seed names one order of the sample; another seed, another order."""
        ds = load_dataset(PROMPTS)
        assert [e.line for e in select(ds, seed=1)][:8] == [23, 25, 26, 6, 5, 2, 28, 40]
        assert [e.line for e in select(ds, seed=1)] == [e.line for e in select(ds, seed=1)]
        assert [e.line for e in select(ds, seed=2)][:8] == [21, 36, 24, 30, 1, 9, 19, 40]

    def test_keeps_every_entry_by_default(self):
        """Default bounds keep every non-empty entry, reordered."""
        assert sorted(e.line for e in select(ENTRIES, seed=0)) == [1, 2, 3, 4]

    def test_filters_by_input_and_output_length(self):
        """Bounds are inclusive; an entry without output_tokens passes the output bounds."""
        kept = select(ENTRIES, seed=0, min_input_tokens=3, max_input_tokens=5, max_output_tokens=2)
        assert sorted(e.line for e in kept) == [2, 3]
        kept = select(ENTRIES, seed=0, min_output_tokens=3)
        assert sorted(e.line for e in kept) == [2, 4]

    def test_counts_with_the_given_tokenizer(self):
        """count_tokens replaces the word count: here, characters."""
        kept = select(ENTRIES, seed=0, count_tokens=len, max_input_tokens=13)
        assert sorted(e.line for e in kept) == [1, 2]

    def test_nothing_left_names_the_bounds(self):
        """When the bounds reject everything, the error says which bounds."""
        with pytest.raises(DatasetError) as e:
            select(ENTRIES, seed=0, min_input_tokens=100, max_output_tokens=50)
        assert message(e) == (
            "no entries among 4 have 100 <= input tokens <= any and 1 <= output tokens <= 50; "
            "widen the length bounds"
        )
