"""Agentic trace files read into sessions: AIPerf's multi_turn JSONL and OTLP JSON trace exports.

Both say what an agent sent and how long it paused, never what the server under test will
answer: the replay (``workload.agentic_plans``) sends the server's real answers back. AIPerf's
file is a list of linear sessions. An OpenTelemetry export is a DAG per trace: an LLM call (a
span carrying ``gen_ai.*`` input attributes) waits for every call that ended before it started
under the same parent span (an agent's loop runs its calls in turn; calls that overlapped ran
in parallel) and for every earlier call whose recorded output its input repeats; the replay
substitutes each such output by the answer the server gave. The formats each reader accepts
are docs/workloads.md's "Agentic rounds"; every error names the file, line or span, field and fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.workload.trace_files import TraceError

# Span operations that are LLM calls (OpenTelemetry's GenAI semantic conventions); a span of
# another operation (execute_tool, invoke_agent, embeddings) is what happened between calls.
LLM_OPERATIONS = ("chat", "text_completion", "generate_content")
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True, slots=True)
class AiperfTurn:
    """One turn of an AIPerf multi_turn session: its text, the pause before it, its max tokens."""

    text: str
    delay_s: float | None  # AIPerf's ``delay`` (ms) in seconds; None: not given
    output_tokens: int | None


@dataclass(frozen=True, slots=True)
class AiperfSession:
    session_id: str
    system: str | None  # a leading text-only system turn, sent before every turn
    turns: tuple[AiperfTurn, ...]


@dataclass(frozen=True, slots=True)
class Call:
    """One LLM call of a trace DAG: its recorded input messages and output, the calls it waits
    for (indices of earlier calls), and its recorded pause after the last of them ended (a root:
    after the trace's first call started)."""

    span_id: str
    parents: tuple[int, ...]
    messages: tuple[dict[str, str], ...]
    output: str
    output_tokens: int | None
    delay_s: float


def _count(v: Any, where: str, field: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, str)) or not str(v).isdigit() or int(v) < 1:
        raise TraceError(f"{where}: {field} is {v!r}, expected a positive integer")
    return int(v)


