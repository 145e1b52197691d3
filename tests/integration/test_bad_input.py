"""Bad input to the real command lines: one clear line naming the file, exit status 2, no traceback.

A small bundle is recorded once against the stand-in (bench/standin/); each test
damages a copy of it the way a crash, a bad disk or another tool version would.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.standin.thread import StandInThread
from bundle.store.manifest import SCHEMA_VERSION
from tests.conftest import ROOT, run_bench
from tests.standin_round import STANDIN_ROUND_PLAN

PLAN = STANDIN_ROUND_PLAN
DEAD_ENDPOINT = "http://127.0.0.1:9"  # never contacted: the input is refused first


def cli(*args: str) -> subprocess.CompletedProcess:
    """`python -m serving_ledger ARGS`, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "serving_ledger", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def assert_refused(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit status 2 and one line on stderr that names what is wrong; no traceback."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad-input")
    (root / "p.toml").write_text(PLAN)
    out = root / "bundle-ok"
    with StandInThread(step_ms=2) as url:
        run_bench("run", "--plan", str(root / "p.toml"), "--endpoint", url, "--out", str(out),
                  timeout=120)
    return out


@pytest.fixture
def bundle(recorded, tmp_path) -> Path:
    """A fresh copy of the recorded bundle to damage."""
    return Path(shutil.copytree(recorded, tmp_path / "b"))


def edit_manifest(bundle: Path, **changes) -> None:
    p = bundle / "manifest.json"
    m = json.loads(p.read_text())
    m.update(changes)
    p.write_text(json.dumps(m, indent=2))


def all_commands_refuse(bundle: Path, tmp_path: Path, *needles: str) -> None:
    """report build, report summary and bench run --resume each refuse BUNDLE the same way."""
    assert_refused(cli("build", "--bundle", str(bundle), "--round", "x",
                       "--out", str(tmp_path / "site"), "--formats", "html"), *needles)
    assert not (tmp_path / "site" / "x").exists()
    assert_refused(cli("summary", str(bundle)), *needles)
    assert_refused(cli("run", "--endpoint", DEAD_ENDPOINT, "--concurrency", "1",
                       "--out", str(bundle), "--resume"), *needles)


# ------------------------------------------------------------------ bundles

def test_truncated_last_line_is_reported_and_skipped(bundle, tmp_path):
    p = bundle / "requests.jsonl"
    lines = p.read_text().splitlines(keepends=True)
    n = len(lines)
    p.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # a crash mid-write

    summary = cli("summary", str(bundle))
    assert summary.returncode == 0 and "Traceback" not in summary.stderr, summary.stderr
    assert f"requests.jsonl line {n}: truncated last line skipped" in summary.stderr
    rows = summary.stdout.splitlines()
    assert rows[0].split()[0] == "point" and len(rows) == 3

    build = cli("build", "--bundle", str(bundle), "--round", "x",
                "--out", str(tmp_path / "site"), "--formats", "html")
    assert build.returncode == 0 and "Traceback" not in build.stderr, build.stderr
    for lang in ("en", "zh"):
        html = (tmp_path / "site" / "x" / f"index.{lang}.html").read_text()
        method = html[html.index('id="sec-method"'):]
        assert f"requests.jsonl line {n}: truncated last line skipped" in method


def test_invalid_manifest_json(bundle, tmp_path):
    p = bundle / "manifest.json"
    p.write_text(p.read_text().replace('"status"', '"status', 1))
    all_commands_refuse(bundle, tmp_path, "manifest.json line ", "not valid JSON")


def test_invalid_json_in_the_middle_of_requests(bundle, tmp_path):
    p = bundle / "requests.jsonl"
    lines = p.read_text().splitlines(keepends=True)
    lines[2] = lines[2][:40] + "\n"
    p.write_text("".join(lines))
    all_commands_refuse(bundle, tmp_path, "requests.jsonl line 3", "not valid JSON")


@pytest.mark.parametrize("version, needle", [(0, "older than any this tool can upgrade"),
                                             (SCHEMA_VERSION + 1, "newer than this tool reads")])
def test_unknown_schema_version(bundle, tmp_path, version, needle):
    edit_manifest(bundle, schema_version=version)
    all_commands_refuse(bundle, tmp_path, "manifest.json", f"schema_version {version}", needle)


