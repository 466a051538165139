"""The stream consumer every protocol shares, and what it needs: status and error bodies, SSE
framing and the end-of-stream checks, one token-bearing event recorded the same way for all
(``SSEResponse.chunk``), and the progress counters the hot path adds to (``Live``).

A protocol reads only its own events (``on_events``) and its end (``on_end``); everything a
server can get wrong in between (a non-200 answer, bytes that are not SSE, a missing
terminator, an event of the wrong shape) is classified here, once.
"""

from __future__ import annotations

import datetime
import email.utils
from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from loadgen import records as R
from loadgen.backends.sse import SSEDecoder
from loadgen.clock import now_ns

ERROR_BODY_LIMIT = 4096
_DONE = b"[DONE]"


@dataclass(slots=True)
class Live:
    """Counters the progress display reads; the hot path only ever adds to them. A request
    counts once, when it finishes (``finish``), in process and across worker processes alike."""

    in_flight: int = 0
    done: int = 0
    errors: int = 0  # failed requests; a cancelled one (the run stopped) is not an error
    tokens: int = 0  # ``RequestRecord.counted_output_tokens`` of the finished requests

    def finish(self, failed: bool, tokens: int) -> None:
        self.done += 1
        self.errors += failed
        self.tokens += tokens


def fail(rec: R.RequestRecord, cls: str, message: str, t_ns: int | None = None) -> None:
    rec.ok = False
    rec.error_class = cls
    rec.error_message = message
    if rec.t_end_ns is None:
        rec.t_end_ns = t_ns or now_ns()


def error_text(body: bytes) -> str:
    """The message of an error body: OpenAI's {"error": {"message"}}, Triton's {"error": "..."},
    SGLang's {"message": ...}, FastAPI's {"detail": "..."} or {"detail": [{"loc", "msg"}]}
    (Hugging Face's transformers serve, TGI's router), or the raw text."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:300].decode("utf-8", "replace").strip()
    if isinstance(obj, dict) and "error" not in obj and "detail" in obj:
        return _detail_text(obj["detail"])[:300]
    err = obj.get("error", obj) if isinstance(obj, dict) else obj
    if isinstance(err, dict):
        return str(err.get("message") or err)[:300]
    return str(err)[:300]


def _detail_text(detail: object) -> str:
    """FastAPI's ``detail``: a string, or validation errors whose ``loc`` names the field."""
    if not isinstance(detail, list):
        return str(detail)
    parts = []
    for item in detail:
        if isinstance(item, dict):
            loc = ".".join(str(x) for x in item.get("loc") or () if x != "body")
            parts.append(f"{loc}: {item.get('msg')}" if loc else str(item.get("msg")))
        else:
            parts.append(str(item))
    return "; ".join(parts)


