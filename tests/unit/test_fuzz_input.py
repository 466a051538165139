"""Hostile input: fuzzed profiles, ``--set`` strings and command-line values, and hand-picked cases.

Whatever a user (or a script, or a file from elsewhere) hands to loadgen, the answer is either a
run or one clean error: ``load_profile`` raises nothing but ``ConfigError``, each problem one
line that names the field or says what is wrong, and ``loadgen run`` returns 2 with a
``loadgen: error:`` message, never a traceback, in bounded time.

The generated cases are reproducible (``derandomize=True``, no example database): a failure in
CI is the same failure on a laptop. Every run of the command line points at
``http://127.0.0.1:9`` (nothing listens there), so a profile that validates stops at the first
connection, refused at once, with exit 2: no load is ever generated and no traffic leaves
loopback.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from loadgen.cli.main import main
from loadgen.config import Profile, load_profile
from loadgen.errors import ConfigError

from helpers import margin

REFUSED = "http://127.0.0.1:9"  # discard port: connections are refused at once
BOUND_S = 10.0  # every single input is answered within this (a hang detector: absolute)
pytestmark = pytest.mark.timing_absolute
# No shrinking by default: a failing case is reported as generated, in seconds. Shrinking it to a
# minimal one re-runs the slow cases (PyYAML's pure-Python scanner on long strings) over a thousand
# times, minutes on two cores; LOADGEN_FUZZ_SHRINK=1 turns it on when investigating a failure.
PHASES = tuple(Phase) if os.environ.get("LOADGEN_FUZZ_SHRINK") else (Phase.explicit, Phase.generate)

# A profile that validates: each fuzzed case mutates a few of its fields, so most cases reach
# the deeper checks instead of failing at the first missing section.
BASE: dict[str, Any] = {
    "name": "fuzz",
    "target": {"url": REFUSED, "headers": {"X-Trace": "1"}, "extra_body": {"top_k": 5}},
    "workload": {"num_requests": 4, "input_tokens": 8, "output_tokens": 4, "seed": 1},
    "load": {"concurrency": 2},
    "sla": {"ttft_ms": 500, "rules": ["p99 ttft_ms < 700"]},
    "labels": {"gpu": "h100"},
    "output": {"progress": False},
    "server_metrics": {"enabled": False},
}

# Dotted paths the mutations aim at: every field of every section, and the sections themselves.
FIELDS = (
    "name",
    "description",
    "target",
    "workload",
    "load",
    "sla",
    "labels",
    "output",
    "sim",
    "server_metrics",
    "target.url",
    "target.endpoint",
    "target.model",
    "target.api_key_env",
    "target.headers",
    "target.extra_body",
    "target.ignore_eos",
    "target.include_usage",
    "target.continuous_usage_stats",
    "target.prompt_format",
    "target.transport",
    "target.timeout_s",
    "target.connect_timeout_s",
    "target.read_timeout_s",
    "workload.seed",
    "workload.num_requests",
    "workload.duration_s",
    "workload.input_tokens",
    "workload.output_tokens",
    "workload.input_tokens.kind",
    "workload.input_tokens.value",
    "workload.input_tokens.mean",
    "workload.input_tokens.sigma",
    "workload.input_tokens.std",
    "workload.input_tokens.min",
    "workload.input_tokens.max",
    "workload.input_tokens.values",
    "workload.output_tokens.kind",
    "workload.output_tokens.values",
    "workload.prompt",
    "workload.prompt.source",
    "workload.prompt.system_prompt_tokens",
    "workload.prompt.server_tokenize",
    "load.concurrency",
    "load.rate",
    "load.arrival",
    "load.burstiness",
    "load.max_concurrency",
    "load.warmup_requests",
    "sla.ttft_ms",
    "sla.tpot_ms",
    "sla.e2e_ms",
    "sla.rules",
    "output.run_id",
    "output.progress",
    "server_metrics.enabled",
    "server_metrics.interval_s",
    "server_metrics.path",
)
# Sections where any key is allowed: mutations add random keys under these.
OPEN_SECTIONS = ("labels", "sim", "target.extra_body", "target.headers")
KNOWN_KEYS = sorted({p.rsplit(".", 1)[-1] for p in FIELDS} | {"kind", "fixed", "lognormal", "values"})

# ----------------------------------------------------------------------------- strategies
SPECIAL_NUMBERS = (
    2**80,
    -(2**80),
    2**63,
    2**64,
    2**31,
    -1,
    0,
    1,
    10**7,
    10**9,
    10**10,
    1 << 22,
    (1 << 22) + 1,
    float("inf"),
    float("-inf"),
    float("nan"),
    1e300,
    -1e300,
    1e-300,
    -0.0,
    0.5,
    1e9,
)
SPECIAL_STRINGS = (
    "",
    " ",
    "\r\n",
    "a\r\nInjected: 1",
    "\x00",
    "\x1b[31m",
    "\u2028",
    "\x85",
    "€",
    "ünïcödé",
    "日本語",
    "\U0001f680",
    "../escape",
    "/",
    "..",
    ".",
    "~",
    "-1",
    "1e10",
    "1.0e+10",
    ".inf",
    ".nan",
    "true",
    "null",
    "~",
    "0x10",
    "0o7",
    "1_000",
    "08",
    "2001-12-14",
    "p99 ttft_ms < 700",
    "p99 ttft_ms < inf",
    "p99.9 e2e_ms <= 1e308",
    "http://127.0.0.1:9",
    "http://[::1",
    "localhost:47999",
    "ftp://127.0.0.1:9",
    "http://127.0.0.1:99999",
    "chat",
    "completions",
    "triton_generate",
    "token_ids",
    "poisson",
    "gamma",
    "httpx",
    "aiohttp",
    "OPENAI_API_KEY",
    "sk-0123456789",
    "%(x)s",
    "{x}",
    "'",
    '"',
    "\\",
    "*a",
    "&a",
    "!!binary",
    "- a",
    "a: b",
)
control_text = st.text(
    alphabet="\r\n\t\x00\x01\x0b\x0c\x1b\x7f\x85\u2028\u2029 ab:-#&*!|>'\"%@`", max_size=24
)
non_latin1_text = st.text(
    alphabet=st.characters(min_codepoint=0x100, exclude_categories=("Cs",)), min_size=1, max_size=16
)
long_text = st.builds(
    lambda ch, n: ch * n,
    st.characters(exclude_categories=("Cs",)),
    st.integers(min_value=256, max_value=4_000),
)
strings = st.one_of(
    st.sampled_from(SPECIAL_STRINGS), st.text(max_size=24), control_text, non_latin1_text, long_text
)
numbers = st.one_of(
    st.sampled_from(SPECIAL_NUMBERS),
    st.integers(),
    st.integers(min_value=-(2**100), max_value=2**100),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, strings)
keys = st.one_of(
    st.sampled_from(KNOWN_KEYS),
    st.text(max_size=12),
    control_text,
    non_latin1_text,
    st.integers(min_value=-3, max_value=3),
    st.booleans(),
    st.none(),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)),
    max_leaves=12,
)
# Raw YAML fragments PyYAML treats specially: tags, anchors, merge keys, block scalars, odd
# scalars. Joined with random text, they reach the loader's corners a dumped document never does.
YAML_FRAGMENTS = (
    "&a [1, 2]",
    "*a",
    "*nope",
    "<<: *a",
    "!!python/object:os.system {}",
    "!!binary aGVsbG8=",
    "!!set {a, b}",
    "!!timestamp 2001-12-14",
    "!!omap [a: 1]",
    "!!float nan",
    "!!int 0x1F",
    "? [a, b]\n: 1",
    "? {a: 1}\n: 2",
    "|\n  block\n",
    ">-\n  folded\n",
    "{a: 1, a: 2}",
    "[",
    "]",
    "{",
    "}",
    "\t",
    "---\n",
    "...\n",
    "%YAML 1.1\n---\n",
    "key: &x {b: *x}",
    ": :",
    "- - -",
    "'unterminated",
    '"\\x00\\uD800"',
    "0o777",
    ".NaN",
    "-.inf",
    "1e+400",
    "2**80",
    "~",
    "null",
    "= 1",
    "!<tag:yaml.org,2002:str> x",
    "!local x",
    "&a\n",
    "[*a, *a, *a]",
    # Explicit tags on values their constructors cannot take, and integers past Python's
    # 4300-digit conversion limit: PyYAML raises plain ValueError/AttributeError/... for these.
    "!!timestamp x",
    "!!timestamp 2001-13-45",
    "!!int abc",
    "!!int 0x",
    "!!float abc",
    "!!float ''",
    "!!bool maybe",
    "!!map [a]",
    "!!int",
    "9" * 5000,
    "0x" + "f" * 5000,
)
raw_yaml = st.lists(
    st.one_of(
        st.sampled_from(YAML_FRAGMENTS),
        st.text(max_size=16),
        st.sampled_from([f"{s}:" for s in ("target", "workload", "load", "sla", "labels", "sim", "output")]),
    ),
    min_size=1,
    max_size=12,
).map(lambda parts: " ".join(parts))


@st.composite
def mutated_profiles(draw: st.DrawFn) -> Any:
    """The valid BASE with 1-4 fields replaced (a section, a field, or a key of an open section)
    by random values, or now and then a random document with no BASE at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(values)
    data = _copy(BASE)
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            path = draw(st.sampled_from(FIELDS)).split(".")
        else:
            path = [*draw(st.sampled_from(OPEN_SECTIONS)).split("."), draw(keys)]
        _put(data, path, draw(values))
    return data