def test_manifest_with_an_unknown_field(bundle, tmp_path):
    edit_manifest(bundle, mystery={"a": 1})
    all_commands_refuse(bundle, tmp_path, "manifest.json", "unknown fields ['mystery']")


def test_manifest_section_of_the_wrong_type(bundle, tmp_path):
    edit_manifest(bundle, engine="vllm", clock=[1, 2])
    all_commands_refuse(bundle, tmp_path, "manifest.json")


def test_sample_record_without_its_time(bundle, tmp_path):
    p = bundle / "points.jsonl"
    lines = p.read_text().splitlines(keepends=True)
    rec = json.loads(lines[3])
    del rec["t"]
    lines[3] = json.dumps(rec) + "\n"
    p.write_text("".join(lines))
    all_commands_refuse(bundle, tmp_path, "points.jsonl line 4", "'t'")


def test_not_a_bundle(tmp_path):
    assert_refused(cli("summary", str(tmp_path)), "manifest.json", "not a bundle")


# ------------------------------------------------------------------ report build arguments

@pytest.mark.parametrize("args, needle", [
    (("--round", "../escape"), "not a safe directory name"),
    (("--round", "x", "--formats", "html,docx"), "unknown format 'docx'"),
])
def test_report_build_bad_arguments(recorded, tmp_path, args, needle):
    assert_refused(cli("build", "--bundle", str(recorded), "--out", str(tmp_path / "s"),
                       *args), needle)
    assert not (tmp_path / "escape").exists()


def test_report_build_into_a_file(recorded, tmp_path):
    (tmp_path / "f").write_text("")
    assert_refused(cli("build", "--bundle", str(recorded), "--round", "x",
                       "--out", str(tmp_path / "f"), "--formats", "html"), str(tmp_path / "f"))


# ------------------------------------------------------------------ plans

@pytest.mark.parametrize("body, needles", [
    ("[sweep]\nconcurency = [1, 2]\n", ("[sweep]", "unknown key(s) ['concurency']")),
    ("[sweeps]\nconcurrency = [1]\n", ("unknown key(s) ['sweeps']",)),
    ("[sweep]\nconcurrency = = 1\n", ("line 2",)),
    ("[sweep]\ninput_len = ['a']\n", ("[sweep].input_len", "'a' is not an integer")),
    ("[sweep]\nrequest_rate = ['x']\narrival = 'poisson'\n", ("[sweep].request_rate",)),
    ("[sweep]\nserver_flags = [[1]]\n", ("[sweep].server_flags",)),
    ("[engine]\nenv = 5\n", ("[engine].env", "expected a table")),
    ("seed = 'x'\n", ("seed must be an integer",)),
    ("[engine]\nmodel_config = '/nonexistent/config.json'\n",
     ("[engine].model_config", "/nonexistent/config.json")),
    # Issue 16: each once a traceback mid-round, a NaN in points.jsonl or a silent oddity.
    ("[workload]\ninput_len = 16.5\n", ("[workload].input_len", "whole number, got 16.5")),
    ("[workload]\ninput_len = 16.0\n", ("[workload].input_len", "whole number, got 16.0")),
    ("[sweep]\nrequests_per_point = 2.5\n", ("[sweep].requests_per_point", "got 2.5")),
    ("[sweep]\nrequests_per_point = 0\n", ("[sweep].requests_per_point", "at least 1")),
    ("[sweep]\narrival = 'poisson'\nrequest_rate = [-1]\n", ("[sweep].request_rate", "-1 is out of range")),
    ("[sweep]\narrival = 'poisson'\nrequest_rate = [inf]\n", ("[sweep].request_rate", "finite number, got inf")),
    ("[sweep]\narrival = 'poisson'\nrequest_rate = [nan]\n", ("[sweep].request_rate", "finite number, got nan")),
    ("[sweep]\narrival = 'poisson'\nrequest_rate = [0]\n", ("[sweep].request_rate", "0 is out of range (above 0")),
    ("[sweep]\narrival = 'gamma'\nrequest_rate = [1]\nburstiness = 0.0\n", ("[sweep].burstiness", "above 0")),
    ("[sweep]\ncooldown_s = nan\n", ("[sweep].cooldown_s", "finite number, got nan")),
    ("[workload]\ntoken_id_low = 5000\ntoken_id_high = 10\n",
     ("[workload].token_id_low", "5000 is not below token_id_high 10")),
    ("[workload]\ntoken_id_low = -1\n", ("[workload].token_id_low", "-1 is out of range")),
    ("[sampler]\nmetrics_interval_s = -1\n", ("[sampler].metrics_interval_s", "from 0.1 up to 3,600")),
    ("[sampler]\nmetrics_interval_s = 0.001\n", ("[sampler].metrics_interval_s", "0.001")),
    ("[engine]\nport = 70000\n", ("[engine].port", "70000 is out of range")),
    ("[sweep]\nconcurrency = [1000000000]\n", ("point L128-c1000000000 needs about", "GiB of client memory")),
    ("[workload]\ninput_len = 2000000000\n", ("point L2000000000-c1 needs about",
                                              "of client memory before it sends a request")),
    ("[workload]\nkind = 'shared-prefix'\ninput_len = 100001\nprefix_len = 100000\nnum_prefixes = 1048576\n",
     ("point L100001-c1 needs about", "1,048,576 shared prefixes of 100,000 tokens")),
    ("[workload]\nkind = 'jsonl'\njsonl = '/nonexistent/prompts.jsonl'\n",
     ("[workload].jsonl: /nonexistent/prompts.jsonl: does not exist",)),
    ("[workload]\nkind = 'shared-prefix'\nprefix_len = 200\n", ("[workload].prefix_len: 200",)),
])
def test_bad_plan(tmp_path, body, needles):
    plan = tmp_path / "plan.toml"
    plan.write_text(body)
    out = tmp_path / "b"
    assert_refused(cli("run", "--plan", str(plan), "--endpoint", DEAD_ENDPOINT,
                       "--out", str(out)), str(plan), *needles)
    assert not out.exists()  # nothing recorded for a plan that cannot run


