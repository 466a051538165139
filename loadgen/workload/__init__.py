"""Request specs and open-loop schedules from a profile: pure and seeded.

Everything is a function of (seed, request index): any process can rebuild request ``i`` without
building the ones before it, which is what lets the runners split a schedule across workers.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

import numpy as np

from loadgen.backends import registry
from loadgen.config import LoadConfig, WorkloadConfig
from loadgen.config.stages import Stage
from loadgen.records import MediaPart, RequestSpec
from loadgen.summary import LengthStats
from loadgen.summary.conditions import ConditionsTraffic
from loadgen.workload.agentic import AgentPlan, agentic_plan
from loadgen.workload.arrivals import arrival_offsets_ns, offsets_until
from loadgen.workload.batches import Batches
from loadgen.workload.chat_template import ChatTemplate, TemplateFit
from loadgen.workload.datasets import DatasetError, word_count
from loadgen.workload.lengths import describe, sample_lengths
from loadgen.workload.media import MediaCache, MediaPlan
from loadgen.workload.models import ModelPicker
from loadgen.workload.prompts import (
    TextPrompts,
    TokenIdPrompts,
    TokenizerLike,
    TokenizerPrompts,
    chat_messages,
    load_tokenizer,
    require_tokenizers,
)
from loadgen.workload.sessions import SessionPlan
from loadgen.workload.sources import DatasetSource, PrefixGroups, TaskSource, TraceSource, trace_for
from loadgen.workload.tool_rounds import ToolRounds
from loadgen.workload.traces import prefix_reuse

__all__ = ["RequestSpec", "Workload", "build_schedule", "check_prompt_packages"]

BLOCK = 1024
_CACHED_BLOCKS = 64  # bounded, so a multi-hour duration run does not grow memory


class Workload:
    """Builds ``RequestSpec`` i on demand, deterministically in (seed, i)."""

    def __init__(
        self,
        cfg: WorkloadConfig,
        endpoint: str = "chat",
        prompt_format: str = "text",
        tokenizer_path: str | Path | None = None,
        *,
        tokenizer: TokenizerLike | None = None,
        chat_template: ChatTemplate | None = None,
        vocab_size: int = 2000,
    ):
        self.cfg = cfg
        self.endpoint = endpoint
        # Chat, Responses, Messages: prompts go as messages (the protocol says so in the registry).
        backend = registry.get(endpoint)
        self.messages = backend is not None and backend.messages
        self.carries_media = backend is not None and backend.media
        pooling = backend is not None and not backend.streamed
        self.prompt_format = prompt_format
        path = tokenizer_path or cfg.prompt.tokenizer
        if tokenizer is None and path is not None:
            tokenizer = load_tokenizer(path)
        # Also counts the tokens of each streamed chunk when the server gives no per-chunk usage.
        self.tokenizer: TokenizerLike | None = tokenizer
        if prompt_format == "token_ids":
            self._prompts: Any = TokenIdPrompts(cfg.seed, vocab_size)
        elif tokenizer is not None and prompt_format == "text":
            self._prompts = TokenizerPrompts(tokenizer, cfg.seed)
        else:
            self._prompts = TextPrompts(cfg.seed)
        self.approximate_prompt_lengths: bool = self._prompts.approximate
        # Chat prompts fitted through the model's chat template (the tokenizer folder's, unless
        # workload.prompt.chat_template is never), so the server's prompt is the requested length.
        self._chat_fit: TemplateFit | None = None
        if isinstance(self._prompts, TokenizerPrompts) and self.messages:
            if chat_template is None and path is not None and cfg.prompt.chat_template is None:
                chat_template = ChatTemplate.beside(path)
            if chat_template is not None:
                self._chat_fit = TemplateFit(self._prompts, chat_template)
        n_sys = cfg.prompt.system_prompt_tokens
        # The same kind as the prompts' build(): text, or token ids for prompt_format token_ids.
        self._system: str | list[int] | None
        self._system_tokens: int
        self._system, self._system_tokens = self._prompts.system(n_sys) if n_sys else (None, 0)
        self._blocks: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        # A tokenizer may miss the exact target; remember what it realised for realised().
        self._prompt_tokens: dict[int, int] = {}
        count = self._counter()
        self.media_cache = MediaCache()  # one encode per distinct medium, for the whole run
        self._source: DatasetSource | TraceSource | TaskSource | None = None
        if cfg.dataset is not None:
            self._source = DatasetSource(cfg.dataset, cfg.seed, count, self.media_cache)
        elif cfg.trace is not None:
            self._source = TraceSource(cfg.trace)
        elif cfg.tasks is not None:
            self._source = TaskSource(cfg.tasks, cfg.seed)
        src = self._source
        if isinstance(src, DatasetSource) and not self.carries_media and any(e.media for e in src.entries):
            takes = ", ".join(registry.names(lambda b: b.media))
            raise DatasetError(
                f"{src.cfg.path}: its rows name images or audio; endpoint {endpoint} "
                f"cannot carry them, use {takes}"
            )
        self._groups = PrefixGroups(cfg.prefix, cfg.seed, self._prompts) if cfg.prefix else None
        self._models = ModelPicker(cfg.models, cfg.seed) if cfg.models is not None else None
        # What an agent's requests carry: the tools and their choice, a response_format.
        tools = cfg.tools
        self._tools = (tools.functions, tools.tool_choice()) if tools is not None else (None, None)
        self._format = cfg.response_format.body() if cfg.response_format is not None else None
        generated = cfg.images is not None or cfg.audio is not None
        self._media = MediaPlan(cfg.images, cfg.audio, cfg.seed, self.media_cache) if generated else None
        if self._media is not None:
            self._media.warm()  # encoded before the run, not in the loop that stamps tokens
        # A pooling protocol (embeddings, rerank): a batch of items a request (config/pooling.py
        # has ruled out every other source of prompts for it).
        self._batches = Batches(cfg, self._prompts, backend.query) if pooling and backend else None
        self.sessions: SessionPlan | ToolRounds | AgentPlan | None = None
        if cfg.agentic is not None:  # workload.agentic: generated or replayed agent sessions
            self.sessions = agentic_plan(cfg, self._prompts, (self._system, self._system_tokens), count)
        elif cfg.sessions is not None:  # a session's prefix group is drawn by its session id
            self.sessions = SessionPlan(cfg.sessions, cfg, self._prompts, endpoint, self._shared)
        elif tools is not None and tools.rounds > 1:  # conversation s opens with request s
            self.sessions = ToolRounds(tools, self.single, self._prompts, cfg.seed)

    def _counter(self) -> Callable[[str], int]:
        """How a given prompt's tokens are counted: the tokenizer's, or one a word."""
        tok = self.tokenizer
        if tok is None:
            return word_count
        return lambda text: len(tok.encode(text, add_special_tokens=False).ids)

    @property
    def through_template(self) -> bool:
        """Whether synthetic chat prompts are fitted through the model's chat template."""
        return self._chat_fit is not None

    @property
    def fittable(self) -> bool:
        """Whether the server's /tokenize may rewrite prompts to exact lengths: synthetic ones
        only (a dataset's prompt is what it is; a trace's or a group's blocks must stay shared)."""
        single = self._batches is None  # a batch's items are not fitted one by one (yet)
        return single and self._source is None and self._groups is None and self.sessions is None

    def traffic(self) -> ConditionsTraffic:
        """What shaped the prompts, for the run's conditions: the source and its figures."""
        cfg, src = self.cfg, self._source
        out: dict[str, Any] = {"source": "synthetic"}
        if isinstance(src, DatasetSource):
            d = cfg.dataset
            assert d is not None
            out = {"source": "dataset", "dataset": {**d.model_dump(), "entries": len(src.entries)}}
        elif isinstance(src, TraceSource):
            t = src.trace
            out = {
                "source": "trace",
                "trace": {
                    **(cfg.trace.model_dump() if cfg.trace else {}),
                    "format": t.fmt,
                    "rows_read": t.rows,
                    "requests": len(t.offsets_ns),
                    "span_s": t.span_s,
                    "block_tokens": t.block_tokens if t.hash_ids is not None else None,
                    "designed_prefix_reuse": prefix_reuse(t) if t.hash_ids is not None else None,
                },
            }
        elif isinstance(src, TaskSource):
            out = {"source": "tasks", "tasks": {"kinds": list(src.tasks.kinds)}}
        if cfg.prefix is not None:
            out["prefix"] = cfg.prefix.model_dump()
        if cfg.sessions is not None:
            out["sessions"] = cfg.sessions.model_dump()
        if cfg.agentic is not None:
            out["agentic"] = cfg.agentic.model_dump()
        return cast(ConditionsTraffic, out)

    def schedule_ns(self) -> np.ndarray | None:
        """A trace's send offsets (ns from the start), None for any other workload."""
        return self._source.trace.offsets_ns if isinstance(self._source, TraceSource) else None

    def _block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        if b in self._blocks:
            self._blocks.move_to_end(b)
            return self._blocks[b]
        cfg = self.cfg
        # Separate streams per field: changing the output distribution keeps input lengths.
        lengths = (
            sample_lengths(cfg.input_tokens, BLOCK, np.random.default_rng([cfg.seed, 2, b])),
            sample_lengths(cfg.output_tokens, BLOCK, np.random.default_rng([cfg.seed, 3, b])),
        )
        self._blocks[b] = lengths
        if len(self._blocks) > _CACHED_BLOCKS:
            self._blocks.popitem(last=False)
        return lengths

    def lengths(self, i: int) -> tuple[int, int]:
        """(input tokens, output tokens) of request ``i``: sampled from the profile's
        distributions, or a dataset's or trace's own (plus a shared prefix, if any)."""
        inp, out = self._block(i // BLOCK)
        n_in, n_out = int(inp[i % BLOCK]), int(out[i % BLOCK])
        if self._source is not None:
            n_in, n_out = self._source.lengths(i, n_out)
            n_in += self._shared(i)[1]
        return n_in, n_out

    def prefix_group(self, i: int) -> int | None:
        """The shared-prefix group request ``i`` belongs to (None: it shares no prefix)."""
        return self._groups.group(i) if self._groups is not None else None

    def _shared(self, i: int) -> tuple[str | list[int] | None, int]:
        """The prefix request ``i`` shares (its group's, or the one system prompt), if any."""
        if self._groups is not None:
            g = self._groups.group(i)
            return (None, 0) if g is None else self._groups.prefix(g)
        return self._system, self._system_tokens

    def request(self, i: int) -> RequestSpec:
        """Request ``i``; its input length counts the shared prefix, if any."""
        if self.sessions is not None:
            raise TypeError("a multi-turn request depends on its history: build it with workload.sessions")
        return self.single(i)

    def single(self, i: int) -> RequestSpec:
        """Request ``i`` on its own, as a conversation's first turn is (``request`` refuses a
        workload of conversations, whose later turns depend on their history)."""
        if i < 0:
            raise ValueError(f"request index must be >= 0, got {i}")
        if self._batches is not None:
            model = self._models.model(i) if self._models is not None else None
            return self._batches.request(i, model)
        n_in, n_out = self.lengths(i)
        system, n_sys = self._shared(i)
        tools, choice = self._tools
        expected, match = None, "exact"
        if self._source is not None:
            user, n_user, expected, match = self._source.user(i, self._prompts)
            total = n_sys + n_user
        elif self._chat_fit is not None:  # the rendered prompt, template and system included, is n_in
            user, total = self._chat_fit.build(i, n_in, cast("str | None", system), tools)
        else:
            user, n_user = self._prompts.build(i, max(1, n_in - n_sys))
            total = n_sys + n_user
        messages = None
        if self.messages:
            # Message protocols take text prompts only (the config rejects token_ids for them).
            messages = chat_messages(cast(str, user), cast("str | None", system))
            prompt: str | list[int] = user
        elif system is None:
            prompt = user
        elif isinstance(user, list):  # token ids: the shared prefix is token ids as well
            prompt = cast("list[int]", system) + user
        else:
            prompt = f"{system} {user}"
            if isinstance(self._prompts, TokenizerPrompts):
                total = self._prompts.count(prompt)
        if isinstance(self._prompts, TokenizerPrompts):
            self._prompt_tokens[i] = total
        model = self._models.model(i) if self._models is not None else None
        return RequestSpec(
            i,
            prompt,
            messages,
            total,
            n_out,
            expected,
            match,
            model=model,
            tools=tools,
            tool_choice=choice,
            response_format=self._format,
            media=self._media_of(i),
        )

    def _media_of(self, i: int) -> tuple[MediaPart, ...]:
        """A dataset row's own media, then the generated ones (the profile and the constructor
        refuse media for a protocol that cannot carry them)."""
        if not self.carries_media:
            return ()
        own = self._source.media(i) if isinstance(self._source, DatasetSource) else ()
        return own + (self._media.media(i) if self._media is not None else ())

    def take(self, n: int) -> tuple[RequestSpec, ...]:
        """Requests 0..n-1."""
        return tuple(self.request(i) for i in range(n))

    def _expected_prompt_tokens(self, i: int, n_in: int) -> int:
        if self._batches is not None:
            return self._batches.prompt_tokens(i)
        if i in self._prompt_tokens:
            return self._prompt_tokens[i]
        if self._source is not None:
            return n_in
        n_sys = self._shared(i)[1]
        n_user = max(1, n_in - n_sys)
        if isinstance(self._prompts, TextPrompts):
            n_user = max(n_user, TextPrompts.prefix_words)
        return n_sys + n_user

    def realised(self, ids: Iterable[int]) -> dict[str, LengthStats]:
        """Statistics of the prompt and output lengths of the requests actually made."""
        pairs = [(i, *self.lengths(i)) for i in ids]
        pooled = self._batches is not None  # a pooling answer asks no output
        return {
            "input_tokens": describe([self._expected_prompt_tokens(i, n) for i, n, _ in pairs]),
            "output_tokens": describe([0 if pooled else o for _, _, o in pairs]),
        }


def check_prompt_packages(cfg: WorkloadConfig, endpoint: str, prompt_format: str) -> None:
    """Before a run makes anything: ``MissingExtra`` when the profile's tokenizer needs the
    ``tokenizers`` package (or its chat template ``jinja2``) and it is not installed, and
    ``ChatTemplateError`` when that template does not compile; each one line that names the fix."""
    path = cfg.prompt.tokenizer
    if path is None:
        return
    require_tokenizers()
    backend = registry.get(endpoint)
    chat = backend is not None and backend.messages and prompt_format == "text"
    if not chat or cfg.prompt.chat_template is not None:
        return
    ChatTemplate.beside(path)  # compiled, so a missing jinja2 or a broken template stops it here


def build_schedule(load: LoadConfig, workload: WorkloadConfig) -> np.ndarray | None:
    """Open loop: absolute send offsets (ns from run start); None for a closed loop.

    ``num_requests`` plus the warm-up requests, or every offset before ``duration_s`` (counted
    from run start, warm-up included), whichever ends first.
    """
    if workload.trace is not None:
        offsets = trace_for(workload.trace).offsets_ns
        if workload.duration_s is not None:
            offsets = offsets[offsets < int(workload.duration_s * 1e9)]
        return offsets if workload.num_requests is None else offsets[: workload.num_requests]
    if load.rate is None:
        return None
    shape = (load.rate, load.arrival, load.burstiness, workload.seed)
    n = None if workload.num_requests is None else workload.num_requests + load.warmup_requests
    if workload.duration_s is None:
        assert n is not None  # the config requires num_requests or duration_s
        return arrival_offsets_ns(n, *shape)
    offsets = offsets_until(workload.duration_s, *shape)
    return offsets if n is None else offsets[:n]


def stage_schedule(stage: Stage, seed: int, ramp_from: float = 0.0) -> np.ndarray | None:
    """Open-loop send offsets (ns from the stage's start) for one stage; None for closed loop.

    Stage 0 draws exactly the single-stage schedule of ``seed``; later stages draw their own
    stream. With a ramp of R seconds the rate moves linearly from ``ramp_from`` (the previous
    stage's rate, 0 for the first) to the stage's rate over R: the constant-rate arrivals are
    carried along the ramp's cumulative intensity (the arrival at offset o of the constant
    process becomes the ramped process's arrival with the same expected count), so the arrival
    process keeps its shape and only its pace changes.
    """
    if stage.rate is None:
        return None
    stream = seed if stage.index == 0 else (seed * 1_000_003 + stage.index) % (1 << 63)
    rate, ramp = stage.rate, stage.ramp_s
    shape = (rate, stage.arrival, stage.burstiness, stream)
    n = None if stage.num_requests is None else stage.num_requests + stage.warmup_requests
    # The ramp carries (ramp_from + rate) / 2 * R requests, which the constant process
    # reaches at o_R; the stage's duration in constant-process time is shorter by R - o_R.
    o_ramp = ramp * (ramp_from + rate) / (2 * rate)
    if stage.duration_s is None:
        assert n is not None  # a stage needs num_requests or duration_s
        offsets = arrival_offsets_ns(n, *shape)
    else:
        offsets = offsets_until(max(stage.duration_s - ramp + o_ramp, 0.0), *shape)
        offsets = offsets if n is None else offsets[:n]
    if ramp <= 0:
        return offsets
    o = offsets / 1e9
    a, b = (rate - ramp_from) / (2 * ramp), ramp_from  # intensity t -> b t + a t^2 on [0, R]
    if a == 0:  # ramping to the rate it already has: nothing moves
        t_ramp = o
    else:  # solve b t + a t^2 = rate * o for t (the root in [0, R])
        t_ramp = (-b + np.sqrt(np.maximum(b * b + 4 * a * rate * o, 0.0))) / (2 * a)
    t = np.where(o <= o_ramp, t_ramp, ramp + (o - o_ramp))
    return np.rint(t * 1e9).astype(np.int64)