class SSEResponse:
    """Base consumer for the native protocols: status and error bodies, SSE framing and the
    end-of-stream checks; a subclass reads its protocol's events in ``on_events``.

    ``on_events(t, events)`` gets the data payloads one read completed, stamped with that
    read's arrival time, and returns False when the stream is beyond use (the record is then
    failed). ``on_end()`` runs once the body is complete and nothing failed.

    Protocols that end their stream with ``data: [DONE]`` (OpenAI, SGLang) set
    ``requires_done``: the terminator is taken out before ``on_events`` sees the payloads. A
    stream judged by what it delivered: one that closed without the terminator is complete when
    ``finished()`` says its answer ended (a ``finish_reason``, and the usage that was asked
    for), as the OpenAI SDK and vLLM's client take it; it is then ok with ``stream_end``
    "no_terminator", and counted. Without a finish it is ``no_done``, and so is every stream
    without its terminator when ``strict`` (``target.require_done``: a conformance test)."""

    __slots__ = ("rec", "dec", "error_body", "rid", "events", "texts", "done", "strict")
    requires_done = False

    def __init__(self, rec: R.RequestRecord, keep_texts: bool = False) -> None:
        self.rec = rec
        # Each chunk's text, kept only when a local tokenizer will count its tokens afterwards.
        self.texts: list[str] | None = [] if keep_texts else None
        self.dec = SSEDecoder()
        self.error_body: bytes | None = None
        self.rid: str | None = None
        self.events = 0  # data payloads seen, token-bearing or not
        self.done = False  # the [DONE] terminator arrived
        self.strict = False  # target.require_done: a stream without its terminator fails

    def head(self, status: int, headers: Mapping[str, str], t_ns: int) -> None:
        rec = self.rec
        rec.http_status = status
        rec.t_first_byte_ns = t_ns
        self.rid = headers.get("x-request-id")
        if status != 200:
            self.error_body = b""
            retry_after = headers.get("retry-after")
            if retry_after is not None:
                rec.retry_after_s = retry_after_seconds(retry_after)

    def resent(self, t_ns: int, reason: str) -> None:
        """The transport sends the request again (its reused connection ended before any byte
        of the answer): nothing was read yet, so only the attempt and its send time change."""
        rec = self.rec
        rec.attempts += 1
        rec.retry_reason = reason
        rec.t_send_ns = t_ns

    def feed(self, t: int, raw: bytes) -> bool:
        if self.error_body is not None:
            self.error_body += raw
            return len(self.error_body) <= ERROR_BODY_LIMIT
        events = self.dec.feed(raw)
        if not events:
            return True
        self.events += len(events)
        if self.requires_done and _DONE in events:
            events = self._take_done(events)
        return self._read(t, events)

    def _read(self, t: int, events: list[bytes]) -> bool:
        # A field of the wrong type ("choices": "abc", "delta": "str", a null count) is a
        # malformed stream, said once here for every protocol: never a traceback, never `read`.
        try:
            return self.on_events(t, events)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
            return self.shape_error(t, events, exc)

    def shape_error(self, t: int, events: list[bytes], exc: Exception) -> bool:
        sample = events[0][:120] if events else b""
        fail(
            self.rec,
            R.MALFORMED,
            f"an event of an unexpected shape ({type(exc).__name__}: {str(exc)[:80]}): {sample!r}",
            t,
        )
        return False

    def _take_done(self, events: list[bytes]) -> list[bytes]:
        self.done = True
        return [e for e in events if e != _DONE]

    def finish(self, t_end: int) -> None:
        rec = self.rec
        if rec.error_class is not None:
            return
        rec.t_end_ns = t_end
        if self.error_body is not None:
            fail(rec, R.http_error_class(rec.http_status or 0), error_text(self.error_body))
            return
        tail = self.dec.flush()
        if tail:
            self.events += len(tail)
            if self.requires_done and _DONE in tail:
                tail = self._take_done(tail)
            if not self._read(t_end, tail):
                return
        if rec.response_id is None:
            rec.response_id = self.rid
        if self.events == 0:
            sample = self.dec.junk_sample or self.dec.pending[:120]
            what = f"response is not an SSE stream: {sample!r}" if sample else "the response carried no event"
            fail(rec, R.MALFORMED, what)
            return
        if self.requires_done and not self.done:
            missing = self.unfinished() or self.finished()
            if self.strict or missing:
                why = "target.require_done is set" if self.strict and not missing else missing
                fail(rec, R.NO_DONE, f"the stream closed without data: [DONE] ({why})")
                return
            rec.stream_end = R.NO_TERMINATOR
        try:
            self.on_end()
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
            rec.ok = False
            self.shape_error(t_end, [], exc)
            return
        if rec.ok and rec.stream_end is None:
            rec.stream_end = self.end_kind

    def chunk(self, t: int, n: int, text: str, reasoning: bool = False, tool: bool = False) -> None:
        """Record one token-bearing event: arrival ``t``, ``n`` tokens; ``tool``: a piece of a
        tool call (timed and counted as output, no part of the answer's text)."""
        rec = self.rec
        rec.chunk_times_ns.append(t)
        rec.chunk_tokens.append(n)
        if rec.t_first_token_ns is None:
            rec.t_first_token_ns = t
        if tool:
            if rec.t_first_tool_ns is None:
                rec.t_first_tool_ns = t
        elif reasoning:
            rec.reasoning_times_ns.append(t)
            rec.reasoning_tokens.append(n)
        else:
            if rec.t_first_content_ns is None:
                rec.t_first_content_ns = t
            answer = rec.answer  # kept only when the run reads answers (quality, sessions)
            if answer is not None:
                answer.append(text)
        if self.texts is not None:
            self.texts.append(text)

    def on_events(self, t: int, events: list[bytes]) -> bool:
        raise NotImplementedError

    def on_end(self) -> None:
        raise NotImplementedError

    # What an ok stream's end was, when nothing said otherwise: the protocol's terminator (a
    # protocol whose stream simply ends with the response says "end_of_body").
    end_kind = R.TERMINATOR

    def unfinished(self) -> str:
        """What a stream that closed early was in the middle of (a tool call), for its error."""
        return ""

    def finished(self) -> str:
        """Why a stream that closed cleanly without its terminator is not a whole answer ("" when
        it is: its finish and what was asked for came). The default: nothing proves it is."""
        return "nothing in it said the answer had finished"

    def malformed(self, t: int, data: bytes) -> bool:
        fail(self.rec, R.MALFORMED, f"unparseable event: {data[:120]!r}", t)
        return False

    def error_event(self, t: int, data: bytes) -> bool:
        fail(self.rec, R.SERVER_ERROR_EVENT, error_text(data), t)
        return False


def retry_after_seconds(value: str) -> float | None:
    """A Retry-After header in seconds: delta-seconds, or an HTTP date counted from now."""
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds())
