"""A module no worker may import: job rows name it, but handlers are looked up by registered name only."""

IMPORTED = True


def run() -> str:
    return "this must never run"
