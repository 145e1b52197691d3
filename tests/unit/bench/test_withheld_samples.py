"""The collector writes only what its reader accepts: an exporter's sample that is no
measurement (NaN, ±Inf, a negative power, a share outside [0, 1], a clock at 0, a label that is
no GPU index) is kept out of the bundle with its reason, and the round's bundle reads."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from bench.samplers import Context
from bench.samplers.scrape import MetricsSampler
from bundle.files import BundleError
from bundle.store.reader import read_bundle
from bundle.store.writer import BundleWriter
from report.derive.gpu import dcgm
from tests.conftest import FIXTURES

PAGE = (FIXTURES / "dcgm" / "exporter-page.txt").read_text().replace(
    "{energy0}", "1000").replace("{energy1}", "2000")
GPU0 = 'gpu="0",UUID="GPU-3b1f6c2e-8d4a-4b7e-9c51-0a2f7e6d9b14"'
GPU1 = 'gpu="1",UUID="GPU-7e2d9a41-5c3b-4f60-8e17-b94c2d1a6f03"'


def hostile(page: str) -> str:
    """The exporter page with GPU 0 answering -700 W, a DRAM activity of 5.0 and an SM clock of
    0, GPU 1 a temperature of NaN and a power of +Inf."""
    swaps = [(f"DCGM_FI_DEV_POWER_USAGE{{{GPU0}", "692.847", "-700"),
             (f"DCGM_FI_PROF_DRAM_ACTIVE{{{GPU0}", None, "5.0"),
             (f"DCGM_FI_DEV_SM_CLOCK{{{GPU0}", "1470", "0"),
             (f"DCGM_FI_DEV_GPU_TEMP{{{GPU1}", "31", "NaN"),
             (f"DCGM_FI_DEV_POWER_USAGE{{{GPU1}", "74.512", "+Inf")]
    lines = page.splitlines()
    for head, _, new in swaps:
        i = next(i for i, line in enumerate(lines) if line.startswith(head))
        lines[i] = lines[i].rsplit(" ", 1)[0] + " " + new
    return "\n".join(lines) + "\n"


def scrape_page(tmp_path, text: str) -> dict:
    """One scrape of an exporter serving TEXT, into a new bundle's dcgm.jsonl; the record read back."""
    async def serve(request):
        return web.Response(text=text)

    async def go():
        app = web.Application()
        app.router.add_get("/metrics", serve)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            async with aiohttp.ClientSession() as session:
                await MetricsSampler(0.5, stream="dcgm", path="", prefix="DCGM_FI_",
                                     url=f"http://127.0.0.1:{port}/metrics").scrape_once(Context(w, session))
        finally:
            await runner.cleanup()

    w = BundleWriter(tmp_path / "b", {"engine": {}, "plan": {}, "tool": {}})
    asyncio.run(go())
    w.close("complete")
    (rec,) = read_bundle(tmp_path / "b").dcgm
    return rec


def test_an_exporters_implausible_and_non_finite_samples_are_kept_out_with_their_reason(tmp_path):
    rec = scrape_page(tmp_path, hostile(PAGE))
    assert rec["ok"]
    why = {k.split("{")[0] + ("/0" if 'gpu="0"' in k else "/1"): v for k, v in rec["withheld"].items()}
    assert set(why) == {"DCGM_FI_DEV_POWER_USAGE/0", "DCGM_FI_PROF_DRAM_ACTIVE/0",
                        "DCGM_FI_DEV_SM_CLOCK/0", "DCGM_FI_DEV_GPU_TEMP/1", "DCGM_FI_DEV_POWER_USAGE/1"}
    assert "power_w range" in why["DCGM_FI_DEV_POWER_USAGE/0"]
    assert "5 reads as 500" in why["DCGM_FI_PROF_DRAM_ACTIVE/0"]
    assert "sm_clock_mhz range (0" in why["DCGM_FI_DEV_SM_CLOCK/0"]
    assert "non-finite" in why["DCGM_FI_DEV_GPU_TEMP/1"] and "inf" in why["DCGM_FI_DEV_POWER_USAGE/1"]
    assert not set(rec["withheld"]) & set(rec["samples"])
    rows = dcgm.dcgm_gpu_rows([rec])
    assert "power_w" not in rows[0] and "sm_clock_mhz" not in rows[0] and rows[0]["mem_clock_mhz"] == 3201
    assert "temperature_c" not in rows[1] and "power_w" not in rows[1]
    # A plausible page keeps every sample and says nothing withheld.
    assert "withheld" not in scrape_page(tmp_path / "again", PAGE)


