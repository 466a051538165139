"""Result files of other benchmarking tools, read into loadgen's summary layout so ``compare``
can set last quarter's numbers beside today's.

Why: a team's history lives in the files of whatever tool it used before (vLLM's
``bench serve``, GuideLLM, AIPerf, inference-perf). Each tool calls different quantities by the
same names (docs/peers.md): GuideLLM's and AIPerf's "ITL" is loadgen's TPOT formula, vLLM's
chat TTFT may stop at a role-only chunk. So each reader maps a tool's metric onto the loadgen
metric of the same definition (not the same name), leaves absent what the tool does not
report, and states in ``definitions`` where the tool's definition still differs; ``compare``
prints those sentences beside the numbers.

One module per tool (``vllm``, ``guidellm``, ``aiperf``, ``inference_perf``), each with its
``TOOL`` name, the ``FILE_NAMES`` it writes (to recognise a folder), ``DEFINITIONS``,
``recognises(data)`` and ``load(data, path, name)``; ``common`` builds the summary's blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from loadgen.analysis.peer_results import aiperf, guidellm, inference_perf, vllm
from loadgen.analysis.peer_results.common import UNRECORDED, read_json, run_name
from loadgen.errors import ResultError
from loadgen.summary import Summary

__all__ = ["TOOLS", "UNRECORDED", "PeerResult", "detect", "load_peer_result", "read_peer_result"]

# Tried in this order: GuideLLM's and inference-perf's layouts are unmistakable; AIPerf's tagged
# metrics before vLLM's flat keys (AIPerf also has a "request_throughput").
TOOLS: dict[str, ModuleType] = {
    guidellm.TOOL: guidellm,
    inference_perf.TOOL: inference_perf,
    aiperf.TOOL: aiperf,
    vllm.TOOL: vllm,
}
# Fixed file names: what a folder of each tool's results holds.
GENERIC_STEMS = ("benchmarks", "profile_export_aiperf", "summary_lifecycle_metrics")
LOADGEN_SUMMARY = "summary.json"


@dataclass(frozen=True)
class PeerResult:
    """One result file of another tool, as ``compare`` reads it.

    ``summary`` is shaped like loadgen's summary.json with the metrics the tool reports (the
    others absent or null), a file of several load points having ``stages`` and ``curve`` as a
    loadgen multi-stage run has; ``definitions`` are sentences saying where the tool's
    definitions differ from loadgen's (docs/metrics.md). ``version`` is the tool's version as its
    file records it, None where the file records none (vLLM, inference-perf); the id the tool
    gave the run is the summary's ``run_id`` (``UNRECORDED`` without one)."""

    tool: str
    path: Path
    name: str
    summary: Summary
    definitions: tuple[str, ...]
    version: str | None = None

    @property
    def source(self) -> str:
        """How compare names where the numbers came from: ``"GuideLLM 0.8.1 (results file)"``,
        ``"inference-perf, version not recorded (results file)"``."""
        return (
            f"{self.tool}{' ' + self.version if self.version else ', version ' + UNRECORDED} (results file)"
        )

    @property
    def points(self) -> int:
        """How many load points the file holds (its stages; 1 for a single run)."""
        return len(self.summary.get("stages") or ()) or 1


def _file(path: Path) -> Path | None:
    """The result file ``path`` names: itself, or for a folder the tool's file in it; None for
    a loadgen run (its folder or summary.json) or a folder of nothing known."""
    if path.is_dir():
        if (path / LOADGEN_SUMMARY).exists():
            return None
        return next((path / n for t in TOOLS.values() for n in t.FILE_NAMES if (path / n).is_file()), None)
    if path.name == LOADGEN_SUMMARY or path.suffix.lower() not in (".json", ".jsonl"):
        return None
    return path if path.is_file() else None


def _parse(path: Path) -> Any:
    """The file's JSON; a file of JSON lines (vLLM's ``--append-result``) as a list of them. A
    .json/.jsonl file that does not parse is a ``ResultError`` saying where it stops parsing:
    "neither a loadgen run nor a result file" would hide that the file is broken."""
    return read_json(path, lines=True)


def _identify(path: str | Path) -> tuple[str, Path, Any] | None:
    file = _file(Path(path))
    if file is None:
        return None
    data = _parse(file)
    tool = next((name for name, mod in TOOLS.items() if mod.recognises(data)), None)
    return None if tool is None else (tool, file, data)


def detect(path: str | Path) -> str | None:
    """The tool whose result ``path`` (a file, or a folder holding the tool's file) is, or None:
    a loadgen run, or a file no reader recognises."""
    found = _identify(path)
    return None if found is None else found[0]


def read_peer_result(path: str | Path) -> PeerResult | None:
    """``load_peer_result`` of a recognised file, None for anything else (one read of the file)."""
    found = _identify(path)
    if found is None:
        return None
    tool, file, data = found
    mod = TOOLS[tool]
    name = vllm.run_label(data) if tool == vllm.TOOL else None
    name = name or run_name(file, GENERIC_STEMS)
    summary, version = mod.load(data, file, name)
    return PeerResult(tool, file, name, summary, mod.DEFINITIONS, None if version is None else str(version))


def load_peer_result(path: str | Path) -> PeerResult:
    """The result file at ``path`` (or the tool's file in that folder). A file no reader
    recognises, or one missing a field its reader needs, is a ``ResultError`` naming the file
    (and the field)."""
    result = read_peer_result(path)
    if result is None:
        tools = ", ".join(TOOLS)
        raise ResultError(f"{path}: not a result file of a tool loadgen reads ({tools})")
    return result
