"""Hostile input against the API alone (``tests.service.apiserver``: the real app on 127.0.0.1, no Ray, no
engine, so no job ever runs): a seeded fuzz of every call (malformed JSON and YAML, huge and non-finite
numbers, control and format characters in names, oversized bodies, forged tokens) answered with a 4xx and
a one-line message, nothing stored, the server serving afterwards; entrypoint code never run by the
server; the token never in its logs."""

from __future__ import annotations

import http.client
import json
import logging
import random
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from hadar.cli import main
from hadar.service.api import MAX_MESSAGE_CHARS, one_line
from hadar.service.auth import RedactToken
from hadar.service.specs import MAX_BODY_BYTES
from tests.service.conftest import ApiServer, snapshot, write
from tests.service.test_entrypoints import _imported, _package

SEED = 20260101
CASES = 400
GOOD_JOB = {"job_type": "lstm", "total_steps": 10}
#: characters no name may hold, and how a YAML double-quoted string spells each
HOSTILE_CHARS = {"\0": "\\0", "\u202e": "\\u202e", "\u200b": "\\u200b", "\ufeff": "\\ufeff", "\x1b": "\\e",
                 "\u2028": "\\L", "\x7f": "\\x7f", "\n": "\\n", "\u2066": "\\u2066", "\x85": "\\N"}
#: values each numeric field must refuse, as YAML scalars
BAD_NUMBERS = {
    "total_steps": [".nan", ".inf", "-.inf", "1e309", "-5", "0", "1e300", "9" * 5000, "0x" + "f" * 4000, "1e-400",
                    "true", "[1]", "{a: 1}", "2001-01-01", "~", "''"],
    "arrival_s": [".nan", ".inf", "-1", "1e9", "9" * 5000, "[1]", "abc"],
    "priority_weight": [".nan", "0", "-1", "1e300", "1e-300", "-.inf"],
    "scale_factor": [".nan", "0", "1.5", "1e300", "9" * 5000, "-1", "99"],
    "restart_s": ["-1", ".inf", "1e300"],
    "slo": ["-.inf", "1e300", ".nan"],
    "max_failures": ["0", "1e30", "1.5", "-1"],
}


@pytest.fixture(scope="module")
def api(tmp_path_factory) -> Iterator[ApiServer]:
    s = ApiServer(tmp_path_factory.mktemp("hostile") / "state", "--access-log")
    s.start()
    yield s
    s.stop()
    assert s.proc is not None and s.proc.returncode == 0, s.output()  # SIGTERM: a graceful stop


