"""The simulator's LoRA adapters: served by name, held in max_loras slots, a load cost that the
step admitting a non-resident adapter pays, so it shows in that request's TTFT."""

from __future__ import annotations

import httpx

from loadgen.sim import Engine, Seq, SimConfig

from .helpers import ThreadedSim

LOAD_MS = 25.0


def cfg(**kw) -> SimConfig:
    return SimConfig(
        **{
            "model_name": "base",
            "lora_adapters": ("a", "b"),
            "lora_load_ms": LOAD_MS,
            "scheduling": "prefill_first",
            **kw,
        }
    )


def ttfts_one_at_a_time(config: SimConfig, adapters: list[str | None]) -> list[int]:
    """Virtual TTFT (ns) of each request, sent one after another to an idle engine."""
    engine, out = Engine(config), []
    for adapter in adapters:
        s = Seq(64, 4, adapter=adapter)
        engine.submit(s)
        start, first = engine.now_ns, None
        while engine.has_work():
            step = engine.step()
            if first is None and s in step.emitted:
                first = engine.now_ns
        assert first is not None
        out.append(first - start)
    return out


class TestEngine:
    def test_alternating_adapters_pay_a_load_each_with_one_slot(self):
        """max_loras=1, a and b in turn: every request loads its adapter; with 2 slots the first two."""
        order = ["a", "b"] * 4
        one = ttfts_one_at_a_time(cfg(max_loras=1), order)
        two = ttfts_one_at_a_time(cfg(max_loras=2), order)
        load_ns = round(LOAD_MS * 1e6)
        assert [x - y for x, y in zip(one, two)] == [0, 0] + [load_ns] * 6
        assert two[0] - two[2] == load_ns  # the first load, against the same request resident

    def test_base_model_never_loads(self):
        """Requests for the base model (no adapter) pay nothing, whatever the slots hold."""
        base = ttfts_one_at_a_time(cfg(max_loras=1), [None] * 3)
        assert len(set(base)) == 1
        assert ttfts_one_at_a_time(cfg(max_loras=1, lora_load_ms=0.0), ["a", "b", "a"]) == base

    def test_least_recently_used_is_evicted(self):
        """Two slots, a b a c b: c evicts b (a was used later), so the last b loads again."""
        config = cfg(max_loras=2, lora_adapters=("a", "b", "c"))
        got = ttfts_one_at_a_time(config, ["a", "b", "a", "c", "b"])
        free = ttfts_one_at_a_time(
            cfg(max_loras=2, lora_load_ms=0.0, lora_adapters=("a", "b", "c")), ["a"] * 5
        )
        load_ns = round(LOAD_MS * 1e6)
        assert [x - y for x, y in zip(got, free)] == [load_ns, load_ns, 0, load_ns, load_ns]


class TestServer:
    def test_models_lists_the_adapters_and_unknown_is_404(self, tmp_path):
        """/v1/models lists the base then each adapter (parent: base); an unknown name is a 404."""
        sim = ThreadedSim(cfg(time_scale=0.0))
        try:
            with httpx.Client(base_url=sim.url, timeout=10) as c:
                listed = c.get("/v1/models").json()["data"]
                assert [(m["id"], m["parent"]) for m in listed] == [
                    ("base", None),
                    ("a", "base"),
                    ("b", "base"),
                ]
                body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
                ok = c.post("/v1/chat/completions", json={**body, "model": "b"})
                assert (ok.status_code, ok.json()["model"]) == (200, "b")
                missing = c.post("/v1/chat/completions", json={**body, "model": "c"})
                assert missing.status_code == 404
                assert missing.json()["message"] == "The model `c` does not exist."
        finally:
            sim.close()

    def test_adapter_names_are_validated(self):
        """An adapter named like the base model, or twice, is a configuration error."""
        for bad in ({"lora_adapters": ("base",)}, {"lora_adapters": ("a", "a")}):
            try:
                SimConfig.from_dict({"model_name": "base", **bad})
            except ValueError as e:
                assert "lora_adapters" in str(e)
            else:
                raise AssertionError(f"{bad} was accepted")
