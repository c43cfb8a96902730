"""Finding the user's application from a `module:attribute` reference (`pgsched worker --app`)."""

from __future__ import annotations

import importlib
import os
import sys

from pgsched.core.registry import Registry
from pgsched.errors import ConfigurationError


def load_registry(reference: str) -> Registry:
    """Import ``module:attribute`` (or ``module``, which must hold exactly one App) and return what it names.

    The runtime needs only the registry (a process pool's child loads the App this way); ``pgsched.api.loader``
    holds the result to be an App.
    """
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
        apps = [v for v in vars(module).values() if isinstance(v, Registry)]
        if len(apps) != 1:
            raise ConfigurationError(
                f"module {module_name!r} holds {len(apps)} App objects; say which: {module_name}:NAME"
            )
        found = apps[0]
    if not isinstance(found, Registry):
        raise ConfigurationError(f"{reference} is a {type(found).__name__}, not a pgsched App")
    return found