def _send(api: ApiServer, method: str, path: str, body: bytes | None = None,
          headers: dict[str, str] | None = None, token: str | None = "real") -> tuple[int, bytes]:
    url = urlsplit(api.client().url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    sent = {"Content-Type": "application/json"}
    if token is not None:
        sent["Authorization"] = f"Bearer {api.client().token if token == 'real' else token}"
    sent.update(headers or {})
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for k, v in sent.items():
            conn.putheader(k, v.encode("latin-1") if isinstance(v, str) else v)
        if body is not None and "Content-Length" not in sent:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        if body is not None and "Content-Length" not in sent:
            conn.send(body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _assert_refused(status: int, raw: bytes, case: str) -> str:
    assert 400 <= status < 500, (case, status, raw[:300])
    try:
        message = json.loads(raw)["error"]
    except (ValueError, KeyError, TypeError):  # uvicorn's own answer to broken HTTP: one plain-text line
        message = raw.decode("utf-8", "replace").strip()
    assert isinstance(message, str) and message, (case, raw[:300])
    assert len(message) <= MAX_MESSAGE_CHARS and message == one_line(message), (case, message)
    return message


# ---- the cases: each one is refused by construction ---------------------------------------------------
def _file(text: str, name: str = "jobs.yaml") -> bytes:
    return json.dumps({"file": {"name": name, "text": text}}).encode()


def _yaml_job(rnd: random.Random, field: str, value: str) -> str:
    base = {"job_type": "lstm", "total_steps": str(rnd.randint(1, 500))}
    base[field] = value
    body = ", ".join(f"{k}: {v}" for k, v in base.items())
    return f"jobs:\n  - {{{body}}}\n"


def _bad_number(rnd: random.Random) -> tuple[str, bytes]:
    field = rnd.choice(sorted(BAD_NUMBERS))
    value = rnd.choice(BAD_NUMBERS[field])
    return f"{field}={value[:20]}", _file(_yaml_job(rnd, field, value))


def _bad_name(rnd: random.Random) -> tuple[str, bytes]:
    char = rnd.choice(sorted(HOSTILE_CHARS))
    left, right = (rnd.choice(["a", "ok", "модель", "训练"]) for _ in range(2))  # inside: strip() keeps it
    field = rnd.choice(["name", "entity", "quality"])
    if rnd.random() < 0.5:  # a YAML file, the character spelled as a double-quoted escape
        return f"yaml {field} U+{ord(char):04X}", _file(_yaml_job(rnd, field, f'"{left}{HOSTILE_CHARS[char]}{right}x"'))
    job = {**GOOD_JOB, field: f"{left}{char}{right}x"}
    return f"json {field} U+{ord(char):04X}", json.dumps({"jobs": [job]}).encode()


def _malformed_json(rnd: random.Random) -> tuple[str, bytes]:
    good = json.dumps({"jobs": [GOOD_JOB] * rnd.randint(1, 5), "request_id": f"fuzz-{rnd.getrandbits(64):x}"})
    depth = rnd.randint(40, 20000)
    choices = [
        ("prefix", good[: rnd.randrange(0, len(good) - 1)].encode()),  # a strict prefix of an object: never JSON
        ("not utf-8", bytes(rnd.getrandbits(8) | 0x80 for _ in range(rnd.randint(1, 40)))),
        ("nan", good.replace("10", rnd.choice(["NaN", "Infinity", "-Infinity"]), 1).encode()),
        ("big int", good.replace("10", "9" * rnd.randint(4400, 20000), 1).encode()),
        ("deep", ('{"jobs": [{"job_type": "lstm", "total_steps": 1, "args": {"a": ' + "[" * depth + "]" * depth
                  + "}}]}").encode()),
        ("surrogate", good.replace('"lstm"', '"ls\\ud800tm"', 1).encode()),
        ("wrong type", json.dumps(rnd.choice([{"jobs": "lstm"}, {"file": []}, {"jobs": [GOOD_JOB], "request_id": 5},
                                              {"jobs": [GOOD_JOB], "base_dir": "relative"}, {"jobs": []},
                                              {"jobs": [GOOD_JOB], "cwd": "/a\u0000b"}, [], None, "x", 1e308,
                                              {"file": {"name": "j\u202e.yaml", "text": "jobs: []"}},
                                              {"jobs": [GOOD_JOB], "extra": 1}])).encode()),
    ]
    what, body = rnd.choice(choices)
    return f"json {what}", body


def _malformed_yaml(rnd: random.Random) -> tuple[str, bytes]:
    laughs = "".join(f"{k}: &{k} [{', '.join([f'*{p}' if p else 'x'] * 10)}]\n"
                     for p, k in zip(["", *"abcdef"], "abcdefg", strict=True))
    depth = rnd.randint(40, 20000)
    texts = [
        ("unclosed", "jobs:\n  - {job_type: lstm, total_steps: 10\n"),
        ("open list", "jobs: [" * rnd.randint(1, 3)),
        ("tab", "jobs:\n\t- {job_type: lstm, total_steps: 10}\n"),
        ("python tag", "jobs:\n  - !!python/object/apply:os.system ['true']\n"),
        ("cycle", "jobs: &a [*a]\n"),
        ("undefined alias", "jobs: *nowhere\n"),
        ("laughs", laughs + "jobs:\n  - {job_type: lstm, total_steps: 10, args: {x: *g}}\n"),
        ("deep", "jobs: " + "[" * depth + "]" * depth + "\n"),
        ("deep json", '{"jobs": ' + "[" * depth + "]" * depth + "}"),
        ("unknown field", "jobs:\n  - {job_type: lstm, total_steps: 10, " + rnd.choice(string.ascii_lowercase) * 3
         + "zz: 1}\n"),
        ("not a list", rnd.choice(["jobs: 3\n", "jobs: {a: 1}\n", "- 1\n- 2\n", "''\n", "jobs:\n"])),
        ("raw NUL", "jobs:\n  - {job_type: lstm\0, total_steps: 10}\n"),
        ("csv", "job_type,total_steps\nlstm," + "9" * 140_000 + "\n"),
        ("format", "lstm 10\n"),
    ]
    what, text = rnd.choice(texts)
    name = {"deep json": "jobs.json", "csv": "jobs.csv", "format": "jobs.txt"}.get(what, rnd.choice(["j.yaml",
                                                                                                     "j.yml"]))
    return f"yaml {what}", _file(text, name)


def _forged_token(rnd: random.Random, real: str) -> tuple[str, dict[str, str] | None, str | None]:
    i = rnd.randrange(len(real))
    flipped = real[:i] + ("A" if real[i] != "A" else "B") + real[i + 1:]
    forged = rnd.choice([flipped, real[:-1], real + "x", "", " ", real.upper(), "ÿ" * 43, "Bearer " + real,
                         "".join(rnd.choice(string.printable[:94]) for _ in range(rnd.randint(1, 200)))])
    scheme = rnd.choice(["Bearer", "bearer", "Basic", "Token", ""])
    header = f"{scheme} {forged}".strip()
    given_scheme, _, given = header.partition(" ")
    if given_scheme.lower() == "bearer" and given.strip() == real:  # the real token after all: spoil it
        header += "!"
    return f"token {scheme} {len(forged)}", ({"Authorization": header} if header else None), None


def _other_call(rnd: random.Random) -> tuple[str, str, str]:
    weird = rnd.choice(["0", "-1", "9" * 30, "9" * 5000, "1e3", "nan", quote("\u202e"), "%00", "..", "1;2", "0x10"])
    return rnd.choice([("GET", f"/api/jobs/{weird}", "job"), ("POST", f"/api/jobs/{weird}/cancel", "cancel"),
                       ("GET", f"/api/jobs/{weird}/logs", "logs"), ("GET", f"/api/jobs?status={weird}", "status"),
                       ("GET", f"/api/timeline?since={weird}x", "timeline"), ("GET", f"/static/{weird}", "static"),
                       ("GET", f"/api/{weird}", "unknown"), ("GET", f"/api/usage?since={weird}x", "usage"),
                       ("GET", f"/api/audit?limit={weird}x", "audit"), ("POST", "/api/tenants/reload", "reload")])


def _cases(rnd: random.Random, real: str) -> Iterator[tuple[str, str, str, bytes | None, Any, Any]]:
    """(case, method, path, body, headers, token) ``CASES`` times."""
    makers = [_bad_number, _bad_name, _malformed_json, _malformed_yaml]
    for _ in range(CASES):
        kind = rnd.random()
        if kind < 0.7:
            case, body = rnd.choice(makers)(rnd)
            yield case, "POST", "/api/jobs", body, None, "real"
        elif kind < 0.85:
            case, headers, token = _forged_token(rnd, real)
            method, path, _ = rnd.choice([("GET", "/api/jobs", ""), ("GET", "/api/health", ""),
                                          ("POST", "/api/jobs", ""), ("GET", "/api/cluster", ""),
                                          ("POST", "/api/jobs/1/cancel", ""), ("GET", "/api/timeline", "")])
            yield case, method, path, json.dumps({"jobs": [GOOD_JOB]}).encode(), headers, token
        else:
            method, path, what = _other_call(rnd)
            yield f"{what} {path[:40]}", method, path, None, None, "real"


def test_fuzzing_every_call_gets_a_4xx_stores_nothing_and_the_server_keeps_serving(api):
    before = snapshot(api.state)
    rnd = random.Random(SEED)
    seen: dict[int, int] = {}
    for case, method, path, body, headers, token in _cases(rnd, api.client().token):
        status, raw = _send(api, method, path, body, headers, token)
        message = _assert_refused(status, raw, case)
        seen[status] = seen.get(status, 0) + 1
        if case.startswith("token"):
            assert status == 401 and message in ("wrong token", one_line(message)) and "token" in message, case
    for length, code in ((MAX_BODY_BYTES + 1, 413), (10**12, 413), (10**30, 400), (-1, 400)):
        status, raw = _send(api, "POST", "/api/jobs", b"", {"Content-Length": str(length)})  # declared, not sent
        message = _assert_refused(status, raw, str(length))
        assert status == code and message in (f"request body larger than {MAX_BODY_BYTES} bytes",
                                              "Invalid HTTP request received."), (length, message)
    assert snapshot(api.state) == before
    assert {400, 401, 404, 422} <= set(seen), seen
    assert api.client().request("GET", "/api/health")["state"] == "starting"  # still serving
    ok = api.client().request("POST", "/api/jobs", {"jobs": [GOOD_JOB]})
    assert len(ok["ids"]) == 1 and not ok["duplicate"]


def test_names_refuse_control_and_format_characters_but_take_other_unicode(api):
    before = snapshot(api.state)
    for char in HOSTILE_CHARS:
        body = json.dumps({"jobs": [{**GOOD_JOB, "name": f"a{char}b"}]}).encode()
        status, raw = _send(api, "POST", "/api/jobs", body)
        message = _assert_refused(status, raw, repr(char))
        named = f"name holds U+{ord(char):04X}" in message and "position 1" in message
        single = char == "\n" and "name must be a non-empty single-line" in message  # hadar run's own check
        assert status == 400 and (named or single), message
    status, raw = _send(api, "POST", "/api/jobs", json.dumps({"jobs": [{**GOOD_JOB, "name": "x" * 129}]}).encode())
    assert status == 400 and "name has 129 characters; at most 128" in json.loads(raw)["error"]
    assert snapshot(api.state) == before
    ok = api.client().request("POST", "/api/jobs", {"jobs": [{**GOOD_JOB, "name": "модель-训练-é"}]})
    assert api.client().job(ok["ids"][0])["name"] == "модель-训练-é"


def test_the_server_never_runs_entrypoint_code(api, tmp_path, capsys):
    """A package whose every level writes a file when imported: submitted (accepted) and resubmitted with
    refused functions; no file appears while the server lives (it never runs jobs: only it could import)."""
    marker = tmp_path / "marker"
    root = _package(tmp_path / "proj", marker)
    (root / "train.py").write_text(f"import pathlib\npathlib.Path({str(marker) + '.file'!r}).write_text('x')\n"
                                   "def train(ctx):\n    pass\n")
    good = write(root / "good.yaml", "jobs:\n  - {name: pkg, entrypoint: 'mypkg.sub.mod:train', total_steps: 10}\n"
                                     "  - {name: file, entrypoint: train.py:train, total_steps: 10}\n")
    assert main(["submit", str(good), "--state", str(api.state)]) == 0
    assert len(capsys.readouterr().out.split()) == 2
    before = snapshot(api.state)
    for entry, why in (("mypkg.sub.mod:Trainer", "is a class"), ("mypkg.sub.mod:joined", "is imported"),
                       ("os:system", "no function 'system' defined at the top level of"),
                       ("sys:exit", "has no Python source"), ("mypkg.sub.mod:nothing", "takes no argument")):
        bad = write(root / "bad.yaml", f"jobs:\n  - {{name: bad, entrypoint: '{entry}', total_steps: 10}}\n")
        assert main(["submit", str(bad), "--state", str(api.state)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("hadar: error: bad.yaml: job 0: entrypoint") and "\n" not in err, err
        assert why in err and err.endswith("(HTTP 400)"), err
    assert snapshot(api.state) == before
    api.wait_for(lambda: True, 1, "the server")  # alive
    assert _imported(marker) == []


def test_the_token_never_reaches_a_log_line(api):
    """The access log (kept by this test server, not by ``hadar serve``) of a request with the token in its
    query string shows ``[token]``; a token in a query string is never accepted."""
    real = api.client().token
    status, raw = _send(api, "GET", f"/api/jobs?token={real}&access_token={real}", token=None)
    assert status == 401 and json.loads(raw)["error"].startswith("missing token")
    status, _ = _send(api, "GET", f"/api/health?token={real}", token="wrong")
    assert status == 401
    status, _ = _send(api, "POST", "/api/jobs", _file(f"jobs:\n  - {{name: {real}x, job_type: nope}}\n"))
    assert status == 400
    assert _send(api, "GET", "/api/health")[0] == 200
    log = api.log.read_text(errors="replace")
    assert "/api/jobs?token=[token]&access_token=[token]" in log and " 401" in log, log[-2000:]
    assert real not in log


def test_redaction_and_one_line_messages():
    token = "s3cr3t-TOKEN"
    out: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: out.append(handler.format(record))  # type: ignore[method-assign]
    handler.addFilter(RedactToken(token))
    logger = logging.getLogger("tests.redact")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("GET /api/jobs?token=%s %d", token, 401)
        try:
            raise ValueError(f"bad {token}")
        except ValueError:
            logger.exception("failed with %r", {"t": token})
    finally:
        logger.removeHandler(handler)
    assert out[0] == "GET /api/jobs?token=[token] 401"
    assert token not in "".join(out) and "ValueError: bad [token]" in out[1]
    assert one_line("a\nb\t\u202ec\x00" + "x" * 1000) == "a b \\u202ec\\u0000" + "x" * (MAX_MESSAGE_CHARS - 20) + "..."


def test_a_path_named_with_unicode_is_fine_for_an_entrypoint(tmp_path):
    """Plain unicode in folders and file names is not hostile (only control and format characters are)."""
    from hadar.service.specs import parse_job_file

    folder = tmp_path / "проект 训练"
    folder.mkdir()
    (folder / "trén.py").write_text("def train(ctx):\n    pass\n")
    (job,) = parse_job_file("jobs:\n  - {name: é, entrypoint: trén.py:train, total_steps: 5}\n", "j.yaml",
                            base_dir=str(folder))
    assert job.train is not None and Path(job.train.search_path[0]) == folder
