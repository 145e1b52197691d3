"""The cost of a round's GPU quantities is linear in the GPU rows, however many GPUs a page names:
each GPU's quantity reads that GPU's rows through one index (power.GpuRows), not every row."""

from __future__ import annotations

import pytest

from report.derive.gpu import dcgm, power

READS = [0]


class CountedRow(dict):
    """A GPU row that counts the reads of its fields."""

    def get(self, key, default=None):
        READS[0] += 1
        return super().get(key, default)

    def __getitem__(self, key):
        READS[0] += 1
        return super().__getitem__(key)


def scrapes(gpus: int, ticks: int) -> list[dict]:
    return [{"t": float(t), "ok": True, "samples": {
        f'DCGM_FI_DEV_POWER_USAGE{{gpu="{g}"}}': 300.0 + g for g in range(gpus)}} for t in range(ticks)]


@pytest.mark.parametrize("gpus", [50, 400])
def test_every_gpus_power_reads_each_row_a_bounded_number_of_times(gpus):
    ticks = 4
    rows = power.GpuRows(CountedRow(r) for r in dcgm.dcgm_gpu_rows(scrapes(gpus, ticks)))
    assert len(rows) == gpus * ticks
    READS[0] = 0
    powers = [power.median_power_w(rows, 0.0, ticks - 1.0, g) for g in range(gpus)]
    assert powers == [300.0 + g for g in range(gpus)]
    # Linear: a few reads per row (the index, the window, the field); all GPUs' rows read for
    # each GPU would be gpus times as many (20,000 and 640,000 reads here).
    assert READS[0] <= 6 * gpus * ticks


def test_a_plain_list_of_rows_gives_the_same_values_as_the_index():
    rows = dcgm.dcgm_gpu_rows(scrapes(5, 3))
    assert [power.median_power_w(rows, 0.0, 2.0, g) for g in range(5)] == \
        [power.median_power_w(power.GpuRows(rows), 0.0, 2.0, g) for g in range(5)]