def _copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_copy(v) for v in data]
    return data


def _put(data: dict, path: list, value: Any) -> None:
    node = data
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[path[-1]] = value


@st.composite
def profile_bytes(draw: st.DrawFn) -> bytes:
    """A profile file's bytes: a mutated profile dumped as YAML in some encoding, damaged bytes,
    raw YAML fragments, or random bytes."""
    how = draw(
        st.sampled_from(
            (
                "utf-8",
                "utf-8",
                "utf-8",
                "utf-8-sig",
                "utf-16",
                "utf-16-le",
                "utf-32",
                "latin-1",
                "damaged",
                "raw-yaml",
                "bytes",
            )
        )
    )
    if how == "bytes":
        return draw(st.binary(max_size=512))
    if how == "raw-yaml":
        return draw(raw_yaml).encode("utf-8")
    text = yaml.safe_dump(
        draw(mutated_profiles()),
        allow_unicode=draw(st.booleans()),
        default_flow_style=draw(st.sampled_from([None, True, False])),
    )
    if how == "damaged":
        raw = bytearray(text.encode("utf-8"))
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(raw)))
            cut = draw(st.integers(0, 8))
            raw[at : at + cut] = draw(st.binary(max_size=8))
        return bytes(raw)
    if how == "latin-1":  # a non-UTF-8 file: accents as single bytes
        return ("name: café ñ\n" + text).encode("latin-1", errors="replace")
    return text.encode(how)


