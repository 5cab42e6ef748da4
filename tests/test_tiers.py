"""The tier table (tests/conftest.py) against the test modules it describes: no stale names, and no
unit-tier module that reaches for TensorFlow, root or a process (which would slow `make check` or
fail it on a machine without them)."""

from __future__ import annotations

import ast
from pathlib import Path

import conftest

TESTS = Path(__file__).resolve().parent

# Imports that put a module outside the unit tier: TensorFlow and Keras, the helpers that start TF
# servers, namespaces, Prometheus, etcd, the agent as a process, or build wheels.
HEAVY = {
    "tensorflow",
    "keras",
    "tf_keras",
    "ps_cluster",
    "tf.tf_cluster",
    "obs_netns",
    "prom_server",
    "live_agent",
    "demo_proc",
    "wheel_build",
    "jobs.etcd_server",
    "selenium",
    "geryon.testbed",
    "geryon.cluster.local",
}


def modules() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_every_module_in_the_tables_exists() -> None:
    known = {p.relative_to(TESTS).with_suffix("").as_posix() for p in modules()}
    folders = {p.relative_to(TESTS).parent.as_posix() for p in modules()}
    named = [*conftest.TIERS, *conftest.SLOW_UNITS, *conftest.LONGEST_FIRST]
    stale = [m for m in named if m not in known | folders]
    assert stale == [], f"tests/conftest.py names modules that do not exist: {stale}"
    assert set(conftest.TIERS.values()) <= set(conftest.NEEDS) - {"unit"}


def test_unit_modules_import_nothing_heavy() -> None:
    heavy = {}
    for path in modules():
        if conftest.tier_of(path) != "unit":
            continue
        hits = sorted(n for n in imported(path) if any(n == h or n.startswith(h + ".") for h in HEAVY))
        if hits:
            heavy[path.relative_to(TESTS).as_posix()] = hits
    assert heavy == {}, f"unit-tier modules that need a tier in tests/conftest.py TIERS: {heavy}"
