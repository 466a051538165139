"""``python -m loadgen.sim serve [--config-json JSON | --preset NAME] [--host H] [--port N] [--grpc-port M]``.

This entry point exists for ``SimProcess`` and for people without the loadgen CLI; it is the
only module of the simulator that prints or exits.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from .config import SimConfig, SimConfigError
from .process import listening_line, serve
from .server import SimServer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m loadgen.sim", description="the loadgen GPU-serving simulator"
    )
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve until SIGINT/SIGTERM")
    s.add_argument("--config-json", default="{}", help="a SimConfig as JSON (the profile's sim: section)")
    s.add_argument("--preset", help='shorthand for {"preset": ...}; overrides the JSON\'s preset')
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    s.add_argument(
        "--grpc-port", type=int, help="also serve Triton's KServe v2 gRPC frontend here (0: any free port)"
    )
    s.add_argument("--ground-truth", type=Path, help="append one JSON line per finished request here")
    s.add_argument(
        "--announce-json",
        action="store_true",
        help='print {"event": "listening", "url": ...} on stdout once bound',
    )
    args = ap.parse_args(argv)
    try:
        d = orjson.loads(args.config_json)
        if args.preset:
            d["preset"] = args.preset
        config = SimConfig.from_dict(d)
    except (SimConfigError, orjson.JSONDecodeError) as e:
        print(f"loadgen-sim: {e}", file=sys.stderr)
        return 2

    def announce(server: SimServer) -> None:
        if args.announce_json:
            said = {"event": "listening", "url": server.url, "port": server.port, "grpc_url": server.grpc_url}
            sys.stdout.write(orjson.dumps(said).decode() + "\n")
            sys.stdout.flush()
        print(listening_line(server), file=sys.stderr, flush=True)

    serve(config, args.host, args.port, args.ground_truth, on_listening=announce, grpc_port=args.grpc_port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
