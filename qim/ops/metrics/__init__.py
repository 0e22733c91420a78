"""Prometheus metrics (issue #21 item 1): instruments, the scrape-time collector, the guarded
/metrics endpoint. docs/operations.md, "Metrics", lists every name."""
