"""The C++ unit tests of the native rendezvous' pure parts (native/rendezvous/tests/*_test.cc).

They cover what the transport decides without TensorFlow: the wire format, the send order (queue,
host order, chunk sizes), the burst hold and the open flows' re-marking (on loopback sockets)
(native/rendezvous/README.md, "C++ unit tests"). The binary is built from the tests and the pure
sources alone (PURE_SOURCES, with the rendezvous folder as include path and no TensorFlow flags, so
a TF header creeping into a pure part fails this build), linked against GoogleTest as Debian's
libgtest-dev ships it (prebuilt libgtest.a and libgtest_main.a; scripts/bootstrap.sh installs it),
and cached like the library: ``<cache root>/cpp-tests/<hash>/geryon_cpp_tests``, the hash over the
sources' names and bytes, the compiler and the flags.

``python -m geryon.tf.cpp_tests [gtest args]`` (``make cpp-test``) builds when needed and runs them;
tests/tf/test_cpp_unit.py does the same under pytest and skips when GoogleTest is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from geryon.tf.build import SOURCE_DIR, BuildError, _compiler, _lock, _run, cache_root, compiler_file

__all__ = ["BINARY_NAME", "PURE_SOURCES", "TEST_DIR", "GtestMissing", "build", "find_gtest", "run"]

BINARY_NAME = "geryon_cpp_tests"
TEST_DIR = SOURCE_DIR / "tests"
# The library's sources the tests link: the parts that need no TensorFlow. Their headers
# (wire_format.h, send_order.h, burst_hold.h, open_flows.h, clock.h, tsan.h) include nothing of TF's;
# open_flows' tests use real loopback sockets.
PURE_SOURCES = ("wire_format.cc", "send_order.cc", "open_flows.cc")
_CFLAGS = ["-std=c++17", "-O1", "-g", "-Wall", "-Wextra", "-Wno-unused-parameter", "-pthread"]


class GtestMissing(BuildError):
    """GoogleTest's headers or libraries are not installed (Debian: apt-get install libgtest-dev)."""


@dataclass(frozen=True)
class Gtest:
    include: Path
    libgtest: Path
    libgtest_main: Path


def find_gtest(compiler: str | None = None) -> Gtest:
    """GoogleTest as the compiler finds it: the header on its include path (or $GTEST_INCLUDE), the
    static libraries on its library path (`-print-file-name`)."""
    compiler = compiler or _compiler()
    include = Path(os.environ.get("GTEST_INCLUDE", "/usr/include"))
    libgtest = compiler_file("libgtest.a", compiler)
    libgtest_main = compiler_file("libgtest_main.a", compiler)
    if not (include / "gtest" / "gtest.h").exists() or libgtest is None or libgtest_main is None:
        raise GtestMissing(
            "GoogleTest is not installed (no gtest/gtest.h under "
            f"{include}, or no libgtest.a/libgtest_main.a for {compiler}): `apt-get install libgtest-dev` "
            "(Debian 12 ships them prebuilt; scripts/bootstrap.sh installs it as root)"
        )
    return Gtest(include, libgtest, libgtest_main)


def _sources(source_dir: Path) -> tuple[list[Path], list[Path]]:
    tests = sorted((source_dir / "tests").glob("*_test.cc"))
    if not tests:
        raise BuildError(f"no C++ unit tests in {source_dir / 'tests'}")
    return tests, [source_dir / name for name in PURE_SOURCES]


def build(source_dir: Path = SOURCE_DIR, cache_dir: Path | None = None, force: bool = False) -> Path:
    """The test binary, compiled first unless the cache has it (one compiler call: a few seconds)."""
    compiler = _compiler()
    gtest = find_gtest(compiler)
    tests, pure = _sources(source_dir)
    flags = [*_CFLAGS, f"-I{source_dir}", f"-I{gtest.include}"]
    digest = hashlib.sha256()
    for path in sorted([*tests, *pure, *source_dir.glob("*.h"), *(source_dir / "tests").glob("*.h")]):
        digest.update(str(path.relative_to(source_dir)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(json.dumps([compiler, flags, str(gtest.libgtest)]).encode())
    root = cache_dir if cache_dir is not None else cache_root()
    directory = root / "cpp-tests" / digest.hexdigest()[:16]
    output = directory / BINARY_NAME
    if output.exists() and not force:
        return output
    with _lock(directory.parent / f".{directory.name}.lock"):
        if output.exists() and not force:
            return output
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".build-", dir=directory) as tmp:
            staged = Path(tmp, BINARY_NAME)
            command = [compiler, *flags, *map(str, [*tests, *pure]), "-o", str(staged)]
            libraries = [str(gtest.libgtest_main), str(gtest.libgtest), "-pthread"]
            _run([*command, *libraries], "compiling the C++ unit tests")
            os.replace(staged, output)
    return output


def run(args: list[str] | None = None, binary: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Runs the tests (building them first when needed); gtest's output is returned, not printed."""
    binary = binary or build()
    return subprocess.run([str(binary), *(args or [])], capture_output=True, text=True, check=False)


def main(argv: list[str]) -> int:
    try:
        binary = build()
    except BuildError as e:
        print(f"geryon cpp tests: {e}", file=sys.stderr)
        return 2
    return subprocess.run([str(binary), *argv], check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
