"""What operators run and watch: readiness, metrics, retention, export, crash recovery, the collector's tuning and SQLite checkpoints."""