def test_a_power_or_clock_above_what_the_page_states_of_its_gpu_is_withheld(tmp_path):
    # GPU 0's page states a 700 W limit and a 1,980 MHz maximum SM clock; GPU 1's states no clock.
    page = PAGE + (f'DCGM_FI_DEV_MAX_SM_CLOCK{{{GPU0}}} 1980\n')
    lines = page.splitlines()
    for i, line in enumerate(lines):
        if line.startswith((f"DCGM_FI_DEV_POWER_USAGE{{{GPU0}", f"DCGM_FI_DEV_POWER_USAGE{{{GPU1}")):
            lines[i] = line.rsplit(" ", 1)[0] + " 5000"
        if line.startswith((f"DCGM_FI_DEV_SM_CLOCK{{{GPU0}", f"DCGM_FI_DEV_SM_CLOCK{{{GPU1}")):
            lines[i] = line.rsplit(" ", 1)[0] + " 2600"
    rec = scrape_page(tmp_path, "\n".join(lines) + "\n")
    why = {k.split("{")[0] + ("/0" if 'gpu="0"' in k else "/1"): v for k, v in rec["withheld"].items()}
    assert set(why) == {"DCGM_FI_DEV_POWER_USAGE/0", "DCGM_FI_DEV_POWER_USAGE/1", "DCGM_FI_DEV_SM_CLOCK/0"}
    assert "5000 W, above the device's maximum power_w" in why["DCGM_FI_DEV_POWER_USAGE/0"]
    assert "exporter's page" in why["DCGM_FI_DEV_POWER_USAGE/1"]
    assert "2600 MHz, above the device's maximum sm_clock_mhz of 2079 MHz" in why["DCGM_FI_DEV_SM_CLOCK/0"]
    rows = dcgm.dcgm_gpu_rows([rec])
    assert "power_w" not in rows[0] and "power_w" not in rows[1] and "sm_clock_mhz" not in rows[0]
    assert rows[1]["sm_clock_mhz"] == 2600      # no maximum stated of GPU 1's clock


def test_an_exporter_label_that_is_no_gpu_index_is_withheld_and_refused_on_read(tmp_path):
    rec = scrape_page(tmp_path, PAGE.replace('gpu="1"', 'gpu="abc"'))
    assert all('gpu="abc"' not in k for k in rec["samples"])
    assert all("not a GPU index" in v for v in rec["withheld"].values()) and rec["withheld"]
    # A bundle that holds one anyway (written by hand, or before) is refused naming line and sample.
    b = tmp_path / "b"
    with open(b / "dcgm.jsonl", "a") as f:
        f.write(json.dumps({"t": 99.0, "dt": 0.01, "ok": True,
                            "samples": {'DCGM_FI_DEV_GPU_TEMP{gpu="abc"}': 40.0}}) + "\n")
    with pytest.raises(BundleError, match=r"dcgm.jsonl line 2: sample .*gpu='abc' is not a GPU index"):
        read_bundle(b)


def test_a_bundle_recorded_before_keeps_an_implausible_value_out_of_the_gpu_rows():
    # HAND-BUILT record as an older collector wrote it: -700 W and a DRAM activity of 5.0.
    rec = {"t": 1.0, "ok": True, "samples": {'DCGM_FI_DEV_POWER_USAGE{gpu="0"}': -700.0,
                                             'DCGM_FI_PROF_DRAM_ACTIVE{gpu="0"}': 5.0,
                                             'DCGM_FI_DEV_GPU_TEMP{gpu="0"}': 50.0}}
    (row,) = dcgm.dcgm_gpu_rows([rec])
    assert row == {"t": 1.0, "gpu": 0, "temperature_c": 50.0}


@pytest.mark.parametrize("stream, record, field", [
    ("gpu", {"t": 0.0, "gpu": 0, "power_w": float("nan")}, "power_w"),
    ("host", {"t": 0.0, "cores": 2, "cpu_busy_s": float("inf"), "cpu_total_s": 1.0,
              "client_cpu_s": 0.1}, "cpu_busy_s"),
    ("metrics", {"t": 0.0, "dt": 0.1, "ok": True, "samples": {"vllm:x": float("-inf")}}, "samples.vllm:x"),
    ("requests", {"point": "a", "i": 0, "server_metrics": {"queue_time_ms": float("nan")}},
     "server_metrics.queue_time_ms"),
])
def test_the_writer_refuses_a_non_finite_number_in_any_stream(tmp_path, stream, record, field):
    w = BundleWriter(tmp_path / "b", {"engine": {}, "plan": {}, "tool": {}})
    with pytest.raises(ValueError, match=rf"reader would refuse: {field} is .*not a finite number"):
        w.append(stream, record)
    w.close("complete")
    assert read_bundle(tmp_path / "b")     # nothing half-written


def test_a_maximum_no_device_has_bounds_nothing():
    from bundle.plausible import device_maxima, screen
    assert device_maxima(1e-300, 50, 0) == {}
    # An exporter stating a 0.001 W limit withholds nothing for it; a 700 W one bounds its GPU.
    samples = {'DCGM_FI_DEV_POWER_MGMT_LIMIT{gpu="0"}': 0.001, 'DCGM_FI_DEV_POWER_USAGE{gpu="0"}': 300.0,
               'DCGM_FI_DEV_POWER_MGMT_LIMIT{gpu="1"}': 700.0, 'DCGM_FI_DEV_POWER_USAGE{gpu="1"}': 1100.0}
    kept, withheld = screen(samples)
    assert list(withheld) == ['DCGM_FI_DEV_POWER_USAGE{gpu="1"}']
    assert kept['DCGM_FI_DEV_POWER_USAGE{gpu="0"}'] == 300.0
