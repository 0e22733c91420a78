"""What operators run and watch: readiness, metrics, retention, export and crash recovery."""
