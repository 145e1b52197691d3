"""Hostile servers and secrets: server strings are escaped in HTML, API keys never written.

Rounds run against the stand-in of bench/standin/ (it serves whatever names it is given
and keeps the Authorization headers it received); no engine is needed.
"""

from __future__ import annotations

import gzip
import html as html_lib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.engine import free_port
from bench.standin.thread import StandInThread
from bundle.redact import REDACTED
from bundle.store.reader import read_bundle
from tests.conftest import ROOT, run_bench
from tests.standin_round import STANDIN_ROUND_PLAN

MODEL = "<script>alert(1)</script>"
VERSION = "<img src=x onerror=alert(2)>"
ERROR_BODY = '<iframe src="javascript:alert(3)"></iframe>'
KEY = "sk-test-SECRET123"
PLAN = STANDIN_ROUND_PLAN


def build(bundle: Path, out: Path, round_id: str = "x") -> dict[str, str]:
    """`python -m serving_ledger build` (HTML); every page written, by path."""
    proc = subprocess.run([sys.executable, "-m", "serving_ledger", "build", "--bundle", str(bundle),
                           "--round", round_id, "--out", str(out), "--formats", "html"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return {str(p.relative_to(out)): p.read_text() for p in sorted(out.rglob("*.html"))}


def grep_tree(root: Path, needle: str) -> list[str]:
    """Files under ROOT (any kind, compressed or not) whose bytes contain NEEDLE."""
    import gzip
    hits = []
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            if p.suffix == ".gz":
                data += gzip.decompress(data)
            if needle.encode() in data:
                hits.append(str(p))
    return hits


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A round against a server with a hostile model name and version that wants an API key;
    the key reaches the client only through SERVING_LEDGER_API_KEY."""
    root = tmp_path_factory.mktemp("hostile")
    (root / "p.toml").write_text(PLAN)
    out = root / "bundle"
    srv = StandInThread(model=MODEL, version=VERSION, api_key=KEY, error_body=ERROR_BODY, step_ms=2)
    with srv as url:
        run_bench("run", "--plan", str(root / "p.toml"), "--endpoint", url, "--out", str(out),
                  env={"SERVING_LEDGER_API_KEY": KEY}, timeout=120)
    site = root / "site"
    pages = build(out, site)
    return {"bundle": out, "site": site, "pages": pages, "server": srv}


def test_the_key_is_sent_as_a_bearer_token(hostile):
    b = read_bundle(hostile["bundle"])
    assert b.manifest["status"] == "complete"
    # The server refuses /v1/* without the key; the round still found the model and ran.
    assert b.manifest["model"]["served_name"] == MODEL
    assert b.manifest["engine"]["models"][0]["id"] == MODEL
    assert sum(r["status"] == "ok" for r in b.requests) >= 2 * len(b.requests) // 3
    assert f"Bearer {KEY}" in hostile["server"].server.auth
    assert hostile["server"].server.completions_seen == len(b.requests)


def test_the_key_is_never_written(hostile):
    assert grep_tree(hostile["bundle"], "SECRET123") == []
    assert grep_tree(hostile["site"], "SECRET123") == []


def test_server_strings_are_escaped_in_html(hostile):
    pages = hostile["pages"]
    assert {"index.html", "x/index.en.html", "x/index.zh.html"} <= set(pages)
    for name, html in pages.items():
        for raw in (MODEL, VERSION, ERROR_BODY, "<script>alert", "<img src=x", "<iframe"):
            assert raw not in html, (name, raw)
    for lang in ("en", "zh"):
        html = pages[f"x/index.{lang}.html"]
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "&lt;img src=x onerror=alert(2)&gt;" in html
    # The failed requests carried the hostile error body; the bundle keeps it as data.
    errors = [r["error"] for r in read_bundle(hostile["bundle"]).requests if r["error"]]
    assert errors and all(ERROR_BODY in e for e in errors)


def test_pages_forbid_remote_loads(hostile):
    for name, html in hostile["pages"].items():
        m = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html)
        assert m, name
        csp = html_lib.unescape(m.group(1))
        assert "default-src 'none'" in csp, (name, csp)
        assert not re.search(r"https?:|\*", csp), (name, csp)
        # Nothing on the page asks for anything outside it.
        assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html), name
        assert not re.search(r"""url\(\s*["']?(?:https?:)?//|@import""", html), name


def test_a_hostile_status_reason_is_escaped_in_the_notice(hostile, tmp_path):
    bundle = Path(shutil.copytree(hostile["bundle"], tmp_path / "b"))
    m = json.loads((bundle / "manifest.json").read_text())
    m.update(status="failed", status_reason=f"point L16-c2: {MODEL} {ERROR_BODY}")
    (bundle / "manifest.json").write_text(json.dumps(m))
    pages = build(bundle, tmp_path / "site")
    html = pages["x/index.en.html"]
    assert MODEL not in html and ERROR_BODY not in html
    notice = re.search(r'<div class="notice" role="note">([^<]*)</div>', html).group(1)
    assert "This round did not complete (status: failed)" in notice
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in notice


def test_credentials_on_the_server_command_line_are_redacted(tmp_path):
    """Launch mode: a key given to the server (--api-key), one in the plan's environment and
    the client's key are kept out of the manifest, the point events and server.log."""
    port = free_port()
    key, token = "sk-launch-SECRET456", "hf-SECRET789"
    plan = tmp_path / "p.toml"
    plan.write_text(f"""
[engine]
mode = "launch"
command = "{sys.executable} -m bench.standin --port {port} --step-ms 2 --api-key {key}"
endpoint = "http://127.0.0.1:{port}"
env = {{HF_TOKEN = "{token}"}}
startup_timeout_s = 30
[workload]
input_len = 8
output_len = 4
[sweep]
concurrency = [1]
requests_per_point = 3
cooldown_s = 0
""")
    out = tmp_path / "b"
    run_bench("run", "--plan", str(plan), "--out", str(out), env={"SERVING_LEDGER_API_KEY": key},
              timeout=120)
    b = read_bundle(out)
    assert b.manifest["status"] == "complete"
    assert all(r["status"] == "ok" for r in b.requests)  # the server got the key it wanted
    assert grep_tree(out, "SECRET456") == [] and grep_tree(out, "SECRET789") == []
    assert "non-default args" in b.server_log() and REDACTED in b.server_log()
    assert REDACTED in b.manifest["engine"]["command"]
    assert b.manifest["engine"]["env"]["HF_TOKEN"] == REDACTED


def test_short_credentials_are_redacted_and_the_key_variable_is_not_inherited(tmp_path):
    """Keys under 8 characters were once written verbatim (server.log, manifest, points.jsonl),
    and a launched server inherited SERVING_LEDGER_API_KEY. Short keys are redacted where they
    stand as a whole token; a number or a word that merely contains one is kept."""
    port = free_port()
    key, token = "k3y", "t0k"
    plan = tmp_path / "p.toml"
    plan.write_text(f"""
[engine]
mode = "launch"
command = "{sys.executable} -m bench.standin --port {port} --step-ms 2 --api-key {key} --model k3yring"
endpoint = "http://127.0.0.1:{port}"
env = {{HF_TOKEN = "{token}"}}
startup_timeout_s = 30
[workload]
input_len = 8
output_len = 4
[sweep]
concurrency = [1]
requests_per_point = 3
cooldown_s = 0
""")
    out = tmp_path / "b"
    run_bench("run", "--plan", str(plan), "--out", str(out), env={"SERVING_LEDGER_API_KEY": key},
              timeout=120)
    b = read_bundle(out)
    assert b.manifest["status"] == "complete"
    assert all(r["status"] == "ok" for r in b.requests)  # the server got the key it wanted
    token_re = re.compile(rb"(?<![A-Za-z0-9_-])(?:k3y|t0k)(?![A-Za-z0-9_-])")
    for p in out.rglob("*"):
        data = p.read_bytes()
        data = gzip.decompress(data) if p.suffix == ".gz" else data
        assert not token_re.search(data), (p.name, token_re.search(data))
    log = b.server_log()
    assert "'api_key': ['[redacted]']" in log
    assert "client key variable in environment: False" in log
    assert REDACTED in b.manifest["engine"]["command"]
    assert b.manifest["engine"]["env"]["HF_TOKEN"] == REDACTED
    assert b.manifest["model"]["served_name"] == "k3yring"   # contains the key: kept


def test_redactor_keeps_numbers_and_words_that_contain_a_short_secret():
    from bundle.redact import Redactor
    r = Redactor(["1024", "abc"])
    rec = {"input_len": 1024, "cmd": ["--api-key", "abc", "--max-model-len", "10240"],
           "note": "abcdef x-abc 1024.5 v1.abc"}
    assert r.record(rec) == {"input_len": 1024,
                             "cmd": ["--api-key", REDACTED, "--max-model-len", "10240"],
                             "note": "abcdef x-abc 1024.5 v1.abc"}
    assert r.text("key=abc, len 1024. The key: abc.\n") == \
        f"key={REDACTED}, len {REDACTED}. The key: {REDACTED}.\n"
