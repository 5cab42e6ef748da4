"""The renderer registry and the committed rendered configs: every OS registered, unknown OS refused,
switch-configs/rendered/ exactly what `python -m geryon.fabric.render --regenerate` writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from geryon.fabric.intent import OSES, IntentError, default_intent
from geryon.fabric.render import (
    EXTENSIONS,
    INTENTS_DIR,
    RENDERED_DIR,
    RENDERERS,
    regenerate,
    render,
    rendered_files,
)


def test_registry_covers_every_os() -> None:
    assert set(RENDERERS) == set(OSES) == set(EXTENSIONS)
    for os_name in ("sonic", "cumulus", "eos"):
        assert render(default_intent(), os_name) == RENDERERS[os_name](default_intent(), None)
    assert render(default_intent(), "linux", "p0").startswith("#!/bin/sh\n")


def test_unknown_os() -> None:
    with pytest.raises(
        IntentError, match=r"os: 'junos' is not a switch OS; allowed: sonic, cumulus, eos, linux"
    ):
        render(default_intent(), "junos")


def test_rendering_is_deterministic() -> None:
    assert rendered_files() == rendered_files()


def test_committed_rendered_configs_are_not_stale() -> None:
    want = rendered_files(INTENTS_DIR)
    have = {p.relative_to(RENDERED_DIR): p.read_text() for p in RENDERED_DIR.rglob("*") if p.is_file()}
    stale = sorted(str(p) for p in set(want) | set(have) if want.get(p) != have.get(p))
    assert not stale, f"stale: {stale}; run `python -m geryon.fabric.render --regenerate` and commit"
    names = {p.stem for p in INTENTS_DIR.glob("*.yaml")}
    assert {"geryon-2class", "geryon-3class", "roce-ecn"} <= names
    assert {str(p.parent) for p in want} == names


def test_regenerate_command_writes_and_prunes(tmp_path: Path) -> None:
    out = tmp_path / "rendered"
    (out / "gone").mkdir(parents=True)
    (out / "gone" / "old.json").write_text("{}")
    r = subprocess.run(
        [sys.executable, "-m", "geryon.fabric.render", "--regenerate", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert not (out / "gone").exists()
    written = {p.relative_to(out): p.read_text() for p in out.rglob("*") if p.is_file()}
    assert written == rendered_files(INTENTS_DIR)
    assert regenerate(INTENTS_DIR, out) and {
        p.relative_to(out) for p in out.rglob("*") if p.is_file()
    } == set(written)


def test_regenerate_refuses_a_bad_intent(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("name: bad\nclasses: []\n")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "geryon.fabric.render",
            "--regenerate",
            "--intents",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "classes: 0 classes; allowed 1-8" in r.stderr
    assert not (tmp_path / "out").exists()
