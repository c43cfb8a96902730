"""What pgsched tells operators: Prometheus metrics, OpenTelemetry traces, and secrets kept out of logs."""
