"""Settings of the test Django project: its database is the test PostgreSQL (PGSCHED_DJANGO_DSN), pgsched's too."""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ["PGSCHED_DJANGO_DSN"])

SECRET_KEY = "only-for-tests"
USE_TZ = True
INSTALLED_APPS = ["django_tasks", "tests.django_project"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db["dbname"],
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
    }
}
TASKS = {
    "default": {
        "BACKEND": "pgsched.contrib.django.PgschedBackend",
        "QUEUES": ["default", "emails"],
    },
    "retrying": {
        "BACKEND": "pgsched.contrib.django.PgschedBackend",
        "QUEUES": ["retries"],
        "OPTIONS": {"MAX_ATTEMPTS": 2},
    },
}
