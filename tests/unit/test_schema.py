"""schemas/summary.schema.json describes summary.json as loadgen writes it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).parents[2]
SCHEMA = json.loads((ROOT / "schemas" / "summary.schema.json").read_text())
SUMMARIES = sorted((ROOT / "tests" / "fixtures" / "runs").glob("*/summary.json"))


def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(
        SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


def test_schema_is_valid_draft_2020_12():
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_every_property_is_described():
    missing = []

    def walk(node, path):
        if isinstance(node, dict):
            for name, sub in (node.get("properties") or {}).items():
                if "description" not in sub:
                    missing.append(f"{path}.{name}")
            for k, v in node.items():
                walk(v, f"{path}.{k}")

    walk(SCHEMA, "$")
    assert missing == []


@pytest.mark.parametrize("path", SUMMARIES, ids=[p.parent.name for p in SUMMARIES])
def test_fixture_summaries_validate(path):
    assert len(SUMMARIES) == 5
    errors = [
        f"{list(e.absolute_path)}: {e.message}" for e in validator().iter_errors(json.loads(path.read_text()))
    ]
    assert errors == []


def test_an_old_schema_version_is_rejected():
    summary = json.loads(SUMMARIES[0].read_text())
    summary["schema_version"] = 0
    assert not validator().is_valid(summary)


def test_a_fresh_run_validates(tmp_path):
    """A run made now (scripted server with /tokenize) writes a summary the schema accepts, so
    the schema cannot fall behind the code that writes summaries."""
    import asyncio

    from loadgen.config import load_profile
    from loadgen.runner import api
    from loadgen.testing import StreamServer

    with StreamServer(ttft_ms=2, itl_ms=1, tokenize=True) as s:
        p = load_profile(
            None,
            overrides={
                "target.url": s.url,
                "workload.num_requests": 6,
                "load.concurrency": 2,
                "workload.output_tokens": 4,
                "output.dir": str(tmp_path),
                "output.progress": False,
                "sla.ttft_ms": 100.0,
                "sla.rules": ["p99 ttft_ms < 100"],
            },
        )
        res = asyncio.run(api.run_async(p))
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator().iter_errors(res.summary)]
    assert errors == []
