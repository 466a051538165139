"""Secrets never reach a file of the run folder or the console, even when the server echoes them.

loadgen sends credentials three ways: an API key from the environment variable the profile
names (``Authorization: Bearer KEY``), ``user:password@`` in the URL (``Authorization: Basic
B64``), and profile headers marked secret (``target.secret_headers``). A hostile or careless
server echoes what it was sent: in a 401's JSON error body, in response headers (``server``,
``x-request-id``), in every event's ``id`` (which loadgen records as the response id), in its
``/v1/models`` listing and ``/version``. Whatever it echoes, the key, the password, the base64 of
``user:password`` and the marked header's value appear in no file of the run folder (records,
summary, report, CSV, Parquet, plots) and in nothing loadgen prints.

The echoing server is a few lines of aiohttp in a thread of this process (the scripted
StreamServer's 401 body does not echo the request's headers); the mode is the URL's first path
segment, so one server serves every case.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgen.cli.main import main

KEY = "sk-loadgen-test-Zq7WmKx93LpA"
KEY_ENV = "LOADGEN_SECRET_TEST_KEY"
PASSWORD = "hunter2pw"
BASIC = base64.b64encode(f"user:{PASSWORD}".encode()).decode()  # dXNlcjpodW50ZXIycHc=
TENANT = "tenant-s3cr3t-Vq81xx"  # the value of a header the profile marks secret
# What must never appear. The base64 without its padding, so a copy with or without '=' is found.
SECRETS = {
    "api key": KEY,
    "password": PASSWORD,
    "base64 of user:password": BASIC.rstrip("="),
    "secret header value": TENANT,
}
ECHOED = ("Authorization", "X-Tenant", "x-api-key")


def _echo(request: Any) -> str:
    return " | ".join(request.headers.get(h, "") for h in ECHOED)


def _sse(data: dict) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


async def _handle(request: Any) -> Any:
    from aiohttp import web

    mode, _, tail = request.match_info["tail"].partition("/")
    echo = _echo(request)
    headers = {"server": f"echo-server/1.0 ({echo})", "x-request-id": echo}
    denied = {
        "error": {
            "message": f"invalid credentials: {echo}",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
            "sent": echo,
        }
    }
    if mode == "deny_all" or (mode == "deny" and tail.endswith(("completions", "messages"))):
        return web.json_response(
            denied,
            status=401,
            headers={
                **headers,
                "WWW-Authenticate": f'Bearer error="invalid_token", error_description="{echo}"',
            },
        )
    if tail == "v1/models":
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": "echo-model", "object": "model", "owned_by": echo, "max_model_len": 4096}],
            },
            headers=headers,
        )
    if tail == "version":
        return web.json_response({"version": "1.0", "build": echo}, headers=headers)
    if mode == "stream" and tail.endswith("v1/messages"):
        return await _messages_stream(request, headers, echo)
    if mode == "stream" and tail.endswith("completions"):
        body = await request.json()
        chat = tail.endswith("chat/completions")
        n = int(body.get("max_tokens") or 4)
        resp = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream"})
        await resp.prepare(request)
        base = {
            "id": echo,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": 0,
            "model": "echo-model",
            "system_fingerprint": echo,
        }
        for i in range(n):
            choice = {"index": 0, "delta": {"content": f" w{i}"}} if chat else {"index": 0, "text": f" w{i}"}
            await resp.write(_sse({**base, "choices": [{**choice, "finish_reason": None}]}))
        await resp.write(
            _sse({**base, "choices": [{"index": 0, "delta": {}, "text": "", "finish_reason": "length"}]})
        )
        await resp.write(
            _sse(
                {
                    **base,
                    "choices": [],
                    "usage": {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n},
                }
            )
        )
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
    return web.json_response(
        {"error": {"message": f"no route {tail!r} for {echo}"}}, status=404, headers=headers
    )


async def _messages_stream(request: Any, headers: dict[str, str], echo: str) -> Any:
    """Anthropic's stream, the credentials echoed as the message id, the model and the text."""
    from aiohttp import web

    n = int((await request.json()).get("max_tokens") or 4)
    resp = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream"})
    await resp.prepare(request)
    start = {"id": echo, "model": echo, "usage": {"input_tokens": 8, "output_tokens": 1}}
    await resp.write(_sse({"type": "message_start", "message": start}))
    for i in range(n):
        delta = {"type": "text_delta", "text": f" w{i}"}
        await resp.write(_sse({"type": "content_block_delta", "index": 0, "delta": delta}))
    await resp.write(
        _sse({"type": "message_delta", "delta": {"stop_reason": echo}, "usage": {"output_tokens": n}})
    )
    await resp.write(_sse({"type": "message_stop"}))
    await resp.write_eof()
    return resp


