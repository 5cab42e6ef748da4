"""Errors the CLI reports as one clear line and exit code 2 (bad input), never as a traceback."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user: a config, an argument, a model. The message names the field."""
