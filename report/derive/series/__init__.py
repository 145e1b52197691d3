"""A bundle's /metrics scrapes: reading them (scrapes), the sampler's own record (sampler), vLLM's cache_config_info (cache_config), and the server's counters and gauges as quantities (server)."""
