"""The benchmark machinery: bootstrap, server, orchestration, measurement, reporting."""
