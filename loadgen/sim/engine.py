"""A continuous-batching engine on a virtual clock: KV blocks, admission, prefill, decode.

The engine knows nothing about HTTP or wall time. ``step()`` plans one forward pass, advances
the virtual clock by its cost and says which sequences got a token. The server paces these
steps to the wall clock; ``virtual_time.py`` runs them back to back for what-if questions,
the calibration table, the fit and tests.

Policy (stated, because it shapes the tails):
- Admission is FCFS with head-of-line blocking: a sequence is admitted when its KV blocks fit,
  the running count is below ``max_num_seqs`` and the step's token budget has room. Which
  blocks it needs is ``kv_allocation``:
  - ``reserve`` (the default; the chapter's arithmetic, TensorRT-LLM's "guaranteed no evict"):
    its prompt plus its whole output budget at admission, so it never runs out and nothing is
    ever preempted.
  - ``on_demand`` (vLLM, SGLang): its prompt at admission, then one block each time its tokens
    fill the last. A decode step that finds no free block preempts the newest running sequence
    (vLLM's ``running.pop()``), freeing its blocks and putting it at the head of the queue; when
    it is admitted again it recomputes its prompt and every token it had generated in one
    prefill (vLLM's recompute preemption), whose last step yields its next token. A step that
    preempted admits no one, as vLLM's scheduler does.
- ``prefill_first``: a step that can admit runs only prefills (whole prompts, budget
  ``max_num_batched_tokens`` but always at least one); otherwise it decodes every running
  sequence. ``chunked``: every step decodes all running sequences, then fills the rest of the
  token budget with prompt chunks (partial prefills first, then new admissions).
- The step that finishes a prompt yields that sequence's first token; each decode step yields
  one token per decoding sequence, or with a draft model (``num_speculative_tokens``,
  ``speculative.py``) 1 + its accepted draft tokens (``Seq.emitting``). Finished sequences
  free their blocks at once, so waiting requests join the very next step.
- Prefix caching (``prefix_cache.py``): at admission a sequence's cached prompt tokens count as
  already prefilled, so it computes (and spends step budget on) only the rest, whose attention
  still reads the cached context. Its blocks enter the cache when its prefill completes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .adapters import AdapterSlots
from .config import SimConfig
from .prefix_cache import PrefixCache
from .speculative import Drafter


class Seq:
    """One request inside the engine. ``owner`` is free for the server's per-request state."""

    __slots__ = (
        "prompt_len",
        "prefill_len",
        "output_len",
        "reserve_len",
        "prefilled",
        "generated",
        "blocks",
        "block_hashes",
        "cached_tokens",
        "owner",
        "adapter",
        "arrival_vns",
        "admitted_vns",
        "admit_no",
        "emitting",
        "token_vns",
    )

    def __init__(
        self,
        prompt_len: int,
        output_len: int,
        reserve_len: int | None = None,
        owner: Any = None,
        block_hashes: Sequence[int] = (),
        adapter: str | None = None,
    ):
        self.prompt_len = prompt_len
        self.prefill_len = prompt_len  # + the tokens it had generated, once preempted (recompute)
        self.output_len = output_len  # tokens it will generate before stopping
        self.reserve_len = output_len if reserve_len is None else reserve_len  # blocks reserved for
        self.prefilled = 0
        self.generated = 0
        self.blocks = 0
        self.block_hashes = block_hashes  # of its prompt's full blocks; () never hits
        self.cached_tokens = 0  # its prefix-cache hit, set at admission
        self.owner = owner
        self.adapter = adapter  # the LoRA adapter it asked for; None: the base model
        self.arrival_vns = 0
        self.admitted_vns = -1  # its first admission (a preempted one is admitted again later)
        self.admit_no = -1  # admission order of its latest admission: the newest is preempted first
        self.emitting = 1  # tokens the last step that emitted it gave it (> 1: accepted drafts)
        self.token_vns: list[int] | None = None  # filled by simulate() only


@dataclass
class Step:
    duration_ns: int
    emitted: list[Seq]  # got one token this step (first tokens included)
    finished: list[Seq]  # subset of emitted that reached output_len
    admitted: list[Seq]
    # The roofline's two times (seconds, each as if alone; ``Physics.step_times``): the GPU
    # model's power reads how compute- and bandwidth-bound the step was. Then the
    # tensor-parallel all-reduces' time and a draft model's passes' two times, which the step
    # also spends.
    memory_s: float = 0.0
    compute_s: float = 0.0
    comm_s: float = 0.0
    draft_memory_s: float = 0.0
    draft_compute_s: float = 0.0


