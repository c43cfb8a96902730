"""Integrations with frameworks, each behind its extra: ``pgsched.contrib.django`` (``pgsched[django]``)."""