@pytest.mark.parametrize("data, needle", [
    (b'title = "caf\xe9"\n', "not UTF-8 text (byte 0xe9 at offset 12)"),
    (b"\xff\xfe[\x00s\x00", "not UTF-8 text (byte 0xff at offset 0)"),
    (b"# " + b"x" * (1 << 20) + b"\n", "over 1 MiB"),
])
def test_plan_file_that_is_not_a_plan(tmp_path, data, needle):
    plan = tmp_path / "plan.toml"
    plan.write_bytes(data)
    assert_refused(cli("run", "--plan", str(plan), "--endpoint", DEAD_ENDPOINT,
                       "--out", str(tmp_path / "b")), str(plan), needle)
    assert not (tmp_path / "b").exists()


def test_prompt_file_that_is_not_utf8_is_refused_before_the_round(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes(b'{"prompt": "caf\xe9"}\n')
    plan = tmp_path / "plan.toml"
    plan.write_text(f"[workload]\nkind = 'jsonl'\njsonl = '{prompts}'\n")
    assert_refused(cli("run", "--plan", str(plan), "--endpoint", DEAD_ENDPOINT,
                       "--out", str(tmp_path / "b")), f"{prompts}: not UTF-8 text")
    assert not (tmp_path / "b").exists()


def test_capacity_bounds_say_why(monkeypatch):
    """Client memory over half of the host's, and more sockets than a process may open."""
    from bench.plan import budget
    from bench.plan.checks import check_plan
    from bench.plan.spec import Plan, SweepSpec, WorkloadSpec
    from bench.prompts import PlanError
    monkeypatch.setattr(budget, "host_memory_bytes", lambda: 8 << 30)
    monkeypatch.setattr(budget, "available_memory_bytes", lambda: 6 << 30)
    monkeypatch.setattr(budget, "open_files_limit", lambda: 1024)
    plan = Plan(workload=WorkloadSpec(input_len=4096),
               sweep=SweepSpec(concurrency=[2048], requests_per_point=100_000))
    # (2048 warm-up + 100,000 prompts) x 4096 tokens x 48 B = 18.7 GiB
    with pytest.raises(PlanError, match=r"L4096-c2048 needs about 18.7 GiB of client memory"
                                        r".*over half of this host's 8.0 GiB"):
        check_plan(plan)
    plan.sweep.requests_per_point, plan.workload.input_len = 16, 128
    with pytest.raises(PlanError, match=r"2048 requests in flight need 2048 connections per "
                                        r"client process, over the 960 this host allows"):
        check_plan(plan)
    plan.client.workers = 4      # 512 connections each
    check_plan(plan)


def test_missing_plan_file(tmp_path):
    assert_refused(cli("run", "--plan", str(tmp_path / "nope.toml"), "--out",
                       str(tmp_path / "b")), str(tmp_path / "nope.toml"), "no such plan file")


def test_plan_strings_are_data(tmp_path):
    """A plan value that looks like code stays a string: TOML is parsed, never evaluated."""
    from bench.plan.parse import load_plan
    marker = tmp_path / "pwned"
    code = f"__import__('os').system('touch {marker}')"
    plan = tmp_path / "plan.toml"
    plan.write_text(f'id = "{{{{ 7 * 7 }}}}"\ntitle = "{code}"\n[workload]\nkind = "random"\n')
    p = load_plan(plan)
    assert p.title == code and p.id == "{{ 7 * 7 }}"
    assert p.to_dict()["title"] == code
    assert not marker.exists()


@pytest.mark.parametrize("args, needle", [
    (("--endpoint", "not-a-url"), "--endpoint: 'not-a-url' is not an http"),
    (("--launch", "serve --port 1"), "--launch needs --endpoint"),
    (("--endpoint", DEAD_ENDPOINT, "--concurrency", "1,x"), "comma-separated integers"),
    (("--endpoint", DEAD_ENDPOINT, "--concurrency", ","), "at least one integer"),
    # Explicit values are checked, never replaced by a default (issue 16).
    (("--endpoint", DEAD_ENDPOINT, "--output-len", "0"),
     "--output-len: plan [workload].output_len: 0 is out of range"),
    (("--endpoint", DEAD_ENDPOINT, "--requests-per-point", "0"),
     "--requests-per-point: plan [sweep].requests_per_point: 0 requests"),
    (("--endpoint", DEAD_ENDPOINT, "--request-rate", "nan"), "--request-rate: plan [sweep].request_rate"),
    (("--endpoint", DEAD_ENDPOINT, "--request-rate", "0"), "0.0 is out of range (above 0"),
    (("--endpoint", DEAD_ENDPOINT, "--request-rate", "1", "--arrival", "gamma", "--burstiness", "0"),
     "--burstiness: plan [sweep].burstiness"),
    (("--endpoint", DEAD_ENDPOINT, "--metrics-interval", "-1"), "--metrics-interval: plan [sampler]"),
    (("--endpoint", DEAD_ENDPOINT, "--duration", "inf"), "--duration: plan [sweep].duration_s"),
    (("--endpoint", DEAD_ENDPOINT, "--workers", "0"), "--workers: plan [client].workers"),
])
def test_bad_run_arguments(tmp_path, args, needle):
    proc = cli("run", *args, "--out", str(tmp_path / "b"))
    assert "Traceback" not in proc.stderr and proc.returncode == 2, proc.stderr
    assert needle in proc.stderr
    assert not (tmp_path / "b").exists()


def test_run_into_a_file(tmp_path):
    (tmp_path / "f").write_text("")
    assert_refused(cli("run", "--endpoint", DEAD_ENDPOINT, "--out", str(tmp_path / "f")),
                   str(tmp_path / "f"))


def test_launch_command_that_does_not_exist(tmp_path):
    out = tmp_path / "b"
    assert_refused(cli("run", "--launch", "no-such-server-binary --port 1",
                       "--endpoint", DEAD_ENDPOINT, "--out", str(out)), "no-such-server-binary")
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "failed" and "no-such-server-binary" in m["status_reason"]


# ------------------------------------------------------------------ report explain

def test_explain_missing_model_config(tmp_path):
    missing = tmp_path / "no-model" / "config.json"
    assert_refused(cli("explain", "--model", str(missing), "--gpu", "NVIDIA H200",
                       "--concurrency", "4", "--input-len", "128", "--output-len", "32"),
                   str(missing))


def test_explain_invalid_model_config(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"hidden_size": 64,\n "num_layers": }')
    assert_refused(cli("explain", "--model", str(cfg), "--gpu", "NVIDIA H200",
                       "--concurrency", "4", "--input-len", "128", "--output-len", "32"),
                   str(cfg), "line 2")
