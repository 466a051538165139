"""Media in prompts, piece by piece: the config, the seeded generators and their cache, a
dataset's media columns, the chat body's content parts and the simulator's token rule."""

from __future__ import annotations

import base64
import io
import wave

import pytest
from PIL import Image

from loadgen.backends.media_parts import with_media
from loadgen.config import WorkloadConfig, load_profile
from loadgen.errors import ConfigError
from loadgen.records import MediaPart, RequestRecord, set_media
from loadgen.sim.config import SimConfig
from loadgen.sim.media import MediaRule
from loadgen.workload import Workload
from loadgen.workload.datasets import DatasetError, load_dataset
from loadgen.workload.media import MediaCache, make_image, make_wav


def workload(seed: int = 0, **media) -> Workload:
    return Workload(WorkloadConfig.model_validate({"seed": seed, "num_requests": 10, **media}), "chat")


def image_bytes(part: MediaPart) -> bytes:
    return base64.b64decode(part.payload.partition(",")[2])


class TestGenerated:
    def test_same_seed_same_bytes_other_seed_other_bytes(self):
        """Request 3's image and clip are byte for byte the same from two workloads of seed 5,
        and differ under seed 6."""
        cfg = {"images": {"count": 1, "width": 40, "height": 30}, "audio": {"count": 1, "duration_s": 0.1}}
        a, b, c = workload(5, **cfg).request(3), workload(5, **cfg).request(3), workload(6, **cfg).request(3)
        assert [m.payload for m in a.media] == [m.payload for m in b.media]
        assert all(x.payload != y.payload for x, y in zip(a.media, c.media))
        assert make_image(40, 30, "png", 5, 1) == make_image(40, 30, "png", 5, 1)
        assert make_wav(0.1, 8000, 5, 1) != make_wav(0.1, 8000, 6, 1)

    def test_images_and_clips_are_what_they_claim(self):
        """A generated PNG decodes to its size, a JPEG is a JPEG, a WAV holds rate x seconds
        16-bit mono samples; the parts' bytes, pixels and seconds say the same."""
        spec = workload(
            images={"count": 2, "sizes": [[33, 17]], "format": "jpeg"},
            audio={"count": 1, "duration_s": 0.5, "sample_rate": 8000},
        ).request(0)
        img, _, clip = spec.media
        assert Image.open(io.BytesIO(image_bytes(img))).format == "JPEG"
        assert Image.open(io.BytesIO(image_bytes(img))).size == (33, 17)
        assert (img.kind, img.fmt, img.pixels, img.nbytes) == (
            "image",
            "jpeg",
            33 * 17,
            len(image_bytes(img)),
        )
        raw = base64.b64decode(clip.payload)
        with wave.open(io.BytesIO(raw)) as w:
            assert (w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()) == (
                1,
                2,
                8000,
                4000,
            )
        assert (clip.kind, clip.fmt, clip.seconds, clip.nbytes) == ("audio", "wav", 0.5, len(raw))

    def test_one_encode_per_distinct_size_and_variant(self):
        """40 requests of 2 images from 2 sizes x 3 variants encode each (size, variant) they use
        once, and the requests share the cached strings."""
        w = workload(images={"count": 2, "sizes": [[8, 8], [16, 8]], "distinct": 3})
        specs = [w.request(i) for i in range(40)]
        used = {(m.pixels, m.payload) for s in specs for m in s.media}
        assert len(used) == 6  # every (size, variant) was drawn
        assert w.media_cache.encoded == 6
        assert specs[0].media[0].payload is next(
            m.payload for s in specs[1:] for m in s.media if m.payload == specs[0].media[0].payload
        )

    def test_the_cache_is_bounded_by_bytes(self):
        """A cache of 100 characters keeps only the newest part past its limit."""
        cache = MediaCache(limit=100)
        for k in range(3):
            cache.get(("k", k), lambda: MediaPart("image", "x" * 60, "png"))
        assert (cache.held, cache.encoded) == (60, 3)

    def test_counts_follow_the_seed(self):
        """count uniform 0..3: request i's count is the same in two workloads and varies over i."""
        cfg = {"images": {"count": {"kind": "uniform", "min": 0, "max": 3}, "width": 4, "height": 4}}
        a, b = workload(1, **cfg), workload(1, **cfg)
        counts = [len(a.request(i).media) for i in range(30)]
        assert counts == [len(b.request(i).media) for i in range(30)]
        assert set(counts) == {0, 1, 2, 3}


