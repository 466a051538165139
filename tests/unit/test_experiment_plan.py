"""The experiment file, its configurations and the order of its cells (no server needed)."""

from __future__ import annotations

import pytest

from loadgen.errors import ConfigError
from loadgen.experiment import cells
from loadgen.experiment.spec import parse

BASE = {
    "name": "t",
    "load": {"sweep": {"concurrency": [1, 2], "stage_duration_s": 1}},
    "sla": {"ttft_ms": 700},
    "repeats": 3,
}


def exp(*backends, **top):
    return parse({**BASE, **top, "backends": list(backends)})


def problems(data) -> str:
    with pytest.raises(ConfigError) as err:
        parse({**BASE, **data})
    return str(err.value)


class TestSpec:
    def test_unknown_key_is_named(self):
        """A typo is an error naming its path, not a silent default."""
        said = problems({"backends": [{"name": "a", "url": "http://x", "matrx": {}}]})
        assert "backends[0].matrx: unknown key; did you mean 'matrix'?" in said

    def test_a_backend_is_exactly_one_kind(self):
        """url and sim together, or neither: the error lists what it got."""
        assert "exactly one of url, sim, serve or results (got url, sim)" in problems(
            {"backends": [{"name": "a", "url": "http://x", "sim": "llama3-8b-fp16@h100"}]}
        )
        assert "(got none)" in problems({"backends": [{"name": "a"}]})

    def test_a_placeholder_without_a_matrix_key_is_refused(self):
        """{max_num_seq} (a typo of the matrix key) fails before any server starts."""
        said = problems(
            {
                "backends": [
                    {
                        "name": "v",
                        "serve": "vllm serve m --port {port} --max-num-seqs {max_num_seq}",
                        "matrix": {"max_num_seqs": [16, 64]},
                    }
                ]
            }
        )
        assert "uses {max_num_seq}, which no matrix key fills; valid: max_num_seqs, model, port" in said

    def test_serve_needs_its_port(self):
        assert "serve must contain {port}" in problems({"backends": [{"name": "v", "serve": "vllm serve m"}]})

    def test_a_price_per_matrix_value_must_price_them_all(self):
        said = problems(
            {
                "backends": [
                    {
                        "name": "s",
                        "sim": "llama3-8b-fp16@{gpu}",
                        "matrix": {"gpu": ["h100", "a100"]},
                        "gpu_hour_cost": {"gpu": {"h100": 3.0}},
                    }
                ]
            }
        )
        assert "gpu_hour_cost.gpu must price every value of matrix.gpu (a100, h100)" in said

    def test_one_load_method(self):
        said = problems(
            {"load": {"sweep": {"rate": [1]}, "capacity": {}}, "backends": [{"name": "a", "url": "u"}]}
        )
        assert "set exactly one of sweep, stages or capacity (got sweep, capacity)" in said

    def test_reset_hooks_have_a_method_and_a_path(self):
        said = problems({"backends": [{"name": "a", "url": "http://x", "reset": ["reset_prefix_cache"]}]})
        assert "is not a reset hook: write a path on the target starting with /" in said

    def test_backend_names_differ(self):
        said = problems({"backends": [{"name": "a", "url": "http://x"}, {"name": "a", "url": "http://y"}]})
        assert "a used twice" in said


class TestConfigs:
    def test_matrix_points_fill_their_templates(self):
        """Every point of the matrix is a configuration; numbers are typed as YAML reads them."""
        e = exp(
            {
                "name": "sim",
                "sim": {"preset": "llama3-8b-{p}@{gpu}", "max_num_seqs": "{seqs}"},
                "matrix": {"gpu": ["h100", "a100"], "p": ["fp16"], "seqs": [16, 64]},
                "gpu_hour_cost": {"gpu": {"h100": 3.99, "a100": 1.89}},
                "gpus": 2,
            }
        )
        got = cells.configs(e)
        assert [c.id for c in got] == [
            "sim--gpu=h100--p=fp16--seqs=16",
            "sim--gpu=h100--p=fp16--seqs=64",
            "sim--gpu=a100--p=fp16--seqs=16",
            "sim--gpu=a100--p=fp16--seqs=64",
        ]
        assert got[3].sim == {"preset": "llama3-8b-fp16@a100", "max_num_seqs": 64}
        assert (got[0].gpu_hour_cost, got[3].gpu_hour_cost, got[3].gpus) == (3.99, 1.89, 2.0)
        assert got[1].labels == {"backend": "sim", "gpu": "h100", "p": "fp16", "seqs": "64"}

    def test_serve_gets_its_port_and_values(self):
        e = exp(
            {
                "name": "v",
                "serve": "vllm serve {model} --port {port} --max-num-seqs {n}",
                "model": "tiny",
                "matrix": {"n": [8]},
            }
        )
        c = cells.configs(e)[0]
        assert c.filled(c.backend.serve, 8123) == "vllm serve tiny --port 8123 --max-num-seqs 8"

    def test_results_backends_have_no_cells(self):
        e = exp({"name": "a", "url": "http://x"}, {"name": "old", "results": "old-run"})
        assert {c.config.id for c in cells.cells(e)} == {"a"}


class TestOrder:
    def two(self, seed=0):
        return exp({"name": "a", "url": "http://x", "matrix": {"k": [1, 2, 3, 4, 5]}}, seed=seed)

    def test_each_round_runs_every_configuration_before_the_next(self):
        """Repeat r of every configuration comes before repeat r+1 of any."""
        order = cells.cells(self.two())
        assert [c.repeat for c in order] == [1] * 5 + [2] * 5 + [3] * 5
        for r in (1, 2, 3):
            assert sorted(c.config.id for c in order if c.repeat == r) == [f"a--k={k}" for k in range(1, 6)]

    def test_rounds_are_shuffled_by_the_seed(self):
        """The same seed gives the same order; rounds differ from each other; another seed differs."""
        ids = lambda e: [c.id for c in cells.cells(e)]  # noqa: E731
        assert ids(self.two()) == ids(self.two())
        rounds = [[c.config.id for c in cells.cells(self.two()) if c.repeat == r] for r in (1, 2, 3)]
        assert len({tuple(r) for r in rounds}) > 1
        assert ids(self.two(seed=1)) != ids(self.two())


def test_configurations_that_would_share_a_folder_are_refused():
    """Matrix values differing only in characters a folder name drops ("a/b", "a b") clash."""
    e = exp({"name": "a", "url": "http://x/{v}", "matrix": {"v": ["a/b", "a b"]}})
    with pytest.raises(ConfigError, match="configurations share a folder name: a--v=a-b"):
        cells.configs(e)
