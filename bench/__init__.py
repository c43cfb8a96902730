"""pgsched's benchmark harness (run it with ``python bench/run.py``)."""
