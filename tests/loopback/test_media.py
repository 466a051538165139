"""Images and audio in chat prompts, end to end over loopback: the scripted server's log of what
it received and decoded, the simulator's usage and ground truth, and the hostile server's
"image too large". Records are matched to the logs by response id."""

from __future__ import annotations

import json

import orjson
import pytest
from PIL import Image

from loadgen.errors import RunError
from loadgen.report.markdown import render_markdown
from loadgen.report.sections import build_sections
from loadgen.result import GROUND_TRUTH
from loadgen.testing.hostile import IMAGE_TOO_LARGE, HostileServer
from loadgen.testing.server import StreamServer

import helpers
from helpers import run

IMAGES = {"count": {"kind": "uniform", "min": 0, "max": 2}, "sizes": [[64, 48], [200, 120]], "format": "jpeg"}
AUDIO = {"count": 1, "duration_s": [0.25, 0.5], "sample_rate": 8000}


def sim_profile(tmp_path, **overrides):
    """Chat against the unpaced simulator, 6 requests one at a time, no warm-up."""
    base = {
        "sim": {"time_scale": 0.0, "seed": 3},
        "load.concurrency": 1,
        "load.warmup_requests": 0,
        "workload.num_requests": 6,
        "target.ignore_eos": True,
    }
    return helpers.profile(tmp_path, None, **{**base, **overrides})


class TestAgainstTheScriptedServer:
    def test_bytes_and_counts_the_server_received_equal_the_records(self, make_profile):
        """0 to 2 JPEGs and one WAV a request: per request, the images, clips and decoded bytes
        the server logged are the record's; the media block's totals are their sums."""
        with StreamServer(ttft_ms=1, itl_ms=1) as srv:
            res = run(
                make_profile(
                    srv.url,
                    workload__num_requests=10,
                    load__warmup_requests=0,
                    workload__images=IMAGES,
                    workload__audio=AUDIO,
                )
            )
            log = srv.log()
        records = res.records
        assert len(records) == 10 and all(r.ok for r in records)
        for r in records:
            got = log[r.response_id]["media"]
            assert (got["images"], got["audio_clips"], got["media_bytes"]) == (
                r.images,
                r.audio_clips,
                r.media_bytes,
            )
            assert r.audio_clips == 1 and r.audio_s in (0.25, 0.5)
            assert r.megapixels == (None if r.images == 0 else r.megapixels)
        assert {r.images for r in records} == {0, 1, 2}  # the seed draws every count here
        block = res.summary["media"]
        assert block["images"] == sum(r.images for r in records)
        assert block["audio_clips"] == 10
        assert block["media_bytes"] == sum(r.media_bytes for r in records)
        assert block["audio_s"] == sum(r.audio_s or 0 for r in records)
        assert block["requests"] == 10
        on_disk = json.loads((res.run_dir / "summary.json").read_text())["media"]
        assert on_disk == block
        report = render_markdown("run", build_sections(res.summary, None, ()))
        assert "## Media" in report
        assert f"| total | {block['images']} |" in report

    def test_a_datasets_files_go_inline_and_its_urls_pass_through(self, make_profile, tmp_path):
        """A row with a local PNG and an https URL: the server received 2 images and exactly the
        file's bytes (the URL is counted and never fetched: its host does not resolve); the
        record's megapixels are the file's alone."""
        Image.new("RGB", (30, 20), (200, 10, 10)).save(tmp_path / "red.png")
        (tmp_path / "d.jsonl").write_text(
            '{"prompt": "what colour is this", "images": ["red.png", "https://example.invalid/b.jpg"]}\n'
        )
        with StreamServer(ttft_ms=1, itl_ms=1) as srv:
            res = run(
                make_profile(
                    srv.url,
                    workload__num_requests=2,
                    load__warmup_requests=0,
                    workload__dataset={"path": str(tmp_path / "d.jsonl")},
                )
            )
            log = srv.log()
        size = (tmp_path / "red.png").stat().st_size
        for r in res.records:
            assert log[r.response_id]["media"] == {"images": 2, "audio_clips": 0, "media_bytes": size}
            assert (r.images, r.media_bytes, r.megapixels) == (2, size, 600 / 1e6)

    def test_a_run_without_media_has_no_media_block(self, make_profile):
        """No workload.images or audio: the records carry no media and the summary no block."""
        with StreamServer(ttft_ms=1, itl_ms=1) as srv:
            res = run(make_profile(srv.url, workload__num_requests=3))
        assert "media" not in res.summary
        assert {(r.images, r.audio_clips, r.media_bytes, r.megapixels) for r in res.records} == {
            (0, 0, 0, None)
        }


class TestAgainstTheSimulator:
    @pytest.mark.slow
    def test_prompt_tokens_grow_by_the_documented_rule(self, tmp_path):
        """The same text prompts with one 512 x 512 image each, then with a 1 s clip of audio
        each: usage.prompt_tokens grows by exactly 18 x 18 + 2 = 326 (Qwen2-VL's rule) and by
        25 + 2 = 27 (25 tokens a second); the ground truth logs the media the records sent."""
        plain = run(sim_profile(tmp_path / "plain"))
        image = run(
            sim_profile(tmp_path / "image", workload__images={"count": 1, "width": 512, "height": 512})
        )
        audio = run(sim_profile(tmp_path / "audio", workload__audio={"count": 1, "duration_s": 1}))
        base = {r.id: r.prompt_tokens for r in plain.records}
        assert all(r.prompt_tokens_source == "usage" for r in plain.records)
        assert [r.prompt_tokens - base[r.id] for r in image.records] == [326] * 6
        assert [r.prompt_tokens - base[r.id] for r in audio.records] == [27] * 6
        truth = {
            g["id"]: g for g in map(orjson.loads, (image.run_dir / GROUND_TRUTH).read_bytes().splitlines())
        }
        for r in image.records:
            g = truth[r.response_id]
            assert (g["images"], g["audio_clips"], g["media_bytes"], g["media_tokens"]) == (
                1,
                0,
                r.media_bytes,
                326,
            )
            assert r.megapixels == 512 * 512 / 1e6
        assert image.summary["media"]["prompt_tokens_per_request"] == sum(base.values()) / 6 + 326


def test_a_server_refusing_the_image_is_an_http_400_with_its_message(make_profile):
    """The hostile server's image_too_large: the preflight (an image request like the run's)
    stops the run before the load with the server's message; without it every request with an
    image is an http_400 whose message is the server's, and its record still counts the image
    it sent."""
    kw = dict(
        workload__num_requests=3,
        load__warmup_requests=0,
        workload__images={"count": 1, "width": 32, "height": 32},
    )
    with HostileServer("image_too_large") as srv:
        with pytest.raises(RunError, match=r"refused the preflight request \(HTTP 400\): image too large"):
            run(make_profile(srv.url, **kw))
        res = run(make_profile(srv.url, target__preflight=False, **kw))
    assert {(r.ok, r.error_class, r.http_status, r.images) for r in res.records} == {
        (False, "http_400", 400, 1)
    }
    assert all(IMAGE_TOO_LARGE in (r.error_message or "") for r in res.records)
    assert all(r.media_bytes > 0 for r in res.records)
    assert res.summary["media"]["images"] == 3
