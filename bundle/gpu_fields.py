"""The fields of gpu.jsonl samples and the meaning of their clock-event ("throttle") bits."""

from __future__ import annotations

# Clock event ("throttle") reason bits as gpu.jsonl's `throttle_reasons` mask holds them:
# nvml.h's nvmlClocksEventReason* values (NVML's ABI, which pynvml's constants repeat).
_REASON_BITS: tuple[tuple[str, str, int], ...] = (
    ("GpuIdle", "gpu_idle", 0x1),
    ("ApplicationsClocksSetting", "applications_clocks_setting", 0x2),
    ("SwPowerCap", "sw_power_cap", 0x4),
    ("HwSlowdown", "hw_slowdown", 0x8),
    ("SyncBoost", "sync_boost", 0x10),
    ("SwThermalSlowdown", "sw_thermal_slowdown", 0x20),
    ("HwThermalSlowdown", "hw_thermal_slowdown", 0x40),
    ("HwPowerBrakeSlowdown", "hw_power_brake_slowdown", 0x80),
    ("DisplayClockSetting", "display_clock_setting", 0x100),
    ("BoardLimit", "board_limit", 0x200),
    ("Reliability", "reliability", 0x400),
)

# The sample fields, in the order they are written.
SAMPLE_FIELDS = (
    "power_w", "power_limit_w", "temperature_c", "sm_clock_mhz", "mem_clock_mhz",
    "gpu_util_pct", "mem_util_pct", "mem_used_bytes", "energy_mj", "throttle_reasons", "pstate",
)


def reason_bits() -> list[tuple[int, str]]:
    """(bit, name) for every known clock event reason."""
    return [(bit, name) for _, name, bit in _REASON_BITS]


def decode_throttle_reasons(mask: int) -> list[str]:
    """The names of the clock event reasons set in MASK; an unknown bit reads 'unknown_0x…'."""
    if mask is None:
        return []
    mask = int(mask)
    names, known = [], 0
    for bit, name in reason_bits():
        known |= bit
        if mask & bit:
            names.append(name)
    rest = mask & ~known
    b = 1
    while rest:
        if rest & b:
            names.append(f"unknown_{b:#x}")
            rest &= ~b
        b <<= 1
    return names

# GPM counter fields (bench/samplers/gpm.py), present from a GPM-capable GPU's second sample on: the
# interval the counters cover (s, ending at the row's t), then NVML's GPM metrics over it:
# shares in % (0-100) and bandwidths in MiB/s (2**20 bytes per second).
GPM_FIELDS = (
    "gpm_interval_s", "gpm_dram_bw_util_pct", "gpm_any_tensor_util_pct",
    "gpm_hmma_tensor_util_pct", "gpm_sm_util_pct", "gpm_sm_occupancy_pct",
    "gpm_nvlink_rx_mib_s", "gpm_nvlink_tx_mib_s", "gpm_pcie_rx_mib_s", "gpm_pcie_tx_mib_s",
)