class TestRecordsAndBody:
    def test_record_columns_from_the_parts(self):
        """Two images of 1000 and 500 pixels, a 2.5 s clip and a URL image: 3 images, 1 clip,
        the inline bytes summed, 0.0015 MP and 2.5 s."""
        media = (
            MediaPart("image", "data:", "png", 100, 1000),
            MediaPart("image", "data:", "png", 50, 500),
            MediaPart("audio", "AAAA", "wav", 7, seconds=2.5),
            MediaPart("image", "https://x/y.png", "url"),
        )
        rec = RequestRecord(
            id=0,
            warmup=False,
            t_sched_ns=0,
            t_send_ns=0,
            requested_output_tokens=1,
            requested_prompt_tokens=1,
        )
        set_media(rec, media)
        assert (rec.images, rec.audio_clips, rec.media_bytes, rec.megapixels, rec.audio_s) == (
            3,
            1,
            157,
            0.0015,
            2.5,
        )

    def test_chat_content_parts(self):
        """The last user message becomes its text, then an image_url, input_audio and audio_url
        part, in order; the system message and the spec's own list are untouched."""
        msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "look"}]
        media = (
            MediaPart("image", "data:image/png;base64,AA==", "png", 1, 1),
            MediaPart("audio", "BB==", "wav", 1, seconds=1.0),
            MediaPart("audio", "https://a/b.wav", "url"),
        )
        assert with_media(msgs, media) == [
            {"role": "system", "content": "s"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                    {"type": "input_audio", "input_audio": {"data": "BB==", "format": "wav"}},
                    {"type": "audio_url", "audio_url": {"url": "https://a/b.wav"}},
                ],
            },
        ]
        assert msgs[1] == {"role": "user", "content": "look"}


class TestConfig:
    def test_unknown_keys_and_mixed_sizes_are_rejected(self):
        with pytest.raises(ValueError, match="colour"):
            WorkloadConfig.model_validate({"num_requests": 1, "images": {"colour": "red"}})
        with pytest.raises(ValueError, match="not both"):
            WorkloadConfig.model_validate({"num_requests": 1, "images": {"width": 8, "sizes": [[8, 8]]}})

    def test_an_endpoint_without_content_parts_refuses_media(self):
        """completions carries no content parts: the profile names workload.images and chat."""
        with pytest.raises(ConfigError) as e:
            load_profile(
                None,
                overrides={
                    "target.endpoint": "completions",
                    "workload.num_requests": 1,
                    "load.concurrency": 1,
                    "workload.images": {"count": 1},
                },
            )
        assert "workload.images" in str(e.value) and "use chat" in str(e.value)


class TestDatasetMedia:
    def test_paths_are_checked_and_urls_passed_through(self, tmp_path):
        """A row's local image (relative to the dataset) is read for its size, a WAV for its
        seconds; an https URL is kept as given."""
        Image.new("RGB", (20, 10)).save(tmp_path / "a.png")
        (tmp_path / "c.wav").write_bytes(make_wav(0.5, 8000, 0, 0))
        (tmp_path / "d.jsonl").write_text(
            '{"prompt": "p", "images": ["a.png", "https://h/b.jpg"], "audio": "c.wav"}\n'
        )
        (entry,) = load_dataset(tmp_path / "d.jsonl")
        assert [(m.kind, m.ref, m.pixels, m.seconds) for m in entry.media] == [
            ("image", str(tmp_path / "a.png"), 200, 0.0),
            ("image", "https://h/b.jpg", 0, 0.0),
            ("audio", str(tmp_path / "c.wav"), 0, 0.5),
        ]

    def test_a_missing_file_names_the_row_and_field(self, tmp_path):
        path = tmp_path / "d.jsonl"
        path.write_text('{"prompt": "p"}\n{"prompt": "q", "images": ["there.png", "gone.png"]}\n')
        Image.new("RGB", (2, 2)).save(tmp_path / "there.png")
        with pytest.raises(DatasetError) as e:
            load_dataset(path)
        assert str(e.value).startswith(f"{path} line 2: images[1] 'gone.png': no such file")

    def test_a_dataset_run_sends_each_rows_media(self, tmp_path):
        """A JSONL dataset's row media go out as its request's parts, the file's bytes inline."""
        Image.new("RGB", (6, 4)).save(tmp_path / "a.png")
        (tmp_path / "d.jsonl").write_text('{"prompt": "p", "images": "a.png"}\n')
        w = Workload(
            WorkloadConfig.model_validate({"num_requests": 1, "dataset": {"path": str(tmp_path / "d.jsonl")}})
        )
        (part,) = w.request(0).media
        assert image_bytes(part) == (tmp_path / "a.png").read_bytes()
        assert (part.fmt, part.pixels) == ("png", 24)


class TestSimRule:
    @pytest.mark.parametrize(
        ("width", "height", "tokens"),
        [
            (512, 512, 18 * 18 + 2),  # 512 / 28 = 18.3: rounded to 18 tiles a side
            (1024, 768, 37 * 27 + 2),  # 36.6 -> 37, 27.4 -> 27
            (10, 10, 2 * 2 + 2),  # under min_pixels (56 x 56): scaled up to 56 x 56
            (8000, 8000, 128 * 128 + 2),  # over max_pixels (16384 tiles): scaled down, floored
        ],
    )
    def test_image_tokens_follow_qwen2_vl(self, width, height, tokens):
        assert MediaRule(SimConfig()).image_tokens(width, height) == tokens

    def test_audio_tokens_are_25_a_second_rounded_up(self):
        rule = MediaRule(SimConfig())
        assert [rule.audio_tokens(s) for s in (1.0, 0.5, 0.01)] == [27, 15, 3]