@pytest.fixture(scope="module")
def echo_server() -> Iterator[str]:
    """``http://127.0.0.1:PORT``; append /stream, /deny or /deny_all for the mode."""
    from aiohttp import web

    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, Any] = {}

    async def start() -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", _handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        box["runner"] = runner
        box["port"] = runner.addresses[0][1]

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, name="echo-server", daemon=True)
    thread.start()
    assert started.wait(10), "the echo server did not start"
    try:
        yield f"http://127.0.0.1:{box['port']}"
    finally:
        asyncio.run_coroutine_threadsafe(box["runner"].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def _secret_headers_supported() -> bool:
    from loadgen.config import TargetConfig

    return "secret_headers" in TargetConfig.model_fields


def _leaks(data: bytes | str, where: str) -> list[str]:
    text = data if isinstance(data, str) else data.decode("latin-1")
    return [f"{what} in {where}" for what, secret in SECRETS.items() if secret in text]


def _file_leaks(root: Path) -> list[str]:
    """Every secret found in any file under ``root``: raw bytes, and Parquet decoded (its pages
    may be compressed, so a raw search could miss a value that is there)."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = str(path.relative_to(root))
        found += _leaks(path.read_bytes(), rel)
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            found += _leaks(json.dumps(pq.read_table(path).to_pylist(), default=str), rel + " (decoded)")
    return found


def _variant(name: str, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[str]]:
    """(URL, extra flags) for one way of sending credentials; the profile goes to tmp_path."""
    profile: dict[str, Any] = {
        "workload": {"num_requests": 6, "input_tokens": 8, "output_tokens": 4},
        "load": {"concurrency": 2},
        "output": {"progress": False},
        "labels": {"purpose": "secrets"},
    }
    flags: list[str] = []
    if name == "api_key_env":
        monkeypatch.setenv(KEY_ENV, KEY)
        flags = ["--api-key-env", KEY_ENV]
    elif name == "url_credentials":
        url = url.replace("http://", f"http://user:{PASSWORD}@", 1)
    elif name == "secret_header":
        if not _secret_headers_supported():
            pytest.skip("TargetConfig has no secret_headers field: headers cannot be marked secret")
        profile["target"] = {"headers": {"X-Tenant": TENANT}, "secret_headers": ["X-Tenant"]}
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(profile))
    return url, [str(path), *flags]


VARIANTS = ["api_key_env", "url_credentials", "secret_header"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["stream", "deny"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_echoed_secrets_reach_no_file_and_no_console(
    echo_server, tmp_path, monkeypatch, capsys, variant, mode
):
    """A run against a server that echoes the credentials (streaming them back as event ids and
    headers, or refusing every request with a 401 that quotes them, the preflight off so that
    every request meets it), then `loadgen report`: no secret in any file of the run folder, nor
    in stdout/stderr, where the server's message is shown."""
    url, args = _variant(variant, f"{echo_server}/{mode}", tmp_path, monkeypatch)
    out = tmp_path / "reports"
    flags = ["--no-preflight"] if mode == "deny" else []
    code = main(
        [
            "run",
            *args,
            *flags,
            "--url",
            url,
            "--no-progress",
            "--no-report",
            "--out",
            str(out),
            "--run-id",
            "secrets",
        ]
    )
    run_dir = out / "secrets"
    report_code = main(["report", str(run_dir)]) if (run_dir / "summary.json").exists() else None
    stdout, stderr = capsys.readouterr()
    console = stdout + stderr
    assert "Traceback" not in console, console[-3000:]
    # Every request refused: nothing was served, exit 3 (its last line says why, scrubbed too).
    assert code == (3 if mode == "deny" else 0), f"`loadgen run` exited {code}:\n{console[-3000:]}"
    assert report_code == 0, f"`loadgen report` exited {report_code}:\n{console[-3000:]}"
    records = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    assert len(records) == 6
    if mode == "deny":
        assert {r["error_class"] for r in records} == {"http_401"}, records[0]
        assert "http_401 6 (100 %): invalid credentials:" in console
        assert "fix: the server wants credentials" in console
    else:
        assert all(r["ok"] for r in records), records[0]
    assert (run_dir / "report.html").exists() and (run_dir / "requests.csv").exists()
    leaks = _file_leaks(run_dir) + _leaks(console, "the console")
    assert not leaks, "secrets written out: " + "; ".join(leaks)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("variant", VARIANTS)
def test_secrets_echoed_by_a_refused_preflight_reach_no_console(
    echo_server, tmp_path, monkeypatch, capsys, variant
):
    """/v1/models answers, the preflight completion gets the 401 that quotes the credentials:
    the run stops before the load (exit 2) with the server's reason, scrubbed, and the fix."""
    url, args = _variant(variant, f"{echo_server}/deny", tmp_path, monkeypatch)
    out = tmp_path / "reports"
    code = main(
        ["run", *args, "--url", url, "--no-progress", "--no-report", "--out", str(out), "--run-id", "s"]
    )
    stdout, stderr = capsys.readouterr()
    console = stdout + stderr
    assert "Traceback" not in console, console[-3000:]
    assert code == 2, f"exit {code}:\n{console[-3000:]}"
    assert "the server refused the preflight request (HTTP 401): invalid credentials:" in console
    assert "set target.api_key_env" in console
    assert not (out / "s" / "requests.jsonl").exists()
    leaks = (_file_leaks(out) if out.exists() else []) + _leaks(console, "the console")
    assert not leaks, "secrets written out: " + "; ".join(leaks)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("variant", VARIANTS)
def test_secrets_echoed_by_a_refusing_probe_reach_no_console(
    echo_server, tmp_path, monkeypatch, capsys, variant
):
    """The server refuses even /v1/models with a 401 that quotes the credentials: the run stops
    (exit 2) with a message that does not repeat them, and leaves no file that holds them."""
    url, args = _variant(variant, f"{echo_server}/deny_all", tmp_path, monkeypatch)
    out = tmp_path / "reports"
    code = main(
        ["run", *args, "--url", url, "--no-progress", "--no-report", "--out", str(out), "--run-id", "secrets"]
    )
    stdout, stderr = capsys.readouterr()
    console = stdout + stderr
    assert "Traceback" not in console, console[-3000:]
    assert code == 2, f"exit {code}:\n{console[-3000:]}"
    leaks = (_file_leaks(out) if out.exists() else []) + _leaks(console, "the console")
    assert not leaks, "secrets written out: " + "; ".join(leaks)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["stream", "deny"])
