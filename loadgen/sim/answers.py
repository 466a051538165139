"""How the simulator answers the built-in quality tasks: right at a modelled accuracy, never measured.

The built-in task set (loadgen/quality/tasks.py: arithmetic, copy, recall) has exact answers, so
the simulator can recognise a task's prompt and compute its right answer. Whether it gives it is a
draw, deterministic in (config seed, prompt text): the answer is right when the draw ``u`` falls
below the preset's modelled accuracy

    accuracy = base accuracy of the model  x  retained(weight precision)  x  retained(KV precision)

and otherwise a plausible wrong one (a sum off by a few, two copied words swapped, another fact's
value), the same wrong text for the same prompt and seed. Because one ``u`` serves every
precision, a lower precision turns exactly the prompts with ``u`` in [low accuracy, high accuracy)
from right to wrong and changes nothing else: an FP16 run and its FP8 twin on the same prompts
disagree on exactly those (``modelled_flip``), which is the figure ``loadgen compare``'s output
agreement should show. Real quantisation also flips some wrong answers to right and some right
ones to other right-looking texts; the model keeps only the net loss the sources publish.

The figures and where they come from (docs/simulator.md, "Answers to the quality tasks"):
``BASE_ACCURACY`` is each model's published GSM8K score (the simple-arithmetic benchmark every
model card reports; the built-in tasks are easier still, so a real model scores higher on them);
``RETAINED`` is the published FP8 / FP16 score ratio on the same benchmark.

The prompts are read with the simulator's own patterns: it imports nothing of the client (as the
scripted test server in loadgen/testing/common.py reads them).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from .config import SimConfig
from .text import WORDS, WordStream

# Each model's GSM8K score (fraction right) and where it is published.
_CARD = "Llama 3 model card (github.com/meta-llama/llama3), instruction-tuned models, GSM-8K (8-shot, CoT)"
BASE_ACCURACY: dict[str, tuple[float, str]] = {
    "llama2-7b": (0.257, f"{_CARD}, Llama 2 7B: 25.7"),
    "llama2-13b": (0.774, f"{_CARD}, Llama 2 13B: 77.4"),
    "llama3-8b": (0.796, f"{_CARD}, Llama 3 8B: 79.6"),
    "llama3-70b": (0.930, f"{_CARD}, Llama 3 70B: 93.0"),
    "mistral-7b": (0.522, "Mistral 7B paper (arXiv 2310.06825), Table 2, base model: GSM8K (maj@8) 52.2"),
    "qwen2.5-7b": (
        0.916,
        "Qwen2.5 technical report (arXiv 2412.15115), Table 8, Qwen2.5-7B-Instruct: GSM8K 91.6",
    ),
    "tiny-llama": (0.0, "the integration suite's randomly initialised 3M-parameter model: nothing right"),
}

# The share of the FP16 score a lower precision keeps (1.0: no published loss).
RETAINED: dict[str, tuple[float, str]] = {
    "fp16": (1.0, "the reference"),
    "bf16": (1.0, "the reference"),
    "fp8": (
        73.99 / 75.96,
        "Neural Magic, Meta-Llama-3-8B-Instruct-FP8 model card: GSM8K (5-shot) 75.96 BF16, 73.99 FP8 "
        "weights and activations",
    ),
}
KV_FP8_RETAINED = (1.0, "no published paired FP16 / FP8-KV score was found: FP8 KV changes no answer")

MODELLED = "modelled by the simulator, not measured"

_ARITHMETIC = re.compile(r"What is (\d+) ([-+x*]) (\d+)\? Reply with the number only\.")
_COPY = re.compile(r"Repeat the following words exactly, nothing else: (.+?)\s*$", re.DOTALL)
_FACT = re.compile(r"^\s*(\w+): (\S+)\s*$", re.MULTILINE)
_ASK = re.compile(r"What is the value for (\w+)\? Reply with the value only\.")


def solve(text: str) -> tuple[str, str] | None:
    """(the right answer, a plausible wrong one) to a built-in task's prompt, or None for any
    other prompt. The wrong one differs from the right one after any normalisation."""
    m = _ARITHMETIC.search(text)
    if m:
        x, op, y = int(m[1]), m[2], int(m[3])
        value = x + y if op == "+" else x - y if op == "-" else x * y
        return str(value), str(value + 10)  # a carry lost: the commonest slip
    m = _COPY.search(text)
    if m:
        words = m[1].split()
        wrong = words[1:2] + words[:1] + words[2:] if len(words) > 1 else words + words
        return " ".join(words), " ".join(wrong)
    m = _ASK.search(text)
    if m:
        facts = dict(_FACT.findall(text))
        if m[1] in facts:
            others = [v for k, v in facts.items() if k != m[1] and v != facts[m[1]]]
            return facts[m[1]], others[0] if others else facts[m[1]] + "0"
    return None


def draw(seed: int, text: str) -> float:
    """A uniform number in [0, 1) that only the seed and the prompt's text decide."""
    digest = hashlib.blake2b(f"{seed}\x00{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def accuracy(config: SimConfig) -> float:
    """The preset's modelled share of right answers (``accuracy_model`` says where it comes from)."""
    p = config.parsed
    kv = config.kv_precision or p.kv_precision or p.precision
    base = BASE_ACCURACY[p.model.key][0]
    return base * RETAINED[p.precision][0] * (KV_FP8_RETAINED[0] if kv == "fp8" else 1.0)


def accuracy_model(config: SimConfig) -> dict[str, Any] | None:
    """What the simulator's answers to the built-in tasks stand on, for the run's conditions and
    the summary's quality block (None: no published score for this model, so it does not answer)."""
    p = config.parsed
    if p.model.key not in BASE_ACCURACY:
        return None
    kv = config.kv_precision or p.kv_precision or p.precision
    return {
        "note": MODELLED,
        "accuracy": round(accuracy(config), 4),
        "base_accuracy": BASE_ACCURACY[p.model.key][0],
        "base_source": BASE_ACCURACY[p.model.key][1],
        "weights": {
            "precision": p.precision,
            "retained": round(RETAINED[p.precision][0], 4),
            "source": RETAINED[p.precision][1],
        },
        "kv": {
            "precision": kv,
            "retained": KV_FP8_RETAINED[0] if kv == "fp8" else 1.0,
            "source": KV_FP8_RETAINED[1] if kv == "fp8" else "the reference",
        },
    }


def answer(config: SimConfig, text: str) -> str | None:
    """The simulator's answer to a built-in task's prompt (None: not a task)."""
    solved = solve(text)
    if solved is None or config.parsed.model.key not in BASE_ACCURACY:
        return None
    right, wrong = solved
    return right if draw(config.seed, text) < accuracy(config) else wrong


def prompt_text(body: dict[str, Any], chat: bool) -> str:
    """What a task prompt is read from: the last user message's text for chat (its text parts
    joined), the prompt string for completions."""
    if not chat:
        prompt = body.get("prompt")
        return prompt if isinstance(prompt, str) else ""
    for m in reversed(body.get("messages") or []):
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):
                return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return content if isinstance(content, str) else ""
    return ""


def pieces(text: str) -> list[str]:
    """An answer's tokens: one a word, each after the first with its leading space."""
    words = text.split()
    return words[:1] + [" " + w for w in words[1:]]


def task_answer(
    body: dict[str, Any], chat: bool, config: SimConfig, words: WordStream, max_tokens: int, min_tokens: int
) -> list[str] | None:
    """The tokens the simulator streams for a built-in task's prompt (None: not a task): the
    answer, then the end of text; with ``ignore_eos`` (exactly ``max_tokens``) or ``min_tokens``
    the prompt's word stream carries on after it."""
    text = answer(config, prompt_text(body, chat))
    if text is None:
        return None
    out = pieces(text)
    n = max_tokens if body.get("ignore_eos") else min(max(len(out), min_tokens), max_tokens)
    out += [WORDS[words.index(i)] for i in range(len(out), n)]
    return out[:n]
