"""The experiment report's "Conditions that differ": one readable value a configuration, and no
row for what differs between any two runs (a timestamp, an id, a port loadgen picked)."""

from __future__ import annotations

from loadgen.report.experiment_conditions import calibration_table, differing_rows, readable


def conditions(port: int, created: int, *, preset: str = "llama3-8b-fp16@h100", **extra):
    """A simulator run's conditions, as summary.json holds them, trimmed to the fields that matter."""
    return {
        "target": {
            "url": f"http://127.0.0.1:{port}",
            "builtin_simulator": {"config": {"preset": preset}},
        },
        "server": {
            "models": {
                "data": [{"id": "llama", "object": "model", "created": created, "owned_by": "loadgen-sim"}]
            },
            "started_at": f"2026-12-07T15:{created % 60:02d}:00+00:00",
        },
        "telemetry": {
            "sources": [{"kind": "simulator", "url": f"http://127.0.0.1:{port}/dcgm/metrics", "readings": 14}]
        },
        **extra,
    }


CAL_ROW = {"id": "trt-h100-llama31-8b-fp8-128-2048", "engine": "tensorrt-llm", "error_pct": 13.4}


class TestLeftOut:
    def test_conditions_differing_only_in_a_port_and_a_timestamp_have_no_row(self):
        """Two simulator cells: their URLs, telemetry URL and models' `created` differ, and
        nothing else: the table has no row."""
        assert (
            differing_rows(
                [conditions(45845, 1796656811), conditions(37219, 1796656851)], ports_assigned=True
            )
            == []
        )

    def test_a_port_the_user_gave_is_a_difference(self):
        """Two URLs from the experiment file that differ by their port are two servers."""
        rows = differing_rows([conditions(8000, 1), conditions(8001, 1)], ports_assigned=False)
        assert rows == [("target.url", "http://127.0.0.1:8000", "http://127.0.0.1:8001")]

    def test_a_real_difference_beside_volatile_ones_is_kept(self):
        rows = differing_rows(
            [conditions(1, 1), conditions(2, 2, preset="llama3-8b-fp8@h100")], ports_assigned=True
        )
        assert rows == [
            ("target.builtin_simulator.config.preset", "llama3-8b-fp16@h100", "llama3-8b-fp8@h100")
        ]

    def test_fields_with_the_same_values_share_a_row(self):
        """A matrix value is a label, a profile setting and the simulator's config: one row."""
        a, b = conditions(1, 1), conditions(1, 1)
        for c, seqs in ((a, 16), (b, 64)):
            c["labels"] = {"max_num_seqs": str(seqs)}
            c["target"]["builtin_simulator"]["config"]["max_num_seqs"] = seqs
        assert differing_rows([a, b], ports_assigned=True) == [
            ("labels.max_num_seqs, target.builtin_simulator.config.max_num_seqs", "16", "64")
        ]


class TestReadable:
    def test_a_distribution_is_mean_p50_p99(self):
        got = {
            "count": 9,
            "mean": 262.58123,
            "std": 140.5,
            "min": 54.0,
            "p50": 237.0,
            "p99": 767.52,
            "max": 853.0,
        }
        assert readable(got) == "262.6 / 237 / 767.5"
        assert readable({"mean": 32.171, "p50": 31.0, "p99": 62.92}) == "32.17 / 31 / 62.92"

    def test_a_list_of_sources_is_its_count_and_kinds(self):
        one = [{"kind": "simulator", "url": "http://127.0.0.1:1/dcgm/metrics", "readings": 3, "note": None}]
        two = [*one, {"kind": "dcgm", "url": "http://10.0.0.5:9400/metrics", "readings": 3}]
        assert readable(one, "telemetry.sources") == "1 source: simulator"
        assert readable(two, "telemetry.sources") == "2 sources: simulator, dcgm"

    def test_models_are_their_ids_and_a_mapping_its_pairs(self):
        """Never a Python repr: a list of models is their ids; a mapping key=value, without its
        timestamps and nulls."""
        models = [{"id": "a", "created": 5}, {"id": "b", "created": 6}]
        assert readable(models, "server.models.data") == "a, b"
        assert (
            readable({"max_num_seqs": 64, "created_at": "2026-12-07T15:00:00Z", "x": None})
            == "max_num_seqs=64"
        )
        assert readable([16, 64]) == "16, 64"
        assert readable(None) == "-"
        assert readable(22714.0) == "22,714"
        assert readable(0.77541) == "0.7754"

    def test_a_long_text_is_cut(self):
        got = readable("x" * 300)
        assert len(got) == 120 and got.endswith("…")


class TestCalibration:
    def cal(self, status: str, rows: list):
        return {
            "builtin_simulator": {"calibration": {"status": status, "summary": "long " * 40, "rows": rows}}
        }

    def test_calibration_folds_into_its_status_and_row_count(self):
        """The calibration block (status, a 600-character summary, its rows) is one row, its
        status and count, pointing to the section that lists the rows."""
        a = conditions(1, 1)
        b = conditions(1, 1)
        a["target"].update(self.cal("calibrated", [CAL_ROW, {**CAL_ROW, "id": "r2", "error_pct": -1.2}]))
        b["target"].update(self.cal("uncalibrated", []))
        assert differing_rows([a, b], ports_assigned=True) == [
            (
                "target.builtin_simulator.calibration (rows: see Simulator calibration)",
                "calibrated: 2 rows",
                "uncalibrated: 0 rows",
            )
        ]
        table = calibration_table(["h100 fp8", "h100 fp16"], [a, b])
        assert table is not None
        assert table.rows == (
            ("h100 fp8", "calibrated", "trt-h100-llama31-8b-fp8-128-2048 +13.4 %, r2 -1.2 %"),
            ("h100 fp16", "uncalibrated", "none"),
        )

    def test_the_same_calibration_is_no_row_and_no_simulator_no_table(self):
        a, b = conditions(1, 1), conditions(2, 2)
        for c in (a, b):
            c["target"].update(self.cal("calibrated", [CAL_ROW]))
        assert differing_rows([a, b], ports_assigned=True) == []
        assert calibration_table(["a"], [{"target": {"url": "http://x"}}]) is None
