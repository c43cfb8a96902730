"""The long-running processes: the worker and its threads, the scanner, and the in-process drain."""
