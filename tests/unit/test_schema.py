"""schemas/summary.schema.json describes summary.json as loadgen writes it: it is generated from the
types of loadgen.summary, and a saved summary is checked against those types when it is loaded."""

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


@pytest.mark.parametrize("name", ["summary", "capacity", "experiment"])
def test_the_schema_file_is_generated_from_the_types(name):
    """Each committed file is exactly what the types generate: a field added to a block without
    regenerating it (python -m loadgen.summary.schema NAME > schemas/NAME.schema.json) fails
    here; and every result file with a schema is in this list."""
    from loadgen.summary.schema import FILES, render

    assert sorted(FILES) == ["capacity", "experiment", "summary"]
    assert (ROOT / "schemas" / f"{name}.schema.json").read_text() == render(name)
    jsonschema.Draft202012Validator.check_schema(json.loads(render(name)))


@pytest.mark.parametrize("path", SUMMARIES, ids=[p.parent.name for p in SUMMARIES])
def test_summaries_of_an_earlier_loadgen_load(path):
    """The fixtures were written by earlier loadgen versions (schema_version 1): they load, and
    come back exactly as written."""
    from loadgen.result import load_summary

    assert load_summary(path) == json.loads(path.read_text())


def test_a_damaged_summary_is_refused_naming_where(tmp_path):
    from loadgen.errors import ResultError
    from loadgen.result import load_summary

    summary = json.loads(SUMMARIES[0].read_text())
    summary["counts"]["ok"] = "many"
    del summary["metrics"]["e2e_ms"]  # every run has it (ttft_ms is absent from a pooling run's)
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ResultError) as e:
        load_summary(tmp_path)
    assert "does not match the summary layout" in str(e.value)
    assert "counts.ok: Input should be a valid integer" in str(e.value)
    assert "metrics.e2e_ms: Field required" in str(e.value)


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
    from loadgen.summary.schema import validate

    assert validate(res.summary) is res.summary


def test_the_distribution_type_has_the_registrys_stats():
    """A latency distribution's keys are the registry's STATS (metric_defs), in their order: the
    type restates them for mypy and the schema, and this keeps the two one list."""
    from loadgen.metric_defs import STATS
    from loadgen.summary import Distribution

    assert tuple(Distribution.__annotations__) == STATS


def test_every_metric_of_the_registry_has_its_place_in_the_summary_type():
    """Each metric's path (metric_defs) is a field of the summary's types, with the right shape:
    a metric added to the registry fails here, naming its path, until the type (which mypy and
    the generated schema read) has its field too."""
    from typing import get_type_hints

    from loadgen import metric_defs
    from loadgen.summary import Distribution, Summary

    missing = []
    for d in metric_defs.METRICS:
        node: object = Summary
        for key in d.path:
            hints = get_type_hints(node, include_extras=False) if isinstance(node, type) else {}
            node = hints.get(key)
            for wrap in ("NotRequired", "Required"):
                if getattr(node, "__origin__", None) is not None and wrap in str(node):
                    node = node.__args__[0]  # type: ignore[union-attr]
            if node is None:
                missing.append(".".join(d.path))
                break
        else:
            if d.kind == "distribution" and node is not Distribution:
                missing.append(f"{'.'.join(d.path)} (not a Distribution)")
    assert missing == []
