"""Finding the user's App from a `module:attribute` reference."""

from __future__ import annotations

import importlib
import os
import sys

from pgsched.api.app import App
from pgsched.errors import ConfigurationError


def load_app(reference: str) -> App:
    """Import ``module:attribute`` (or ``module``, which must hold exactly one App) and return the App."""
    module_name, _, attribute = reference.partition(":")
    if not module_name:
        raise ConfigurationError(f"--app needs MODULE:ATTRIBUTE, got {reference!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r} for --app: {exc}") from exc
    if attribute:
        try:
            found = getattr(module, attribute)
        except AttributeError:
            raise ConfigurationError(f"module {module_name!r} has no attribute {attribute!r}") from None
    else:
        apps = [v for v in vars(module).values() if isinstance(v, App)]
        if len(apps) != 1:
            raise ConfigurationError(
                f"module {module_name!r} holds {len(apps)} App objects; say which: {module_name}:NAME"
            )
        found = apps[0]
    if not isinstance(found, App):
        raise ConfigurationError(f"{reference} is a {type(found).__name__}, not a pgsched App")
    return found
