"""Custom request bodies (target.template, target.payloads) against the scripted server, whose
log keeps each body's bytes as received: the bytes sent are the template's, rendered per
request, or the recorded lines, in order; a template that cannot work fails the profile."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from loadgen.cli.main import main
from loadgen.config import load_profile
from loadgen.errors import ConfigError
from loadgen.testing import StreamServer
from loadgen.workload import Workload

from helpers import profile, run

TEMPLATE = """{"model": {{ model|tojson }},
 "messages": {{ messages|tojson }},
 "max_tokens": {{ max_tokens }},
 "stream": true, "stream_options": {"include_usage": true},
 "user": "req-{{ id }}-{{ input_tokens }}",
 "session": {{ session|tojson }}}"""


@pytest.fixture(scope="module")
def logged():
    """The scripted server, fast, logging every body's bytes."""
    with StreamServer(ttft_ms=1, itl_ms=1, log_bodies=True) as s:
        yield s


def _js(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _bodies(server: StreamServer) -> list[bytes]:
    """The bodies the server received, in the order it received them."""
    entries = sorted(server.log().values(), key=lambda e: e["recv_ns"])
    return [base64.b64decode(e["body_b64"]) for e in entries]


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_templated_body_reaches_the_server_byte_for_byte(logged, tmp_path):
    """Each request's body on the wire is the template rendered for its spec: the bytes the
    test builds from the same spec by hand, and the answers are read as chat answers."""
    logged.clear_log()
    _write(tmp_path, "body.j2", TEMPLATE)
    prof = profile(tmp_path, logged.url, target__template_file=str(tmp_path / "body.j2"))
    res = run(prof)
    work = Workload(prof.workload, "chat", "text", None)
    log = logged.log()
    assert len(res.records) == 8 and all(r.ok for r in res.records)
    for rec in res.records:
        spec = work.request(rec.id)
        expected = (
            f'{{"model": "test-model",\n "messages": {_js(spec.messages)},\n '
            f'"max_tokens": {spec.output_tokens},\n '
            '"stream": true, "stream_options": {"include_usage": true},\n '
            f'"user": "req-{rec.id}-{spec.prompt_tokens}",\n '
            '"session": {"id":null,"turn":null,"messages":null}}'
        )
        assert base64.b64decode(log[rec.response_id]["body_b64"]) == expected.encode()
        assert rec.output_tokens == spec.output_tokens  # the usage the body asked for came back


def test_a_template_that_does_not_render_names_its_line_and_exits_2(tmp_path, capsys):
    """An undefined name on line 3 of the template file: the run stops before any request, exit
    2, one line naming the file and the line (the profile's relative path resolved beside it)."""
    _write(tmp_path, "body.j2", '{"model": {{ model|tojson }},\n "stream": true,\n "x": {{ temprature }}}')
    prof = _write(
        tmp_path,
        "p.yaml",
        "target: {url: 'http://127.0.0.1:9', template_file: body.j2}\n"
        "workload: {num_requests: 1}\nload: {concurrency: 1}\n",
    )
    assert main(["run", str(prof)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'body.j2'}, line 3: the template does not render ('temprature' is undefined)" in err
    assert "Traceback" not in err


def test_a_template_syntax_error_names_its_line(tmp_path):
    """A template that does not compile is refused when the profile loads, with its line."""
    where = r"target\.template: target\.template, line 2"
    with pytest.raises(ConfigError, match=where + ": the template does not compile"):
        load_profile(None, overrides={"target.template": '{"stream": true,\n {% if %}}'})


def test_a_template_that_renders_invalid_json_is_named(tmp_path):
    """A value written without |tojson renders a bare word: not JSON, refused at load."""
    with pytest.raises(ConfigError, match=r"target\.template \(rendered\): not JSON .*use \|tojson"):
        load_profile(None, overrides={"target.template": '{"model": {{ model }}, "stream": true}'})


def test_a_streamed_endpoint_needs_stream_true_in_the_body():
    """The chat adapter streams by "stream": true; a body without it is refused at load."""
    with pytest.raises(ConfigError, match=r'no "stream": true'):
        load_profile(None, overrides={"target.template": '{"model": {{ model|tojson }}}'})


def test_recorded_bodies_are_sent_exactly_in_order_cycling(logged, tmp_path):
    """Three recorded bodies, five requests one at a time: the server receives lines 1, 2, 3,
    1, 2, each byte for byte as recorded (key order and spacing kept)."""
    logged.clear_log()
    lines = [
        '{"model": "test-model", "stream": true, "x": 1, '
        '"messages": [{"role": "user", "content": "a"}], "max_tokens": 2}',
        '{"stream":true,"model":"test-model","messages":[{"role":"user","content":"b é"}],"max_tokens":3}',
        '{ "messages": [{"role": "user", "content": "c"}], "stream": true, "max_tokens": 1 }',
    ]
    path = _write(tmp_path, "bodies.jsonl", "\n".join(lines) + "\n")
    prof = profile(
        tmp_path,
        logged.url,
        target__payloads=str(path),
        target__preflight=False,
        workload__num_requests=5,
        load__concurrency=1,
    )
    res = run(prof)
    assert all(r.ok for r in res.records)
    assert _bodies(logged) == [lines[i].encode() for i in (0, 1, 2, 0, 1)]


def test_a_recorded_body_that_is_not_json_names_its_line(tmp_path):
    """Line 2 of the file is not JSON: refused at load, naming the file and the line."""
    path = _write(tmp_path, "bodies.jsonl", '{"stream": true}\n{"stream": true,\n')
    with pytest.raises(ConfigError, match=rf"{path}, line 2: not JSON"):
        load_profile(None, overrides={"target.payloads": str(path)})


def test_a_request_the_template_fails_on_mid_run_fails_alone(logged, tmp_path):
    """A branch only later requests take names an undefined variable: the first request (the
    one checked before the load) is sent, each later one fails alone as a client error naming
    the line, and the server never sees those."""
    logged.clear_log()
    source = TEMPLATE.replace('"user"', '{% if id > 0 %}"x": {{ nope }},{% endif %}\n "user"')
    prof = profile(
        tmp_path, logged.url, target__template=source, workload__num_requests=3, load__concurrency=1
    )
    res = run(prof)
    by_id = {r.id: r for r in res.records}
    assert by_id[0].ok and [by_id[i].error_class for i in (1, 2)] == ["client", "client"]
    assert "target.template, line 5: the template does not render ('nope' is undefined)" in str(
        by_id[1].error_message
    )
    assert len(_bodies(logged)) == 2  # the preflight's and request 0's


def test_tojson_writes_compact_json_not_html_escapes():
    """|tojson keeps <, >, & and ' as they are (Jinja's own filter escapes them for HTML) and
    writes no spaces: the bytes a JSON encoder would."""
    from loadgen.backends.bodies import BodyTemplate
    from loadgen.records import RequestSpec

    spec = RequestSpec(id=7, prompt="<a & 'b'> é", messages=None, prompt_tokens=3, output_tokens=2)
    body = BodyTemplate('{"p": {{ prompt|tojson }}, "n": {{ max_tokens }}}', "t").render(spec, "m")
    assert body == '{"p": "<a & \'b\'> é", "n": 2}'.encode()


def test_a_session_turn_sees_its_conversation(logged, tmp_path):
    """Multi-turn: each turn's body carries its session's id, its turn and the messages so far
    (the history the answers grew, then the new user message), as the record names them."""
    logged.clear_log()
    prof = profile(
        tmp_path,
        logged.url,
        target__template=TEMPLATE,
        workload__sessions={"turns": 3, "think_time_s": 0},
        workload__num_requests=6,
        load__concurrency=1,
    )
    res = run(prof)
    log = logged.log()
    seen = []
    for rec in sorted(res.records, key=lambda r: r.id):
        body = json.loads(base64.b64decode(log[rec.response_id]["body_b64"]))
        assert body["session"] == {"id": rec.session_id, "turn": rec.turn, "messages": body["messages"]}
        seen.append((rec.turn, len(body["messages"])))
    assert sorted(seen) == [(1, 1), (1, 1), (2, 3), (2, 3), (3, 5), (3, 5)]
