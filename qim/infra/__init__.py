"""Plumbing every layer may use: database and Redis access, backends, batching, rate limits, outages, logging context, fault points, the collector and SQLite checkpoints."""
