"""Renderers of a QosIntent for each switch OS: RENDERERS[os](intent, ports) -> config text.

Plain Python, deterministic output (stable order, sorted keys), no template engine. `ports` overrides
the intent's `ports.<os>` selection (a comma-separated string or a list; syntax in schema.md).
`python -m geryon.fabric.render --regenerate` rewrites switch-configs/rendered/ from
switch-configs/intents/.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from geryon.fabric.intent import OSES, IntentError, QosIntent, load_intent
from geryon.fabric.render import cumulus, eos, linux, sonic

Renderer = Callable[[QosIntent, "Sequence[str] | str | None"], str]

RENDERERS: dict[str, Renderer] = {
    "sonic": sonic.render,
    "cumulus": cumulus.render,
    "eos": eos.render,
    "linux": linux.render,
}
# File extension of each OS's rendered config: switch-configs/rendered/<intent>/<os>.<ext>
EXTENSIONS = {"sonic": "json", "cumulus": "sh", "eos": "cfg", "linux": "sh"}
# Ports used when an intent names none for an OS (the Linux switch's ports come from the testbed).
EXAMPLE_PORTS = {"linux": "s-ps0,s-ps1,s-wk0,s-wk1"}

REPO = Path(__file__).resolve().parents[3]
INTENTS_DIR = REPO / "switch-configs" / "intents"
RENDERED_DIR = REPO / "switch-configs" / "rendered"


def render(intent: QosIntent, os: str, ports: Sequence[str] | str | None = None) -> str:
    """The config for `os` (one of OSES). Raises IntentError for an unknown OS, a bad port selection,
    or an intent the OS cannot express."""
    if os not in RENDERERS:
        raise IntentError(f"os: {os!r} is not a switch OS; allowed: {', '.join(OSES)}")
    return RENDERERS[os](intent, ports)


def rendered_files(intents_dir: Path = INTENTS_DIR) -> dict[Path, str]:
    """{relative path under rendered/: text} for every intent file and every OS it can be rendered for.
    An OS that refuses an intent (IntentError) gets a .txt file saying why, so the refusal is visible
    and tested like any output."""
    out: dict[Path, str] = {}
    for path in sorted(intents_dir.glob("*.yaml")):
        intent = load_intent(path)
        for os_name in OSES:
            ports = None if intent.ports_for(os_name) else EXAMPLE_PORTS.get(os_name)
            try:
                text = render(intent, os_name, ports)
                out[Path(intent.name) / f"{os_name}.{EXTENSIONS[os_name]}"] = text
            except IntentError as e:
                out[Path(intent.name) / f"{os_name}.refused.txt"] = f"{e}\n"
    return out


def regenerate(intents_dir: Path = INTENTS_DIR, rendered_dir: Path = RENDERED_DIR) -> list[Path]:
    """Rewrites rendered_dir from intents_dir (stale files removed). Returns the files written."""
    files = rendered_files(intents_dir)
    if rendered_dir.exists():
        for old in sorted(rendered_dir.rglob("*"), reverse=True):
            if old.is_file() and old.relative_to(rendered_dir) not in files:
                old.unlink()
            elif old.is_dir() and not any(old.iterdir()):
                old.rmdir()
    written = []
    for rel, text in files.items():
        target = rendered_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
        written.append(target)
    return written
