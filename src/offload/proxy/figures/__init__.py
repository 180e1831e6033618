"""The proxy's counters and per-turn figures, and their Prometheus text."""
