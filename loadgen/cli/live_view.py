"""What watches a ``loadgen run`` while it goes: the live view on the terminal (``--ui``) and the
client's metrics exported to Prometheus (``--metrics-port``) and OTLP (``--otlp``), all fed by
one ``live.stats.LiveStats``."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from loadgen.cli.console import ProgressView
from loadgen.cli.dashboard import Dashboard
from loadgen.live.exporters import OtlpExporter, PrometheusExporter

if TYPE_CHECKING:
    from loadgen.config import Profile
from loadgen.live.stats import LiveStats

__all__ = ["live_view"]

# gen_ai.operation.name per endpoint where the semantic conventions name it; else the endpoint.
_OPERATION = {"chat": "chat", "completions": "text_completion", "messages": "chat", "responses": "chat"}


def live_view(a: argparse.Namespace, profile: Profile) -> tuple[LiveStats | None, Any, list[Any]]:
    """(the figures the run feeds, the view to run under, the exporters to close after)."""
    ui = "none" if a.no_progress or not profile.output.progress else a.ui
    if ui is None:
        ui = "dashboard" if sys.stderr.isatty() else "none"
    wanted = ui == "dashboard" or a.metrics_port is not None or a.otlp
    stats = LiveStats() if wanted else None
    exporters: list[Any] = []
    if stats is not None:
        t = profile.target
        labels = {
            "gen_ai.operation.name": _OPERATION.get(t.endpoint, t.endpoint),
            "server.address": urlsplit(t.url).hostname or "" if t.url else "simulator",
            "model": t.model or "",
        }
        if a.metrics_port is not None:
            exporters.append(PrometheusExporter(stats, a.metrics_port, a.metrics_host, labels))
            print(f"metrics  http://{a.metrics_host}:{exporters[-1].port}/metrics", file=sys.stderr)
        if a.otlp:
            exporters.append(OtlpExporter(stats, a.otlp, labels=labels))
    if ui == "dashboard" and stats is not None:
        return stats, Dashboard(stats, f"loadgen {profile.name}"), exporters
    return stats, ProgressView(enabled=ui == "progress"), exporters
