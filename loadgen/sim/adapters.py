"""LoRA adapter slots: which adapters are resident, and what loading another one costs.

vLLM holds at most ``max_loras`` adapters on the GPU; a batch that needs one that is not
resident loads its weights before the forward pass, evicting the least recently used, so the
whole step (and the TTFT of every request whose prefill it carries) pays the load. A mix that
cycles more adapters than there are slots pays it on every admission: the cost a benchmark of
a LoRA fleet exists to show.
"""

from __future__ import annotations

from collections import OrderedDict


class AdapterSlots:
    """``max_loras`` resident adapters in LRU order; each load is charged to the step admitting it."""

    def __init__(self, max_loras: int, load_ns: int) -> None:
        self.max_loras = max_loras
        self.load_ns = load_ns
        self.resident: OrderedDict[str, None] = OrderedDict()
        self._pending_ns = 0

    def use(self, adapter: str | None) -> None:
        """A sequence for ``adapter`` was admitted: load it unless resident (None: the base)."""
        if adapter is None:
            return
        if adapter in self.resident:
            self.resident.move_to_end(adapter)
            return
        if len(self.resident) >= self.max_loras:
            self.resident.popitem(last=False)
        self.resident[adapter] = None
        self._pending_ns += self.load_ns

    def take_cost(self) -> int:
        """The load time this step owes (ns), once: the step that admitted the sequences."""
        cost, self._pending_ns = self._pending_ns, 0
        return cost
