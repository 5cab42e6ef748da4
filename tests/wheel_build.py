"""Builds Geryon's wheel from this checkout as `python -m build` does: the sdist first (setuptools'
PEP 517 hook), then the wheel from the unpacked sdist (`pip wheel --no-deps --no-build-isolation`:
this environment's setuptools, no index needed). So the wheel holds only what the sdist carried, and
the checkout gets no build/ folder (only the geryon.egg-info the sdist hook writes, in .gitignore)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def run(command: list[str], cwd: Path, timeout: float = 300, env: dict[str, str] | None = None) -> str:
    """Runs `command`, by default without PYTHONPATH (it names the checkout); its stdout, or an
    AssertionError with the output's tail."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
    assert proc.returncode == 0, f"{command} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def build_wheel(tmp: Path) -> Path:
    """The wheel (tmp/dist/geryon-*.whl), built from the sdist (tmp/sdist/geryon-*.tar.gz)."""
    sdist_dir, dist = tmp / "sdist", tmp / "dist"
    hook = f"from setuptools import build_meta; build_meta.build_sdist({str(sdist_dir)!r})"
    run([sys.executable, "-c", hook], cwd=REPO_ROOT)
    (sdist,) = sdist_dir.glob("geryon-*.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(sdist_dir, filter="data")
    (unpacked,) = (p for p in sdist_dir.iterdir() if p.is_dir())
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist)]
    run([*pip, str(unpacked)], cwd=tmp)
    (wheel,) = dist.glob("geryon-*.whl")
    return wheel
