"""Golden files for the switch renderers: tests/fabric/golden/rendered/<intent>/<os>.<ext>, rendered
from the test intents in tests/fabric/golden/intents/ (edge cases the committed intents do not cover).

GERYON_UPDATE_GOLDEN=1 rewrites them instead of comparing (then review the diff and commit).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from geryon.fabric.render import regenerate, rendered_files

GOLDEN = Path(__file__).resolve().parent / "golden"
INTENTS = GOLDEN / "intents"
RENDERED = GOLDEN / "rendered"
UPDATE = os.environ.get("GERYON_UPDATE_GOLDEN") == "1"


def check_golden(os_name: str) -> list[Path]:
    """Renders every golden intent for `os_name` and compares with the golden files (or rewrites them
    all under GERYON_UPDATE_GOLDEN=1). Returns the files compared; fails with a diff on a difference."""
    if UPDATE:
        regenerate(INTENTS, RENDERED)
    want = {rel: text for rel, text in rendered_files(INTENTS).items() if rel.name.startswith(f"{os_name}.")}
    assert want, f"no golden intents render for {os_name}"
    for rel, text in want.items():
        path = RENDERED / rel
        assert path.exists(), f"{path} is missing; run with GERYON_UPDATE_GOLDEN=1 to create it"
        have = path.read_text(encoding="utf-8")
        if have != text:
            diff = "".join(
                difflib.unified_diff(
                    have.splitlines(True), text.splitlines(True), str(path), "rendered now", n=2
                )
            )
            raise AssertionError(f"{path} differs from the renderer's output:\n{diff[:4000]}")
    return [RENDERED / rel for rel in want]