set_keys = st.one_of(
    st.sampled_from(FIELDS),
    st.sampled_from(OPEN_SECTIONS).map(lambda s: s + ".k"),
    st.text(max_size=20),
    control_text,
    st.lists(st.sampled_from(KNOWN_KEYS), min_size=1, max_size=4).map(".".join),
    st.sampled_from(("", ".", "..", "a..b", ".load", "load.", " load.rate ", "=")),
)
set_values = st.one_of(strings, numbers.map(str), st.sampled_from(YAML_FRAGMENTS), raw_yaml)
set_strings = st.one_of(st.builds(lambda k, v: f"{k}={v}", set_keys, set_values), st.text(max_size=30))


# ----------------------------------------------------------------------------- checks
def _is_one_line(text: str) -> bool:
    return len(text.splitlines()) == 1


def assert_clean_config_error(err: ConfigError) -> None:
    """The contract of ConfigError: a non-empty message; each problem one line, naming where
    (``field.path: ...``, ``line 3, column 1: ...``, the file) and what is wrong."""
    text = str(err)
    assert text.strip(), "ConfigError with an empty message"
    assert err.problems, f"ConfigError without problems: {text!r}"
    for problem in err.problems:
        assert isinstance(problem, str) and problem.strip(), f"empty problem in {text!r}"
        assert _is_one_line(problem), f"a problem spans several lines: {problem!r}"
        where, sep, what = problem.partition(": ")
        assert (sep and where.strip() and what.strip()) or _says_what(problem), (
            f"a problem that names no field and says nothing: {problem!r}"
        )