def read_aiperf(path: str | Path) -> list[AiperfSession]:
    """AIPerf's multi_turn JSONL: ``{"session_id", "turns": [{"text", "delay"?, "output_length"?,
    "role"?}]}`` a line; ``delay`` is milliseconds before the turn is sent."""
    p = Path(path)
    out = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{p} line {n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise TraceError(f"{where}: not valid JSON ({e}); expected one session object a line") from None
        turns = row.get("turns") if isinstance(row, dict) else None
        if not isinstance(turns, list) or not turns:
            raise TraceError(f'{where}: expected {{"session_id": ..., "turns": [{{"text": ...}}, ...]}}')
        system = None
        if isinstance(turns[0], dict) and turns[0].get("role") == "system" and len(turns) > 1:
            system, turns = str(turns[0].get("text", "")), turns[1:]  # as AIPerf hoists it
        parsed = []
        for k, t in enumerate(turns):
            at = f"{where} turn {k}"
            if not isinstance(t, dict) or not isinstance(t.get("text"), str) or not t["text"]:
                raise TraceError(f"{at}: text must be a non-empty string")
            delay = t.get("delay")
            if delay is not None and (
                isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0
            ):
                raise TraceError(f"{at}: delay is {delay!r}, expected milliseconds >= 0")
            osl = _count(t.get("output_length"), at, "output_length")
            parsed.append(AiperfTurn(t["text"], None if delay is None else delay / 1000, osl))
        out.append(AiperfSession(str(row.get("session_id", f"line-{n}")), system, tuple(parsed)))
    if not out:
        raise TraceError(f"{p}: no sessions; expected one multi_turn session object a line")
    return out


def _value(v: Any) -> Any:
    """An OTLP AnyValue as Python: ``{"stringValue": ..}``, ``intValue`` (a string in JSON), ..."""
    if not isinstance(v, dict):
        return None
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in v:
            return v[key]
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return [_value(x) for x in (v["arrayValue"].get("values") or [])]
    return None


def _text(message: dict[str, Any]) -> str:
    """A message's text: ``content`` (a string), or its ``parts``' text (the newer convention)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = message.get("parts") if isinstance(message.get("parts"), list) else content
    texts = []
    for part in parts if isinstance(parts, list) else ():
        if isinstance(part, dict) and part.get("type") == "text":
            texts.append(str(part.get("content", part.get("text", ""))))
        elif isinstance(part, dict) and part.get("type") == "tool_call_response":
            texts.append(str(part.get("response", "")))
    return "".join(texts)


def _messages(raw: Any, where: str, field: str) -> list[dict[str, str]]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return [{"role": "user", "content": raw}]  # gen_ai.prompt as plain text
    if not isinstance(raw, list) or not all(isinstance(m, dict) for m in raw):
        raise TraceError(f"{where}: {field} must be a JSON list of messages ({{role, content or parts}})")
    # A role a chat server may refuse without its ids (tool) is sent as the user's message.
    return [{"role": m.get("role") if m.get("role") in ROLES else "user", "content": _text(m)} for m in raw]


def _spans(doc: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans"), list):
        raise TraceError(f'{where}: expected an OTLP JSON export {{"resourceSpans": [...]}}')
    return [
        span
        for rs in doc["resourceSpans"]
        for ss in (rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or [])
        for span in (ss.get("spans") or [])
    ]


def _documents(p: Path) -> list[tuple[Any, str]]:
    """One export document, or one a line (the OpenTelemetry Collector's file exporter)."""
    text = p.read_text(encoding="utf-8")
    try:
        return [(json.loads(text), str(p))]
    except json.JSONDecodeError:
        pass
    docs = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                docs.append((json.loads(line), f"{p} line {n}"))
            except json.JSONDecodeError as e:
                raise TraceError(
                    f"{p} line {n}: not valid JSON ({e}); expected an OTLP JSON export"
                ) from None
    return docs


def read_otlp(path: str | Path) -> list[list[Call]]:
    """Every trace of an OTLP JSON export that has LLM calls, each as its calls in start order
    (every parent before its children)."""
    p = Path(path)
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for doc, where in _documents(p):
        for span in _spans(doc, where):
            by_trace.setdefault(str(span.get("traceId", "")), []).append(span)
    graphs = [g for tid, spans in by_trace.items() if (g := _graph(p, tid, spans))]
    if not graphs:
        raise TraceError(
            f"{p}: no LLM calls; expected spans with gen_ai.input.messages (or gen_ai.prompt) "
            f"and gen_ai.operation.name one of {', '.join(LLM_OPERATIONS)}"
        )
    return graphs


def _graph(p: Path, trace_id: str, spans: list[dict[str, Any]]) -> list[Call]:
    """One trace's LLM calls as a DAG (module docstring: what a dependency is)."""
    llm = []
    for s in spans:
        attrs = {
            a.get("key"): _value(a.get("value")) for a in s.get("attributes") or [] if isinstance(a, dict)
        }
        op = attrs.get("gen_ai.operation.name")
        raw = attrs.get("gen_ai.input.messages", attrs.get("gen_ai.prompt"))
        if raw is None or (op is not None and op not in LLM_OPERATIONS):
            continue
        where = f"{p} trace {trace_id} span {s.get('spanId')}"
        try:
            start, end = int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])
        except (KeyError, TypeError, ValueError):
            raise TraceError(f"{where}: startTimeUnixNano and endTimeUnixNano must be integers") from None
        field = "gen_ai.input.messages" if "gen_ai.input.messages" in attrs else "gen_ai.prompt"
        messages = _messages(raw, where, field)
        if isinstance(attrs.get("gen_ai.system_instructions"), str):
            messages.insert(0, {"role": "system", "content": attrs["gen_ai.system_instructions"]})
        out = attrs.get("gen_ai.output.messages", attrs.get("gen_ai.completion"))
        output = _text(_messages(out, where, "gen_ai.output.messages")[-1]) if out else ""
        osl = _count(attrs.get("gen_ai.usage.output_tokens"), where, "gen_ai.usage.output_tokens")
        up = str(s.get("parentSpanId") or "")
        llm.append((start, end, str(s.get("spanId")), up, messages, output, osl))
    llm.sort(key=lambda c: c[0])
    first = llm[0][0] if llm else 0
    calls = []
    for k, (start, _end, sid, up, messages, output, osl) in enumerate(llm):
        parents = [
            j
            for j, (_, end_j, _, up_j, _, out_j, _) in enumerate(llm[:k])
            if end_j <= start
            and ((up and up_j == up) or (out_j and any(out_j in m["content"] for m in messages)))
        ]
        ready = max((llm[j][1] for j in parents), default=first)
        calls.append(Call(sid, tuple(parents), tuple(messages), output, osl, max(0, start - ready) / 1e9))
    return calls