class Engine:
    def __init__(self, config: SimConfig):
        self.physics = config.physics
        self.block_size = config.block_size
        self.max_num_seqs = config.max_num_seqs
        self.budget = config.max_num_batched_tokens
        self.chunked = config.scheduling == "chunked"
        self.on_demand = config.kv_allocation == "on_demand"
        self.total_blocks = config.num_blocks
        self.free_blocks = self.total_blocks
        self.now_ns = 0  # virtual
        self.waiting: deque[Seq] = deque()
        self.prefilling: list[Seq] = []  # admitted, prompt not done
        self.decoding: list[Seq] = []
        self.decode_context = 0  # tokens held by decoding sequences
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.preemptions = 0
        self.admissions = 0
        self.prefix_cache = PrefixCache(self.total_blocks, self.block_size) if config.prefix_caching else None
        self.adapters = AdapterSlots(config.max_loras, round(config.lora_load_ms * 1e6))
        k = config.num_speculative_tokens
        self.drafter = Drafter(k, config.spec_acceptance, config.draft_cost, config.seed) if k else None
        self.lookahead = k  # KV slots a decode step writes past the context (on_demand blocks)

    # --- state -------------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    @property
    def kv_usage(self) -> float:
        return 1.0 - self.free_blocks / self.total_blocks if self.total_blocks else 0.0

    def has_work(self) -> bool:
        return bool(self.waiting or self.prefilling or self.decoding)

    def blocks_for(self, seq: Seq) -> int:
        """The blocks a waiting sequence takes at admission (see ``kv_allocation`` above)."""
        if self.on_demand:
            return -(-seq.prefill_len // self.block_size)
        return -(-(seq.prompt_len + seq.reserve_len) // self.block_size)

    def uncached_len(self, seq: Seq) -> int:
        """Prompt tokens a waiting sequence would compute if it were admitted now."""
        cache = self.prefix_cache
        if cache is None or not seq.block_hashes:
            return seq.prefill_len
        return seq.prefill_len - cache.lookup(seq.block_hashes, seq.prompt_len)

    # --- requests ----------------------------------------------------------------------------
    def submit(self, seq: Seq) -> None:
        seq.arrival_vns = self.now_ns
        self.waiting.append(seq)

    def abort(self, seq: Seq) -> None:
        """Drop a sequence wherever it is (client went away); frees its blocks."""
        if seq in self.waiting:
            self.waiting.remove(seq)
            return
        if seq in self.prefilling:
            self.prefilling.remove(seq)
        elif seq in self.decoding:
            self.decoding.remove(seq)
            self.decode_context -= seq.prompt_len + seq.generated
        self.free_blocks += seq.blocks
        seq.blocks = 0

    # --- one forward pass --------------------------------------------------------------------
    def step(self) -> Step:
        """Plan and cost one step, advance the virtual clock, return who got a token."""
        ph = self.physics
        emitted: list[Seq] = []
        draft = (0.0, 0.0)  # a draft model's passes, before the target's (speculative.py)
        if not self.chunked and self._admit_whole_prompts():
            # prefill_first: this step only prefills the newly admitted prompts (past any cached
            # prefix, whose KV the new tokens read as a later chunk reads the earlier ones').
            new, kv_read, flops, admitted = 0, 0, 0.0, list(self.prefilling)
            for s in admitted:
                c = s.prefill_len - s.prefilled
                new += c
                flops += ph.chunk_attention_flops(s.prefilled, c)
                kv_read += s.prefilled
                s.prefilled = s.prefill_len
            times = ph.step_times(new, kv_read, flops)
            seqs = len(admitted)
            self.prefilling.clear()
            self._start_decoding(admitted, emitted)
        else:
            preempted = self.on_demand and self._grow_blocks()
            decoding = self.decoding
            new = len(decoding) * (self.lookahead + 1)  # a draft model's k verified too
            kv_read = self.decode_context
            flops = 0.0
            draft = self._speculate(decoding)
            admitted = self._admit_chunks(self.budget - new) if self.chunked and not preempted else []
            done = []
            left = self.budget - new
            seqs = len(decoding)
            for s in self.prefilling:
                if left <= 0:
                    break
                seqs += 1
                c = min(s.prefill_len - s.prefilled, left)
                flops += ph.chunk_attention_flops(s.prefilled, c)
                kv_read += s.prefilled
                s.prefilled += c
                new += c
                left -= c
                if s.prefilled == s.prefill_len:
                    done.append(s)
            if new == 0:
                return Step(0, [], [], [])
            times = ph.step_times(new, kv_read, flops)
            emitted.extend(decoding)
            spec = self.drafter is not None
            self.decode_context += sum(s.emitting for s in decoding) if spec else len(decoding)
            if done:
                self.prefilling = [s for s in self.prefilling if s.prefilled < s.prefill_len]
                self._start_decoding(done, emitted)
        comm_s = ph.comm_seconds(new)
        seconds = max(draft) + max(times) + comm_s + ph.overhead_s + ph.seq_overhead_s * seqs
        duration_ns = round(seconds * 1e9) + self.adapters.take_cost()
        self.now_ns += duration_ns
        finished = self._advance(emitted)
        return Step(duration_ns, emitted, finished, admitted, *times, comm_s, *draft)

    def _admit_one(self, budget_left: int) -> Seq | None:
        if not self.waiting or self.num_running >= self.max_num_seqs or budget_left <= 0:
            return None
        s = self.waiting[0]
        need = self.blocks_for(s)
        if need > self.free_blocks:
            return None
        self.waiting.popleft()
        self.free_blocks -= need  # the whole prompt's, cached part included (see prefix_cache.py)
        s.blocks = need
        if self.prefix_cache is not None:
            s.prefilled = self.prefix_cache.admit(s.block_hashes, s.prompt_len)
            if s.admitted_vns < 0:  # its usage reports the first admission's hit
                s.cached_tokens = s.prefilled
        if s.admitted_vns < 0:
            s.admitted_vns = self.now_ns
        s.admit_no = self.admissions
        self.admissions += 1
        self.adapters.use(s.adapter)
        self.prefilling.append(s)
        return s

    def _admit_whole_prompts(self) -> bool:
        left, any_admitted = self.budget, False
        while self.waiting and (not any_admitted or self.uncached_len(self.waiting[0]) <= left):
            s = self._admit_one(max(left, 1))
            if s is None:
                break
            left -= s.prefill_len - s.prefilled
            any_admitted = True
        return any_admitted

    def _admit_chunks(self, left: int) -> list[Seq]:
        left -= sum(s.prefill_len - s.prefilled for s in self.prefilling)
        admitted = []
        while (s := self._admit_one(left)) is not None:
            admitted.append(s)
            left -= s.prefill_len - s.prefilled
        return admitted

    def _start_decoding(self, seqs: Iterable[Seq], emitted: list[Seq]) -> None:
        cache = self.prefix_cache
        for s in seqs:
            if cache is not None:
                cache.insert(s.block_hashes)
            if s.prefill_len == s.prompt_len:  # a recomputed prompt is not counted again
                self.prompt_tokens_total += s.prompt_len  # cached tokens included, as vLLM counts
            self.decode_context += s.prefill_len + 1  # + the token this step makes
            s.emitting = 1
            self.decoding.append(s)
            emitted.append(s)

    def _speculate(self, decoding: list[Seq]) -> tuple[float, float]:
        """With a draft model: each decoding sequence's tokens this step (``emitting``), and the
        draft passes' (memory, compute) seconds ((0, 0) without one, or with nothing decoding)."""
        spec = self.drafter
        if spec is None or not decoding:
            return 0.0, 0.0
        for s, a in zip(decoding, spec.verify(len(decoding))):
            s.emitting = min(1 + a, s.output_len - s.generated)
        return spec.draft_times(self.physics.step_times(len(decoding), self.decode_context))

    def _grow_blocks(self) -> bool:
        """on_demand, before a decode step: every decoding sequence gets the block its next token
        needs, in admission order, the newest running sequence preempted while none is free (it
        may be the one asking). True when any was preempted."""
        preempted = False
        for s in sorted(self.decoding, key=lambda q: q.admit_no):
            if not s.blocks:
                continue  # preempted for an older one in this loop
            need = -(-(s.prompt_len + s.generated + self.lookahead) // self.block_size) - s.blocks
            while need > self.free_blocks:
                victim = max(self.prefilling + self.decoding, key=lambda q: q.admit_no)
                self._preempt(victim)
                preempted = True
                if victim is s:
                    break
            else:
                self.free_blocks -= need
                s.blocks += need
        return preempted

    def _preempt(self, s: Seq) -> None:
        """Recompute preemption: free its blocks, queue it first, prefill all it holds again."""
        if s in self.prefilling:
            self.prefilling.remove(s)
        else:
            self.decoding.remove(s)
            self.decode_context -= s.prompt_len + s.generated
        self.free_blocks += s.blocks
        s.blocks = 0
        s.prefilled = 0
        s.prefill_len = s.prompt_len + s.generated
        self.waiting.appendleft(s)
        self.preemptions += 1

    def _advance(self, emitted: list[Seq]) -> list[Seq]:
        """Count each emitter's tokens (``emitting``); retire the ones that are done."""
        finished = []
        for s in emitted:
            s.generated += s.emitting
            self.generation_tokens_total += s.emitting
            if s.generated >= s.output_len:
                finished.append(s)
        if finished:
            gone = set(map(id, finished))
            self.decoding = [s for s in self.decoding if id(s) not in gone]
            for s in finished:
                self.decode_context -= s.prompt_len + s.generated
                self.free_blocks += s.blocks
                s.blocks = 0
        return finished
