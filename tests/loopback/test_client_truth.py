"""The client's own truth on runs that go badly or use a tokenizer (issue 36, part 5): a
tokenizer-fitted closed loop costs no send lag, a tokenizer without its package is one line
before anything is made, chat prompts are fitted through the model's chat template, a report
of a run without an ok request raises no library warning, and the client's CPU share is judged
over the sending window.

The tokenizer and its chat template are made here, in a second, from generated text: nothing
comes from a model hub. The scripted server counts a chat request's prompt as a real server
does (``tokenizer_dir``: the template rendered, then encoded), in its own code.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from loadgen.testing import StreamServer

from helpers import LOADGEN, cli_env, run

tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

# A Llama 3 style template: BOS, a header per message, the assistant's turn opened.
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
SPECIAL = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A model folder: a 600-token byte-level BPE trained on the synthetic prompt vocabulary,
    its special tokens, and tokenizer_config.json with the chat template and BOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from loadgen.workload.prompts import WORDS

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    lines = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(40)) for i in range(400)]
    lines += [f"Request {i} number {i * 31} of {i * 7}" for i in range(400)]
    trainer = trainers.BpeTrainer(
        vocab_size=600, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(lines, trainer)
    tok.add_special_tokens(SPECIAL)
    folder = tmp_path_factory.mktemp("model")
    tok.save(str(folder / "tokenizer.json"))
    config = {"bos_token": {"content": SPECIAL[0], "special": True}, "eos_token": "<|eot_id|>"}
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    return folder


@pytest.fixture(scope="module")
def fast_server(model_dir):
    """A scripted server that answers at once and counts chat prompts through the template."""
    with StreamServer(ttft_ms=1, itl_ms=1, tokenizer_dir=str(model_dir)) as s:
        yield s


def lag_ms(res) -> tuple[float, float]:
    lag = np.array([(r.t_send_ns - r.t_sched_ns) / 1e6 for r in res.records if not r.warmup])
    return float(np.percentile(lag, 50)), float(np.percentile(lag, 99))


@pytest.mark.slow
def test_a_tokenizer_fitted_closed_loop_costs_no_send_lag(server, make_profile, model_dir):
    """c=4, 1,000-token prompts (fitting one takes a few ms of CPU): the send lag, t_send -
    t_sched, is what the same run without a tokenizer has, since each slot's next request is
    built while its last one is in flight, and late sends are no client_limited reason. (Built
    after the slot's schedule stamp, p50 was the fitting time, ~3 ms, against ~0.05 ms.)"""
    common = dict(
        workload__num_requests=40,
        workload__input_tokens=1000,
        workload__output_tokens=4,
        load__concurrency=4,
        target__endpoint="completions",
    )
    plain = run(make_profile(server.url, **common))
    fitted = run(make_profile(server.url, workload__prompt__tokenizer=str(model_dir), **common))
    assert fitted.summary["conditions"]["prompt_lengths_approximate"] is False
    assert all(r.ok for r in plain.records + fitted.records)
    (p50, p99), (base50, base99) = lag_ms(fitted), lag_ms(plain)
    assert p50 <= 3 * base50 + 0.3, f"send lag p50 {p50:.3f} ms with a tokenizer, {base50:.3f} without"
    assert p99 <= 3 * base99 + 1.5, f"send lag p99 {p99:.3f} ms with a tokenizer, {base99:.3f} without"
    # (Fitting blocks the event loop while other requests stream, as in an open loop: the loop
    # lag may show it; the sends are not late.)
    warned = [w for w in fitted.summary["client"]["warnings"] if w["warning"] == "client_limited"]
    assert not [r for w in warned for r in w["reasons"] if "sent late" in r], warned


@pytest.mark.parametrize(
    ("hidden", "endpoint", "extra"),
    [("tokenizers", "completions", "'tokenizers' package"), ("jinja2", "chat", "'jinja2' package")],
)
def test_a_tokenizer_without_its_package_is_one_line_before_the_run_folder(
    tmp_path, model_dir, hidden, endpoint, extra
):
    """The package hidden (``sys.modules[name] = None``, as if not installed): exit 2, one line
    naming the extra to install, and no run folder; the chat template needs jinja2 only on a
    chat endpoint."""
    import subprocess

    out = tmp_path / "reports"
    args = ["run", "--url", "http://127.0.0.1:9", "--model", "m", "--endpoint", endpoint]
    args += [
        "--tokenizer",
        str(model_dir),
        "--num-requests",
        "2",
        "--concurrency",
        "1",
        "--out",
        str(out),
        "--no-progress",
    ]
    hide = f"import sys; sys.modules[{hidden!r}] = None"
    code = f"{hide}; from loadgen.cli import main; sys.exit(main({args!r}))"
    done = subprocess.run(
        [LOADGEN[0], "-c", code], capture_output=True, text=True, timeout=60, env=cli_env(), cwd=tmp_path
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert extra in lines[0] and "pip install 'loadgen[tokenizer]'" in lines[0]
    assert not out.exists() or not any(out.iterdir())


class TestChatTemplate:
    def test_chat_prompts_are_fitted_through_the_template(self, fast_server, make_profile, model_dir):
        """With the template beside the tokenizer, every chat request's prompt as the server
        counts it (usage.prompt_tokens: the messages rendered, then encoded) is the length the
        workload asked for, a system prompt included; the conditions say how, and that the
        server added nothing to it."""
        from loadgen.workload import Workload

        profile = make_profile(
            fast_server.url,
            workload__num_requests=12,
            workload__input_tokens={"kind": "uniform", "min": 40, "max": 400},
            workload__prompt__system_prompt_tokens=12,
            workload__prompt__tokenizer=str(model_dir),
        )
        res = run(profile)
        recs = sorted(res.records, key=lambda r: r.id)
        asked = Workload(profile.workload)  # the sampled lengths; no tokenizer needed for them
        assert recs and all(r.ok and r.prompt_tokens_source == "usage" for r in recs)
        assert [r.prompt_tokens for r in recs] == [asked.lengths(r.id)[0] for r in recs]
        lengths = res.summary["conditions"]["prompt_lengths"]
        assert lengths["method"] == "local tokenizer, through the model's chat template (exact)"
        assert lengths["server_extra_tokens"]["max"] == lengths["server_extra_tokens"]["min"] == 0

    def test_without_the_template_the_label_says_what_the_server_added(
        self, fast_server, make_profile, model_dir
    ):
        """chat_template: never fits the text alone: the server's prompt is the requested length
        plus its template's tokens on every request, and the conditions (and the report) say by
        how much, from the server's usage."""
        from loadgen.report.conditions import prompt_lengths

        res = run(
            make_profile(
                fast_server.url,
                workload__num_requests=6,
                workload__input_tokens=64,
                workload__prompt__tokenizer=str(model_dir / "tokenizer.json"),
                workload__prompt__chat_template="never",
            )
        )
        recs = [r for r in res.records if not r.warmup]
        added = {r.prompt_tokens - r.requested_prompt_tokens for r in recs}
        assert len(added) == 1 and added.pop() > 0
        cond = res.summary["conditions"]
        extra = cond["prompt_lengths"]["server_extra_tokens"]
        assert cond["prompt_lengths"]["method"] == "local tokenizer (exact)"
        assert extra["min"] == extra["max"] > 0
        assert f"{extra['min']:+g} tokens" in prompt_lengths(cond)


def test_a_report_of_a_run_without_an_ok_request_raises_no_warning(make_profile):
    """Every request rejected: the plots have nothing labelled, and drawing them (the CDFs, the
    over-time scatters, the per-second bins) raises no warning (matplotlib's "No artists with
    labels found to put in legend" reached the console, with its site-packages path)."""
    from loadgen.report import write_report

    with StreamServer(ttft_ms=1, itl_ms=1) as srv:
        res = run(
            make_profile(srv.url, target__extra_body={"loadgen_test": {"fail": "status:500"}}),
        )
    assert res.summary["counts"]["ok"] == 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write_report(res.run_dir)
    assert [str(w.message) for w in caught] == []


def test_a_run_the_server_rejects_at_once_is_not_client_limited(make_profile):
    """A server that rejects every request in well under a millisecond: the run's window is a
    few ms, start-up's CPU (imports, the probe, the workload, the collection before the load) is
    not in it, so the client's share of a core is at most about one (it was 5-12 "cores"), and a
    window that served nothing is not judged client_limited for keeping the CPU busy."""
    with StreamServer(ttft_ms=1, itl_ms=1) as srv:
        rejected = run(
            make_profile(
                srv.url,
                workload__num_requests=10,
                target__extra_body={"loadgen_test": {"fail": "status:500"}},
            )
        )
        served = run(make_profile(srv.url, workload__num_requests=10, workload__output_tokens=4))
    for res in (rejected, served):
        client = res.summary["client"]
        assert client["cpu_busy_fraction"] < 1.5, client
        assert client["client_limited"] is False, client["warnings"]
    assert rejected.summary["counts"]["ok"] == 0 and served.summary["counts"]["ok"] == 10
