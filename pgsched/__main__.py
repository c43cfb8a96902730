"""`python -m pgsched` runs the command line."""

from pgsched.cli import run

run()
