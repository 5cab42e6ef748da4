"""Renderers of a QosIntent for each switch OS: RENDERERS[os](intent, ports) -> config text.

Plain Python, deterministic output (stable order, sorted keys), no template engine. `ports` overrides
the intent's `ports.<os>` selection (a comma-separated string or a list, syntax in schema.md).
`python -m geryon.fabric.render --regenerate` rewrites switch-configs/rendered/.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from geryon.fabric.intent import OSES, IntentError, QosIntent
from geryon.fabric.render import linux

Renderer = Callable[[QosIntent, "Sequence[str] | str | None"], str]

RENDERERS: dict[str, Renderer] = {
    "linux": linux.render,
}
# File extension of each OS's rendered config under switch-configs/rendered/<intent>/<os>.<ext>.
EXTENSIONS = {"linux": "sh"}


def render(intent: QosIntent, os: str, ports: Sequence[str] | str | None = None) -> str:
    """The config for `os` (one of OSES). Raises IntentError for an unknown OS or a bad port selection."""
    if os not in RENDERERS:
        raise IntentError(
            f"os: {os!r} is not a switch OS; allowed: {', '.join(o for o in OSES if o in RENDERERS)}"
        )
    return RENDERERS[os](intent, ports)
