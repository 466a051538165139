"""The OpenAI-compatible HTTP server (aiohttp) around the engine, paced to the wall clock; it
also serves the Responses and Anthropic Messages APIs (``hosted_sse.py``), Triton's generate
extension and SGLang's ``/generate`` (``native_routes.py``), and the pooling endpoints
(embeddings, rerank: ``pooling.py``) off the same engine; the routes beside the protocols
(health, listing, /metrics, the simulated GPU, the ground truth, cache resets) are
``status_routes.py``'s.

One task, ``_pace``, owns the engine: it plans a step, sleeps until the step's absolute wall
deadline (previous deadline + virtual duration x time_scale, so sleeps never drift), then writes
one SSE event to every sequence that got a token. Request handlers only parse, enqueue and wait.
If the loop falls more than ``_REANCHOR_NS`` behind (the CPU, not the simulated GPU, is the
bottleneck), the schedule restarts from now and the lag is counted in
``loadgen_sim_pacing_lag_seconds_total`` rather than being paid back as a burst.

Ground truth: ``chunk_ns`` holds ``time.perf_counter_ns()`` taken the instant before
``response.write(chunk)`` hands the bytes to the transport, so no client can see a chunk
before its stamp.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import orjson
from aiohttp import web

from .config import SimConfig
from .engine import Engine, Seq
from .gpu import SimGpus
from .metrics import Metrics
from .native_routes import native_routes
from .pooling import ENDPOINTS as POOLING
from .pooling import answer as pooling_answer
from .pooling import parse_pooling
from .requests import BadRequest, RequestState, parse_hosted, parse_request
from .sse import ChunkEncoder, error_body
from .status_routes import status_routes

now_ns = time.perf_counter_ns
_REANCHOR_NS = 5_000_000
VERSION = "0.1.0"
_ID_PREFIX = {"responses": "resp", "messages": "msg", "embeddings": "embd", "rerank": "rerank"}


class SimServer:
    """The simulator in this process's event loop: ``async with SimServer(cfg) as s: s.url``."""

    def __init__(
        self,
        config: SimConfig,
        host: str = "127.0.0.1",
        port: int = 0,
        ground_truth_path: Path | None = None,
        grpc_port: int | None = None,
    ):
        self.config = config
        self.host, self.port = host, port
        self.grpc_port = grpc_port  # None: no gRPC frontend (grpc_frontend.py); 0: any free port
        self._grpc: Any = None
        self.ground_truth_path = Path(ground_truth_path) if ground_truth_path else None
        self.engine = Engine(config)
        self.metrics = Metrics(config.served_model_name)
        self.gpus = SimGpus(config, now_ns())  # read at gpu.PATH as NVIDIA's exporter serves
        self._arrival_j: dict[str, float] = {}  # the GPUs' energy when each live request arrived
        self.created = int(time.time())
        self._ids = itertools.count(1)
        self._wake = asyncio.Event()
        self._log: IO[bytes] | None = None
        self._runner: web.AppRunner | None = None
        self._pacer: asyncio.Task | None = None
        self._live: set[RequestState] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def grpc_url(self) -> str | None:
        """Triton's KServe v2 gRPC frontend (``grpc_frontend.py``), when it serves one."""
        return None if self.grpc_port is None else f"grpc://{self.host}:{self.grpc_port}"

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> str:
        if self.ground_truth_path:
            self.ground_truth_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.ground_truth_path, "ab")
        app = web.Application(client_max_size=64 * 2**20)
        app.add_routes(
            [
                *status_routes(self, VERSION),  # health, listing, /metrics, the GPU, ground truth
                web.post("/v1/completions", self._completions),
                web.post("/v1/chat/completions", self._chat),
                web.post("/v1/responses", self._responses),  # OpenAI's Responses API
                web.post("/v1/messages", self._messages),  # Anthropic's Messages API
                # pooling, answered whole (pooling.py); vLLM serves rerank at both paths
                web.post("/v1/embeddings", self._pooling("embeddings")),
                web.post("/v1/rerank", self._pooling("rerank")),
                web.post("/rerank", self._pooling("rerank")),
                *native_routes(self, VERSION),  # Triton's generate extension, SGLang's /generate
            ]
        )
        runner = self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, backlog=1024)
        await site.start()
        self.port = runner.addresses[0][1]  # the real port when 0 was asked
        self._pacer = asyncio.create_task(self._pace())
        if self.grpc_port is not None:
            from .grpc_frontend import GrpcFrontend  # grpcio: the optional extra loadgen[grpc]

            self._grpc = GrpcFrontend(self)
            self.grpc_port = await self._grpc.start(self.host, self.grpc_port)
        return self.url

    async def stop(self) -> None:
        if self._pacer:
            self._pacer.cancel()
        for st in list(self._live):  # unblock handlers still waiting on the engine
            self._finish(st, "abort")
        if self._grpc is not None:
            await self._grpc.stop()
        if self._runner:
            await self._runner.cleanup()
        if self._log:
            self._log.close()
            self._log = None

    async def __aenter__(self) -> SimServer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    # --- the engine loop ---------------------------------------------------------------------
    async def _pace(self) -> None:
        eng, scale, metrics = self.engine, self.config.time_scale, self.metrics
        deadline = now_ns()
        while True:
            if not eng.has_work():
                self._wake.clear()
                await self._wake.wait()
                deadline = now_ns()  # idle: the next step starts now
            started = now_ns()
            step = eng.step()
            if not step.emitted and not step.duration_ns:  # nothing schedulable: wait for news
                self._wake.clear()
                await self._wake.wait()
                continue
            for s in step.admitted:
                s.owner.admitted_ns = started
            self.gpus.meter.begin(deadline, step)  # it runs from the last step's deadline
            deadline += int(step.duration_ns * scale)
            t = now_ns()
            if deadline > t:
                await asyncio.sleep((deadline - t) / 1e9)
            else:
                if t - deadline > _REANCHOR_NS:
                    if scale:  # behind a real schedule; unpaced (0) has none to keep
                        metrics.lag_s += (t - deadline) / 1e9
                    deadline = t
                await asyncio.sleep(0)  # let handlers accept new requests
            end = now_ns()
            for s in step.emitted:
                st = s.owner
                k = s.generated
                if k == 1:
                    st.prefill_end_ns = end
                if not st.stream:
                    if k >= s.output_len:
                        self._finish(st, st.finish_reason)
                    continue
                out, enc = st.response, st.encoder
                assert out is not None and enc is not None  # a streamed request has both
                if s.emitting == 1:  # the hot path: one token, one event
                    word = st.word(k - 1)
                    if k >= s.output_len:
                        data = enc.token(word, k, st.finish_json)
                        data += enc.end(k, st.include_usage, st.finish_reason)
                    else:
                        data = enc.token(word, k)
                    events: Sequence[tuple[bytes, int]] = ((data, 1),)
                else:
                    events = [(_event(s, st, u, w), len(w)) for u, w in _events(st, k - s.emitting, k)]
                for data, n in events:
                    # Stamped the instant before the write, which hands the bytes to the socket:
                    # no client can see a token before its stamp (the fidelity block's lag >= 0).
                    st.chunk_ns.append(now_ns())
                    st.chunk_tokens.append(n)
                    try:
                        await out.write(data)
                    except (ConnectionError, RuntimeError):
                        st.chunk_ns.pop()  # never sent
                        st.chunk_tokens.pop()
                        eng.abort(s)
                        self._finish(st, "abort")
                        break
                else:
                    if k >= s.output_len:
                        self._finish(st, st.finish_reason)

    # --- requests ----------------------------------------------------------------------------
    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True, hosted="responses")

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True, hosted="messages")

    def _pooling(self, endpoint: str) -> Any:
        return functools.partial(self._generate, chat=False, hosted=endpoint)

    async def _generate(self, request: web.Request, chat: bool, hosted: str = "") -> web.StreamResponse:
        """An OpenAI or hosted-API request: parse it, then ``serve`` it. ``hosted``: "responses"
        or "messages", served by their own encoders (the native protocols: native_routes.py);
        "embeddings" or "rerank", a pooling request answered whole when its prefill ends."""
        arrival = now_ns()
        rid = self.new_id(_ID_PREFIX.get(hosted, "chatcmpl" if chat else "cmpl"))
        try:
            body = orjson.loads(await request.read())
            if hosted in POOLING:
                st = parse_pooling(body, hosted, self.config, rid, self.created)
            elif hosted:
                st = parse_hosted(body, hosted, self.config, rid, self.created)
            else:
                st = parse_request(body, chat, self.config, rid, self.created)
        except orjson.JSONDecodeError as e:
            return _error(f"request body is not valid JSON: {e}", 400, rid)
        except BadRequest as e:
            return _error(e.message, e.status, rid, e.kind, e.param)
        st.arrival_ns = arrival
        return await self.serve(request, st)

    def new_id(self, prefix: str) -> str:
        """The next response id: one sequence for every protocol (``chatcmpl-sim-7``)."""
        return f"{prefix}-sim-{next(self._ids)}"

    async def serve(self, request: web.Request, st: RequestState) -> web.StreamResponse:
        """A parsed request (``arrival_ns`` set) through the engine: streamed by its encoder, or
        answered whole; its ground truth logged. Every protocol's handler ends here."""
        rid = st.rid
        headers = {"x-request-id": rid}
        if st.stream:
            resp = web.StreamResponse(
                headers={**headers, "Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
            )
            await resp.prepare(request)
            assert st.encoder is not None  # every streaming request has one
            first = st.encoder.start()  # chat's role chunk, the hosted APIs' opening events
            if first:
                await resp.write(first)
            st.response = resp
        seq = await self.run(st)
        if st.stream:
            try:
                await resp.write_eof()
            except (ConnectionError, RuntimeError):
                pass
            return resp
        if st.finish_reason == "abort":  # the server is shutting down
            return _error("the simulator is shutting down", 503, rid, "ServiceUnavailableError")
        if st.items is None:
            body = orjson.dumps(st.full_body(st.answer_text(seq.generated), seq.generated))
        else:  # a pooling answer, stamped once built, just before its write: none sees it earlier
            body = orjson.dumps(pooling_answer(st, self.config))
            st.finish_ns = now_ns()
        resp = web.Response(body=body, content_type="application/json", headers=headers)
        await resp.prepare(request)
        await resp.write_eof()
        st.chunk_ns.append(now_ns())
        self._record(st)
        return resp

    async def run(self, st: RequestState) -> Seq:
        """Hand a parsed request to the engine and wait until it is done: its stream (through
        ``st.encoder`` to ``st.response``, which every frontend gives one ``write``) written and
        its ground truth logged. A cancelled caller frees its engine seat."""
        seq = Seq(
            st.prompt_tokens,
            st.output_tokens,
            st.max_tokens,
            owner=st,
            block_hashes=st.block_hashes,
            adapter=st.adapter,
        )
        st.seq = seq
        self._arrival_j[st.rid] = self.gpus.energy_j(now_ns())
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        st.done = done
        self._live.add(st)
        self.engine.submit(seq)
        self._wake.set()
        try:
            await done
        finally:
            if st in self._live:  # the handler was cancelled: free the engine's seat
                self.engine.abort(seq)
                self._live.discard(st)
        return seq

    def _finish(self, st: RequestState, reason: str) -> None:
        """The sequence is done (or aborted): log it if streaming and wake its handler."""
        if st not in self._live:
            return
        self._live.discard(st)
        st.finish_reason = reason
        if st.stream or reason == "abort":
            self._record(st)
        done = st.done
        assert done is not None  # set before st joined _live
        if not done.done():
            done.set_result(None)

    def flush_log(self) -> None:
        """Flush the ground-truth log (the route that serves it reads the file)."""
        if self._log is not None:
            self._log.flush()

    def _record(self, st: RequestState) -> None:
        st.finish_ns = st.finish_ns or now_ns()
        assert st.seq is not None  # set before the request reaches the engine
        rec = st.ground_truth(st.seq.generated)
        # The GPUs' energy counter (J, all of them) from its arrival to its end: the truth a
        # client's energy per token over a window of these requests is checked against.
        rec["gpu_energy_j"] = [self._arrival_j.pop(st.rid, None), self.gpus.energy_j(st.finish_ns)]
        self.metrics.observe_request(rec, st.chunk_ns if st.stream else [])
        if self._log:
            self._log.write(orjson.dumps(rec) + b"\n")
            self._log.flush()


def _error(
    message: str, status: int, rid: str, kind: str = "BadRequestError", param: str | None = None
) -> web.Response:
    return web.Response(
        status=status,
        body=error_body(message, status, kind, param),
        content_type="application/json",
        headers={"x-request-id": rid},
    )


def _event(s: Seq, st: RequestState, upto: int, words: Sequence[bytes]) -> bytes:
    """The bytes of one streamed event carrying ``words``, the tokens up to ``upto``; the last
    token's event ends the stream."""
    enc = st.encoder
    assert enc is not None  # a streamed request has one
    word = words[0] if len(words) == 1 else orjson.dumps("".join(orjson.loads(w) for w in words))
    if upto >= s.output_len:
        return enc.token(word, upto, st.finish_json) + enc.end(upto, st.include_usage, st.finish_reason)
    return enc.token(word, upto)


def _events(st: RequestState, start: int, end: int) -> list[tuple[int, list[bytes]]]:
    """Tokens ``start``..``end`` - 1 as events: (the count up to its last token, its words). One
    event a step for the OpenAI chunk encoders (a draft model's accepted tokens together, split
    only where reasoning turns to content, as vLLM streams them); one a token for the others."""
    words = [st.word(i) for i in range(start, end)]
    if len(words) == 1:
        return [(end, words)]
    if not isinstance(st.encoder, ChunkEncoder):
        return [(start + i + 1, [w]) for i, w in enumerate(words)]
    cut = min(max(st.encoder.n_reason - start, 0), len(words))  # tokens of it still reasoning
    out = [(start + cut, words[:cut])] if cut else []
    return out + ([(end, words[cut:])] if cut < len(words) else [])
