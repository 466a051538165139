"""A chat stream's tool calls, read from its ``delta.tool_calls`` pieces.

OpenAI streams a tool call in pieces keyed by ``index``: the first names the call (``id``,
``type``, ``function.name``), the rest append to ``function.arguments``, a string of JSON cut
anywhere. Each piece that carries a name or arguments is a token-bearing chunk, timed like
content (so ITL covers a tool call's tokens); the first one is the record's time to the first
tool-call token. A piece without an index, or whose name or arguments are not strings, is a
malformed stream: the calls could no longer be put back together.
"""

from __future__ import annotations

from typing import Any


class ToolCalls:
    """The calls one answer made so far: ``index -> [id, name, argument pieces]``."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls: dict[int, list[Any]] = {}

    def feed(self, deltas: Any) -> str:
        """Take one event's ``tool_calls`` list; the name and argument text it carried ("" when
        it carried none: an id or type alone is no token)."""
        if not isinstance(deltas, list):
            raise TypeError(f"delta.tool_calls is {type(deltas).__name__}, not a list")
        carried = ""
        for piece in deltas:
            index = piece.get("index")
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                raise ValueError(f"a tool_calls piece without a valid index (index: {index!r})")
            fn = piece.get("function") or {}
            name, args = fn.get("name"), fn.get("arguments")
            for what, v in (("name", name), ("arguments", args)):
                if v is not None and not isinstance(v, str):
                    raise TypeError(
                        f"tool call {index}'s function.{what} is {type(v).__name__}, not a string"
                    )
            call = self.calls.get(index)
            if call is None:
                call = self.calls[index] = ["", "", []]
            cid = piece.get("id")
            if isinstance(cid, str) and cid:
                call[0] = cid
            if name:
                call[1] += name
            if args:
                call[2].append(args)
            carried += (name or "") + (args or "")
        return carried

    def __len__(self) -> int:
        return len(self.calls)

    def names(self) -> list[str]:
        return [self.calls[i][1] for i in sorted(self.calls)]

    def detail(self) -> list[dict[str, str]]:
        """Each call's id, name and whole arguments text, in index order (a call without an id
        gets ``call_<index>``, so a next round can still answer it)."""
        return [
            {"id": c[0] or f"call_{i}", "name": c[1], "arguments": "".join(c[2])}
            for i, c in sorted(self.calls.items())
        ]

    def open_call(self) -> str:
        """Where a stream that ended early left its last call: "" when it made none."""
        if not self.calls:
            return ""
        i = max(self.calls)
        c = self.calls[i]
        return f"inside tool call {i} ({c[1] or 'unnamed'}, {sum(map(len, c[2]))} characters of arguments)"