def _says_what(problem: str) -> bool:
    # Problems about the file as a whole have no field to name; they say what is wrong with it.
    return any(w in problem for w in ("YAML", "UTF", "top level", "file", "nested", "mapping"))


_TOOK: list[tuple[float, str]] = []  # this test's inputs: (seconds, what)


@pytest.fixture(autouse=True)
def _slowest_input_margin() -> Iterator[None]:
    """After each test, its slowest input against BOUND_S (``-rA`` shows the line)."""
    _TOOK.clear()
    yield
    if _TOOK:
        took, what = max(_TOOK)
        print(margin(took, BOUND_S, f"slowest input ({what[:80]}) answered after", unit="s"))


@contextlib.contextmanager
def _within(seconds: float, what: str) -> Iterator[None]:
    t0 = time.monotonic()
    yield
    took = time.monotonic() - t0
    _TOOK.append((took, what))
    assert took < seconds, margin(took, seconds, f"{what} answered after", unit="s")


def _load(raw: bytes, sets: list[str] = ()) -> Profile | None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "profile.yaml"
        path.write_bytes(raw)
        with _within(BOUND_S, "load_profile"):
            try:
                return load_profile(path, sets=sets)
            except ConfigError as err:
                assert_clean_config_error(err)
                return None


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``loadgen run ARGS`` in-process: (exit code, stdout, stderr). An argparse refusal (a flag
    value of the wrong type) exits 2 through SystemExit, as ``python -m loadgen`` would."""
    capsys.readouterr()
    with _within(BOUND_S, f"loadgen run {' '.join(a[:40] for a in args)[:300]}"):
        try:
            code = main(["run", *args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except Exception as exc:  # noqa: BLE001 - `python -m loadgen` would print a traceback
            out, err = capsys.readouterr()
            pytest.fail(
                f"loadgen run raised {type(exc).__name__}: {str(exc)[:500]} (a traceback at "
                f"the command line)\nargs: {[a[:80] for a in args]}\n{err[-1000:]}"
            )
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, f"a traceback:\n{err[-3000:]}"
    return code, out, err


# ----------------------------------------------------------------------------- generated cases
@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    phases=PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(raw=profile_bytes(), sets=st.lists(set_strings, max_size=2))
def test_fuzzed_profiles_raise_only_config_error(raw, sets):
    """200 mutated profile files (random values in every section, several encodings, damaged
    and random bytes) and random --set strings: load_profile returns a Profile or raises a clean
    ConfigError, nothing else."""
    _load(raw, sets)


@settings(max_examples=100, deadline=None, derandomize=True, database=None, phases=PHASES)
@given(sets=st.lists(set_strings, min_size=1, max_size=4))
def test_fuzzed_set_strings_raise_only_config_error(sets):
    """100 lists of random `--set key=value` strings over a valid profile: a Profile or a clean
    ConfigError."""
    _load(yaml.safe_dump(BASE).encode(), sets)


def _flag_value(kind: str) -> st.SearchStrategy[str]:
    """A value for a flag of this type: mostly one argparse takes (so the case reaches the
    profile and the run), now and then any string (argparse's own refusal, exit 2)."""
    ints = st.one_of(
        st.sampled_from([-1, 0, 1, 2, 2**31, 2**63, 2**64, 2**80, 10**7, 10**10]),
        st.integers(min_value=-5, max_value=64),
        st.integers(),
    ).map(str)
    floats = st.one_of(
        st.sampled_from(["inf", "-inf", "nan", "1e308", "1e-308", "0", "-0.0", "1e400", "0.5", "4", "1e9"]),
        st.floats(min_value=-5, max_value=64).map(repr),
        st.floats().map(repr),
    )
    typed = {"int": ints, "float": floats, "str": strings}[kind]
    return st.integers(0, 9).flatmap(lambda i: strings if i == 0 else typed)


FLAGS = {
    "--concurrency": "int",
    "--rate": "float",
    "--num-requests": "int",
    "--duration": "float",
    "--seed": "int",
    "--input-tokens": "int",
    "--output-tokens": "int",
    "--batch-size": "int",
    "--timeout": "float",
    "--warmup": "int",
    "--max-concurrency": "int",
    "--burstiness": "float",
    "--name": "str",
    "--run-id": "str",
    "--model": "str",
    "--label": "str",
    "--set": "str",
}


@st.composite
def url_values(draw: st.DrawFn) -> str:
    """Odd URLs that can only ever reach loopback: broken ports, schemes, IPv6 brackets,
    credentials and paths, around 127.0.0.1."""
    scheme = draw(
        st.sampled_from(["http://", "https://", "", "ftp://", "HTTP://", "ws://", "http:/", "http:///"])
    )
    user = draw(st.sampled_from(["", "user:pw@", ":@", "u@"]))
    host = draw(st.sampled_from(["127.0.0.1", "[::1", "[::1]", "127.0.0.1]", "[127.0.0.1]"]))
    port = draw(st.sampled_from([":9", ":99999", ":0", ":-1", ":", ":x9", ":65536", ":9:9"]))
    path = draw(st.sampled_from(["", "/", "/v1", "/\u00e9", "/a b", "/\r\n", "?q=1", "#f"]))
    return scheme + user + host + port + path


@st.composite
def cli_args(draw: st.DrawFn) -> list[str]:
    args: list[str] = []
    for flag in draw(st.lists(st.sampled_from(sorted(FLAGS)), max_size=3)):
        value = draw(_flag_value(FLAGS[flag]))
        if flag == "--set":
            value = draw(set_strings)
        elif flag == "--label":
            value = draw(st.builds(lambda k, v: f"{k}={v}", strings, strings) | strings)
        args.append(f"{flag}={value}")  # `--flag=VALUE`: a value starting with '-' stays a value
    if not args or draw(st.booleans()):
        args.append(f"--url={draw(url_values())}")
    return args


@pytest.mark.timeout(600)
@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    phases=PHASES,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(args=cli_args())
def test_fuzzed_cli_values_exit_2_without_traceback(capsys, args):
    """120 command lines with random flag values (huge and negative numbers, inf and nan,
    unicode, control characters, long strings, odd URLs, random --set and --label): `loadgen
    run` against a refused port exits 2 with a `loadgen:` or `usage:` message and no traceback,
    within 10 s each."""
    with tempfile.TemporaryDirectory() as d:
        profile = Path(d) / "profile.yaml"
        profile.write_text(yaml.safe_dump(BASE))
        out = Path(d) / "reports"
        cwd = os.getcwd()
        os.chdir(d)  # anything a fuzzed value makes relative to the working folder stays in here
        try:
            code, _, err = run_cli(
                capsys,
                str(profile),
                "--url",
                REFUSED,
                *args,
                "--no-progress",
                "--no-report",
                "--out",
                str(out),
            )
        finally:
            os.chdir(cwd)
    assert code == 2, f"exit {code} for {args!r}: {err[-2000:]}"
    assert err.startswith(("loadgen: error:", "usage: loadgen")), f"unexpected stderr: {err[-2000:]!r}"


# ----------------------------------------------------------------------------- named cases
MINIMAL = {
    "workload": {"num_requests": 4, "input_tokens": 8, "output_tokens": 4},
    "load": {"concurrency": 2},
    "server_metrics": {"enabled": False},
}


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """``cli(*flags, profile=...)``: `loadgen run` against the refused port, in tmp_path, with
    --no-progress --no-report --out tmp_path/reports. ``profile`` is a mapping (dumped as YAML),
    text, bytes, or None for the minimal valid profile."""
    monkeypatch.chdir(tmp_path)

    def run(*flags: str, profile: Any = None, out: str | None = None) -> tuple[int, str]:
        path = tmp_path / "profile.yaml"
        if profile is None:
            profile = MINIMAL
        if isinstance(profile, dict):
            profile = yaml.safe_dump(profile, allow_unicode=True)
        if isinstance(profile, str):
            profile = profile.encode("utf-8")
        path.write_bytes(profile)
        code, o, e = run_cli(
            capsys,
            str(path),
            "--url",
            REFUSED,
            *flags,
            "--no-progress",
            "--no-report",
            "--out",
            out or str(tmp_path / "reports"),
        )
        return code, (o + e).replace(str(tmp_path), "<tmp>")  # only the message may name a field

    return run


def refused(code: int, output: str, *fields: str) -> str:
    """Exit 2, one `loadgen: error:` message naming one of ``fields``; returns the message."""
    assert code == 2, f"exit {code}, expected 2:\n{output[-3000:]}"
    assert output.count("loadgen: error:") == 1, f"not one clean error message:\n{output[-3000:]}"
    assert any(f in output for f in fields), f"the message names none of {fields}:\n{output[-3000:]}"
    return output


def unreachable(code: int, output: str) -> None:
    """The profile was accepted: the run got as far as the refused port (exit 2)."""
    assert code == 2, output
    assert "127.0.0.1:9" in output and "loadgen: error:" in output, output


def _with(path: str, value: Any, base: dict | None = None) -> dict:
    data = _copy(base or MINIMAL)
    _put(data, path.split("."), value)
    return data


def bomb(indent: str, levels: int = 9) -> str:
    """A "billion laughs" mapping (10**levels strings from a few hundred bytes), as the block
    lines of a section indented by ``indent``; its last key holds the whole expansion."""
    lines = [f'{indent}l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"{indent}l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 10) + "]")
    lines.append(f"{indent}all: *l{levels - 1}")
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(20)
def test_non_utf8_profile_is_refused_as_not_utf8(cli):
    code, out = cli(profile="name: café\n".encode("latin-1") + yaml.safe_dump(MINIMAL).encode())
    refused(code, out, "UTF-8")


@pytest.mark.timeout(20)
def test_utf16_profile_with_bom_is_read(cli, tmp_path):
    raw = ("name: café €\n" + yaml.safe_dump(MINIMAL)).encode("utf-16")
    path = tmp_path / "u16.yaml"
    path.write_bytes(raw)
    assert load_profile(path).name == "café €"
    unreachable(*cli(profile=raw))


@pytest.mark.timeout(20)
def test_list_as_a_key_is_refused(cli):
    code, out = cli(profile="labels: {[a, b]: 1}\n" + yaml.safe_dump(MINIMAL))
    refused(code, out, "key")
    assert "line 1" in out, out


@pytest.mark.timeout(20)
def test_nesting_10000_deep_is_refused_quickly(cli):
    deep = "labels: " + "[" * 10_000 + "]" * 10_000 + "\n"
    code, out = cli(profile=yaml.safe_dump(MINIMAL) + deep)
    refused(code, out, "nested", "deep")


@pytest.mark.timeout(20)
def test_negative_seed_is_refused(cli):
    refused(*cli("--seed", "-1"), "workload.seed", "--seed")


@pytest.mark.timeout(20)
def test_seed_2_pow_80_is_refused(cli):
    # numpy takes it; the summary's JSON (64-bit integers) cannot hold it: refused up front.
    refused(*cli("--seed", str(2**80)), "workload.seed", "--seed")


@pytest.mark.timeout(20)
def test_non_latin1_header_value_is_refused(cli):
    refused(*cli(profile=_with("target.headers", {"X-Name": "café €"})), "target.headers")


@pytest.mark.timeout(20)
def test_header_value_with_crlf_is_refused(cli):
    code, out = cli(profile=_with("target.headers", {"X-Evil": "a\r\nInjected: 1"}))
    refused(code, out, "target.headers")


@pytest.mark.timeout(20)
def test_header_name_with_crlf_is_refused(cli):
    code, out = cli(profile=_with("target.headers", {"X-Evil\r\nInjected": "1"}))
    refused(code, out, "target.headers")


@pytest.mark.timeout(20)
def test_header_crlf_through_set_is_refused(cli):
    refused(*cli("--set", "target.headers.X-Evil=a\r\nInjected: 1"), "target.headers")


@pytest.mark.timeout(20)
def test_input_tokens_1e9_is_refused(cli):
    refused(*cli("--input-tokens", "1000000000"), "workload.input_tokens")


@pytest.mark.timeout(20)
def test_open_loop_num_requests_1e10_is_refused(cli):
    # An open loop computes its send times up front: 1e10 of them is 75 GiB of float64.
    refused(*cli("--rate", "5", "--num-requests", str(10**10)), "workload.num_requests", "--num-requests")


@pytest.mark.timeout(20)
def test_open_loop_num_requests_1e10_in_profile_is_refused(cli):
    profile = _with("load", {"rate": 5.0}, _with("workload.num_requests", 10**10))
    refused(*cli(profile=profile), "workload.num_requests")


@pytest.mark.timeout(20)
def test_duration_inf_is_refused(cli):
    code, out = cli("--duration", "inf")  # argparse refuses it, naming the flag and the forms
    assert code == 2 and out.count("error: argument --duration: not a duration: 'inf' (e.g. 30s") == 1


@pytest.mark.timeout(20)
def test_url_with_port_99999_is_refused(cli):
    refused(*cli("--url", "http://127.0.0.1:99999"), "target.url", "--url")


@pytest.mark.timeout(20)
def test_bad_ipv6_url_is_refused(cli):
    refused(*cli("--url", "http://[::1"), "target.url", "--url")


@pytest.mark.timeout(20)
def test_url_without_scheme_is_refused_naming_the_fix(cli):
    out = refused(*cli("--url", "localhost:47999"), "target.url", "--url")
    assert "http://localhost:47999" in out, f"the message does not show the fix:\n{out}"


@pytest.mark.timeout(20)
def test_ftp_url_is_refused(cli):
    # ftp://127.0.0.1:9 rather than ftp://x: a client that does not refuse it would resolve x.
    out = refused(*cli("--url", "ftp://127.0.0.1:9"), "target.url", "--url")
    assert "ftp" in out and "http" in out, out


@pytest.mark.timeout(20)
def test_out_under_a_regular_file_is_refused(cli, tmp_path):
    (tmp_path / "afile").write_text("x")
    refused(*cli(out=str(tmp_path / "afile" / "reports")), "output.dir", "--out")


@pytest.mark.timeout(20)
def test_out_under_proc_is_refused(cli):
    refused(*cli(out="/proc/foo"), "output.dir", "--out")


@pytest.mark.timeout(20)
@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod 0o555")
def test_read_only_out_folder_is_refused(cli, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        refused(*cli(out=str(ro / "reports")), "output.dir", "--out")
    finally:
        ro.chmod(0o755)


@pytest.mark.timeout(20)
def test_5000_character_name_is_refused_or_shortened(cli, tmp_path):
    code, out = cli("--name", "n" * 5000)
    if "127.0.0.1:9" in out:  # accepted: the run id made from it must still be a usable folder name
        unreachable(code, out)
        assert all(len(p.name.encode()) <= 255 for p in (tmp_path / "reports").iterdir())
    else:
        refused(code, out, "name")


@pytest.mark.timeout(20)
def test_reusing_an_existing_run_id_is_refused(cli):
    unreachable(*cli("--run-id", "same"))
    out = refused(*cli("--run-id", "same"), "output.run_id", "--run-id")
    assert "FileExistsError" not in out and "exist" in out, out


@pytest.mark.timeout(20)
def test_run_id_escaping_the_out_folder_is_refused_saying_why(cli):
    out = refused(*cli("--run-id", "../escape"), "output.run_id", "--run-id")
    assert "expected a string" not in out, out
    assert any(w in out for w in ("folder", "directory", "path", "separator", "letter", "character")), out


@pytest.mark.timeout(20)
@pytest.mark.parametrize("where", ["labels", "sim", "target.extra_body"])
def test_alias_bomb_is_refused(cli, where):
    section = where.split(".")[-1]
    body = {
        "labels": "labels:\n" + bomb("  "),
        "sim": "sim:\n" + bomb("  "),
        "extra_body": "target:\n  extra_body:\n" + bomb("    "),
    }[section]
    code, out = cli(profile=yaml.safe_dump(MINIMAL) + body)
    refused(code, out, section, "line ")
    assert any(w in out for w in ("alias", "expand")), out


@pytest.mark.timeout(20)
def test_concurrency_1e7_is_refused_above_the_open_file_limit(cli):
    out = refused(*cli("--concurrency", str(10**7)), "load.concurrency", "--concurrency")
    assert any(w in out for w in ("open file", "file limit", "open-file", "ulimit", "RLIMIT_NOFILE")), out


@pytest.mark.timeout(20)
def test_concurrency_true_is_refused_not_run_as_1(cli):
    refused(*cli(profile=_with("load.concurrency", True)), "load.concurrency")


@pytest.mark.timeout(20)
def test_lognormal_mean_1e300_is_refused(cli):
    dist = {"kind": "lognormal", "mean": 1e300, "sigma": 1.0}
    refused(*cli(profile=_with("workload.input_tokens", dist)), "workload.input_tokens")


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    "value",
    [
        "!!timestamp not-a-date",
        "!!timestamp 2001-13-45",
        "!!int abc",
        "!!int 0x",
        "!!float abc",
        "!!float ''",
        "!!bool maybe",
        "!!map [a]",
        "!!int",
    ],
)
def test_yaml_tag_with_a_bad_value_is_refused(cli, value):
    # PyYAML's constructors raise ValueError, AttributeError, KeyError, TypeError, IndexError here.
    code, out = cli(profile=f"labels:\n  gpu: {value}\n" + yaml.safe_dump(MINIMAL))
    refused(code, out, "line 2", "labels.gpu")


@pytest.mark.timeout(20)
def test_impossible_date_in_a_profile_is_refused(cli):
    # YAML reads an unquoted 2024-02-30 as a date; PyYAML's constructor raises ValueError.
    refused(*cli(profile="name: 2024-02-30\n" + yaml.safe_dump(MINIMAL)), "name", "line 1")


@pytest.mark.timeout(20)
def test_impossible_date_through_set_is_text_or_refused(cli):
    # A --set value YAML cannot read is taken as text (parse_set): "2024-13-01" is then a valid
    # run id and the run gets as far as the refused port; refusing it naming the field is fine too.
    code, out = cli("--set", "output.run_id=2024-13-01")
    if "127.0.0.1:9" in out:
        unreachable(code, out)
    else:
        refused(code, out, "output.run_id", "--set")


@pytest.mark.timeout(20)
def test_5000_digit_integer_in_a_profile_is_refused(cli):
    # Past Python's 4300-digit limit int() raises ValueError.
    refused(
        *cli(profile=f"workload:\n  seed: {'9' * 5000}\n  num_requests: 4\nload: {{concurrency: 2}}\n"),
        "workload.seed",
        "line 2",
    )


@pytest.mark.timeout(20)
def test_5000_digit_integer_through_set_is_refused(cli):
    refused(*cli("--set", f"workload.seed={'9' * 5000}"), "workload.seed")


@pytest.mark.timeout(20)
@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32"])
def test_utf16_without_bom_or_utf32_is_read_or_refused_in_one_line(cli, encoding):
    """Either the text is decoded (the run gets as far as the refused port) or the file is refused
    in one line that says what encoding to use, not with the YAML reader's two-line NUL error."""
    code, out = cli(profile=yaml.safe_dump(MINIMAL).encode(encoding))
    if "127.0.0.1:9" in out:
        unreachable(code, out)
    else:
        refused(code, out, "UTF-8", "UTF-16", "encoding")
        assert len(out.strip().splitlines()) == 2, f"the problem spans several lines:\n{out}"


@pytest.mark.timeout(20)
def test_control_characters_in_an_unknown_key_stay_on_one_line(cli):
    """A key with CR, LF or an escape sequence is named escaped: the console shows one problem
    line, and no raw control character reaches the terminal."""
    code, out = cli(profile=_with("target.x\r\ny\x1b[2J", 1))
    refused(code, out, "target.")
    assert len(out.strip().splitlines()) == 2, f"the problem spans several lines:\n{out!r}"
    assert "\x1b" not in out and "\r" not in out, repr(out)


@pytest.mark.timeout(20)
def test_control_characters_in_a_set_key_stay_on_one_line(cli):
    code, out = cli("--set", "a\nb\u2028c=1")
    refused(code, out, "a\\nb", "--set")
    assert len(out.strip().splitlines()) == 2, f"the problem spans several lines:\n{out!r}"


def test_base_profile_validates():
    """The fuzzing starts from a valid profile (or its mutations would only test the first check)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "p.yaml"
        path.write_text(yaml.safe_dump(BASE))
        assert load_profile(path).load.concurrency == 2
