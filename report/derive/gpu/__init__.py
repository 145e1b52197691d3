"""The GPU's own samples: power, clocks, utilisation and counters (power), and the energy a window used (energy)."""
