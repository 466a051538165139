#!/usr/bin/env python3
"""Write loadgen's small sample datasets and traces, deterministically, from a fixed seed.

    python scripts/make_samples.py              # rewrite data/ and traces/ in the repository
    python scripts/make_samples.py --out DIR    # write them under DIR instead

The content is synthetic and original (a small vocabulary and a few templates), not copied from
any published data set: the samples exist so tests and examples have the real layouts at hand
without downloading anything. It prints each file's figures, which docs/workloads.md quotes,
including the Mooncake sample's designed prefix reuse as loadgen.workload.traces measures it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

import numpy as np

from loadgen.workload.datasets import load_dataset
from loadgen.workload.traces import BLOCK_TOKENS, load_trace, prefix_reuse

SEED = 20240611
ROOT = Path(__file__).resolve().parent.parent

# Word lists, several to a line: data, not code (the formatter would give every word a line).
# fmt: off
TOPICS = [
    "growing tomatoes on a balcony", "baking sourdough bread", "fixing a flat bicycle tire",
    "planning a monthly budget", "learning Spanish verbs", "writing a cover letter",
    "sorting a list in Python", "joining two SQL tables", "training for a first 10k run",
    "choosing a used car", "starting a compost heap", "reading a weather map",
    "brewing pour-over coffee", "keeping houseplants alive", "tuning a guitar by ear",
    "setting up a home network", "writing unit tests", "planning a weekend in Lisbon",
]
SUBJECTS = [
    "the plan", "a simple method", "the first step", "this approach", "a good habit", "the main idea",
    "a small change", "the usual mistake", "your schedule", "the best tool", "a short list",
    "the result",
]
VERBS = [
    "helps", "needs", "changes", "saves", "improves", "depends on", "starts with", "avoids", "shows",
    "keeps", "builds", "explains",
]
OBJECTS = [
    "the whole process", "a lot of time", "your daily routine", "the final result", "most problems",
    "a clear goal", "the right amount of water", "a steady pace", "every small detail", "the budget",
    "the next week", "a quiet place to work",
]
TAILS = [
    "in most cases", "over a few weeks", "if you are patient", "when you check it often",
    "for beginners", "without much effort", "at the start", "step by step", "more than you expect",
    "in the long run",
]
ASKS = [
    "Can you explain {t} to someone who is new to it?", "I need help with {t}.",
    "What should I know before {t}?", "Give me a short plan for {t}.",
    "Why is {t} harder than it looks?",
]
REPLIES = [
    "Sure, here is how I would think about {t}.", "Good question: {t} is easier with a plan.",
    "Here are the main points about {t}.", "Let us go through {t} one step at a time.",
]
# fmt: on


def pick(rng: np.random.Generator, words: list[str]) -> str:
    return words[int(rng.integers(len(words)))]


def sentence(rng: np.random.Generator) -> str:
    return f"{pick(rng, SUBJECTS).capitalize()} {pick(rng, VERBS)} {pick(rng, OBJECTS)} {pick(rng, TAILS)}."


def text(rng: np.random.Generator, opening: str, words: int) -> str:
    """``opening`` and then sentences, cut to exactly ``words`` whitespace words."""
    out = opening.split()
    while len(out) < words:
        out += sentence(rng).split()
    body = " ".join(out[:words])
    return body if body.endswith((".", "?")) else body.rstrip(",") + "."


def lognormal_ints(
    rng: np.random.Generator, mean: float, sigma: float, lo: int, hi: int, n: int
) -> list[int]:
    raw = rng.lognormal(np.log(mean) - sigma**2 / 2, sigma, n)
    return np.clip(np.rint(raw), lo, hi).astype(int).tolist()


def sharegpt(rng: np.random.Generator, n: int = 60) -> list[dict]:
    convs = []
    for i in range(n):
        topic = pick(rng, TOPICS)
        turns = []
        for j in range(int(rng.integers(2, 7))):
            if j % 2 == 0:
                opening = pick(rng, ASKS) if j == 0 else "Thanks. One more question."
                words = lognormal_ints(rng, 60, 0.9, 5, 300, 1)[0]
                turns.append({"from": "human", "value": text(rng, opening.format(t=topic), words)})
            else:
                words = lognormal_ints(rng, 150, 0.7, 10, 400, 1)[0]
                turns.append({"from": "gpt", "value": text(rng, pick(rng, REPLIES).format(t=topic), words)})
        convs.append({"id": f"sample-{i:03d}", "conversations": turns})
    return convs


def prompts(rng: np.random.Generator, n: int = 40) -> list[dict]:
    rows: list[dict] = []
    for i in range(n):
        topic = pick(rng, TOPICS)
        kind = i % 3
        if kind == 0:  # arithmetic with an expected answer, for the quality axis
            a, b = (int(x) for x in rng.integers(2, 60, 2))
            op, val = ("+", a + b) if i % 2 == 0 else ("times", a * b)
            row: dict = {
                "prompt": f"What is {a} {op} {b}? Answer with the number only.",
                "expected": str(val),
            }
            if i % 4 == 0:
                row["output_tokens"] = 4
        elif kind == 1:  # an answer of a known length
            words = int(rng.integers(20, 300))
            row = {"prompt": f"In about {words} words, explain why {topic} matters.", "output_tokens": words}
        else:  # the server decides the length
            row = {"prompt": text(rng, f"Describe {topic}.", int(rng.integers(8, 120)))}
        rows.append(row)
    return rows


def mooncake(rng: np.random.Generator) -> list[dict]:
    """Chats that resend their history, documents asked about repeatedly, and one-off requests.

    Ids are placeholders while building; afterwards they are renumbered in order of first
    appearance, as the Mooncake traces number theirs."""
    fresh = iter(range(10**6))
    system = {0: [next(fresh), next(fresh)], 1: [next(fresh)]}  # two apps' system prompts, full blocks
    reqs: list[tuple[float, int, list[int]]] = []  # (time s, input tokens, hash ids)

    def blocks(prefix: list[int], length: int) -> list[int]:
        return prefix + [next(fresh) for _ in range(-(-length // BLOCK_TOKENS) - len(prefix))]

    for _ in range(30):  # chats: each turn resends the full blocks of the one before
        t, app = float(rng.uniform(0, 40)), int(rng.integers(2))
        length = len(system[app]) * BLOCK_TOKENS + int(rng.integers(200, 1500))
        ids = blocks(system[app], length)
        for _turn in range(int(rng.integers(2, 9))):
            if t >= 60 or length > 8000:
                break
            reqs.append((t, length, ids))
            reply = int(rng.integers(20, 400))
            length = length + reply + int(rng.integers(40, 600))
            ids = blocks(ids[: reqs[-1][1] // BLOCK_TOKENS], length)  # the last partial block changes
            t += float(rng.uniform(2, 9))
    for _ in range(8):  # documents: whole blocks behind either app's system prompt, then a question
        doc = [next(fresh) for _ in range(int(rng.integers(2, 14)))]
        start = float(rng.uniform(0, 45))
        for t in np.sort(rng.uniform(start, 60, int(rng.integers(3, 9)))).tolist():
            # The same document behind the other app's prompt repeats its blocks, but not as a
            # leading run: a prefix cache cannot serve them, which prefix_reuse must not count.
            head = system[int(rng.integers(2))] + doc
            length = len(head) * BLOCK_TOKENS + int(rng.integers(30, 300))
            reqs.append((t, length, blocks(head, length)))
    while len(reqs) < 300:  # one-offs, half behind an app's system prompt
        prefix = system[int(rng.integers(2))] if rng.random() < 0.5 else []
        # At least a few user tokens past the system prompt: its blocks are full, the user's are not.
        length = max(lognormal_ints(rng, 2500, 0.6, 500, 8000, 1)[0], len(prefix) * BLOCK_TOKENS + 50)
        reqs.append((float(rng.uniform(0, 60)), length, blocks(prefix, length)))
    reqs.sort(key=lambda r: r[0])  # stable: a chat's turns keep their order
    t0, renumber, rows = reqs[0][0], {}, []
    outputs = lognormal_ints(rng, 150, 0.7, 20, 400, len(reqs))
    for (t, length, ids), out in zip(reqs, outputs):
        hashes = [renumber.setdefault(h, len(renumber)) for h in ids]
        rows.append(
            {
                "timestamp": round((t - t0) * 1000),
                "input_length": length,
                "output_length": out,
                "hash_ids": hashes,
            }
        )
    return rows


def azure(rng: np.random.Generator, n: int = 300, span_s: float = 59.9) -> list[str]:
    gaps = rng.gamma(0.5, 1.0, n - 1)  # bursty: gamma gaps with shape < 1 cluster arrivals
    ticks = np.concatenate(([0], np.cumsum(gaps))) / gaps.sum() * span_s * 10**7  # 100 ns ticks
    start = dt.datetime(2024, 3, 4, 10, 0, 7)
    context = np.where(
        rng.random(n) < 0.7,
        lognormal_ints(rng, 400, 0.8, 3, 8000, n),
        lognormal_ints(rng, 2500, 0.5, 3, 8000, n),
    )
    generated = lognormal_ints(rng, 180, 0.8, 5, 700, n)
    lines = [",".join(("TIMESTAMP", "ContextTokens", "GeneratedTokens"))]
    for tick, c, g in zip(np.rint(ticks).astype(np.int64).tolist(), context.tolist(), generated):
        when = start + dt.timedelta(microseconds=tick // 10)
        lines.append(f"{when:%Y-%m-%d %H:%M:%S}.{when.microsecond:06d}{tick % 10},{c},{g}")
    return lines


def native(rng: np.random.Generator, n: int = 200, rate: float = 4.0) -> list[dict]:
    times = np.cumsum(np.concatenate(([0.0], rng.exponential(1000 / rate, n - 1))))
    inputs = lognormal_ints(rng, 900, 0.9, 16, 8000, n)
    outputs = lognormal_ints(rng, 200, 0.8, 4, 1000, n)
    return [
        {"timestamp_ms": round(t, 3), "input_tokens": i, "output_tokens": o}
        for t, i, o in zip(times.tolist(), inputs, outputs)
    ]


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def write(root: Path) -> dict[str, Path]:
    rng = np.random.default_rng(SEED)
    paths = {
        "sharegpt": root / "data" / "sharegpt_sample.json",
        "prompts": root / "data" / "prompts_sample.jsonl",
        "mooncake": root / "traces" / "mooncake_sample.jsonl",
        "azure": root / "traces" / "azure_sample.csv",
        "native": root / "traces" / "native_sample.jsonl",
    }
    for p in paths.values():
        p.parent.mkdir(parents=True, exist_ok=True)
    paths["sharegpt"].write_text(json.dumps(sharegpt(rng), indent=1) + "\n")
    paths["prompts"].write_text(jsonl(prompts(rng)))
    paths["mooncake"].write_text(jsonl(mooncake(rng)))
    paths["azure"].write_text("\n".join(azure(rng)) + "\n")
    paths["native"].write_text(jsonl(native(rng)))
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT, help="root folder for data/ and traces/")
    paths = write(parser.parse_args(argv).out)
    for name in ("sharegpt", "prompts"):
        ds = load_dataset(paths[name])
        print(f"{paths[name]}: {len(ds)} entries, {ds.skipped} skipped, {paths[name].stat().st_size} bytes")
    for name in ("mooncake", "azure", "native"):
        tr = load_trace(paths[name])
        extra = f", designed prefix reuse {prefix_reuse(tr):.4f}" if tr.hash_ids is not None else ""
        print(
            f"{paths[name]}: {tr.rows} requests over {tr.span_s:.3f} s, {int(tr.input_tokens.sum())} input "
            f"tokens, {paths[name].stat().st_size} bytes{extra}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