def test_the_messages_key_in_x_api_key_reaches_no_file(echo_server, tmp_path, monkeypatch, capsys, mode):
    """--endpoint messages sends the key as x-api-key (no bearer token); a server that echoes it
    (message id, model, stop reason, headers, a 401 body) gets it into no file and no console."""
    url, args = _variant("api_key_env", f"{echo_server}/{mode}", tmp_path, monkeypatch)
    out = tmp_path / "reports"
    code = main(
        [
            "run",
            *args,
            "--endpoint",
            "messages",
            *(["--no-preflight"] if mode == "deny" else []),
            "--url",
            url,
            "--no-progress",
            "--out",
            str(out),
            "--run-id",
            "s",
        ]
    )
    stdout, stderr = capsys.readouterr()
    console = stdout + stderr
    assert "Traceback" not in console and code == (3 if mode == "deny" else 0), console[-3000:]
    records = [json.loads(line) for line in (out / "s" / "requests.jsonl").read_text().splitlines()]
    if mode == "deny":
        assert {r["error_class"] for r in records} == {"http_401"}
    else:
        # The echo of (Authorization, X-Tenant, x-api-key): no bearer token, the key scrubbed.
        assert all(r["ok"] for r in records) and records[0]["response_id"] == " |  | ***", records[0]
    assert (out / "s" / "report.html").exists()
    leaks = _file_leaks(out) + _leaks(console, "the console")
    assert not leaks, "secrets written out: " + "; ".join(leaks)
