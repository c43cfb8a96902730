"""Finding the user's App from a `module:attribute` reference."""

from __future__ import annotations

from pgsched.api.app import App
from pgsched.core.loader import load_registry
from pgsched.errors import ConfigurationError


def load_app(reference: str) -> App:
    """Import ``module:attribute`` (or ``module``, which must hold exactly one App) and return the App."""
    found = load_registry(reference)
    if not isinstance(found, App):
        raise ConfigurationError(f"{reference} is a {type(found).__name__}, not a pgsched App")
    return found
