"""The native build: a clean build of the real sources, the cache, the lock, and the clear errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from geryon.tf.build import (
    BUILD_INFO,
    CHECKOUT_NATIVE,
    LIBRARY_NAME,
    PACKAGED_NATIVE,
    SOURCE_DIR,
    BuildError,
    _without_install_dir,
    build,
    native_sources,
    plan,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
TF_VERSION = "2.21.0"

# A library with the C entry point load() checks, compiled in a second: it stands in for a library
# built against another TensorFlow release without a 40-second compile of the real server.
_TINY = """
extern "C" __attribute__((visibility("default"))) const char* geryon_rendezvous_tf_version() {
  return GERYON_TF_VERSION_OVERRIDE;
}
"""


def _python(
    code: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
    )


def _tiny_sources(tmp_path: Path, version: str) -> Path:
    src = tmp_path / f"src-{version}"
    src.mkdir()
    (src / "tiny.cc").write_text(_TINY.replace("GERYON_TF_VERSION_OVERRIDE", f'"{version}"'))
    return src


@pytest.mark.slow
def test_clean_build_of_the_real_sources_loads_and_registers_the_protocol(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    result = _python(
        f"""
        import json, os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from tf_cluster import DATA_OFFSET, pick_ports
        import geryon.tf
        from geryon.tf.build import build
        path = build()
        lib = geryon.tf.load()
        import tensorflow as tf
        port = pick_ports(1)[0]
        spec = tf.train.ClusterSpec({{"ps": [f"127.0.0.1:{{port}}"]}})
        server = geryon.tf.server(spec, "ps", 0, data_port_offset=DATA_OFFSET)
        import socket
        socket.create_connection(("127.0.0.1", port + DATA_OFFSET), timeout=5).close()  # data plane is up
        print(json.dumps({{"path": str(path), "loaded": str(lib.path), "target": server.target,
                          "tf": lib.tf_version}}))
        sys.stdout.flush()
        os._exit(0)
        """,
        env={"GERYON_NATIVE_CACHE": str(cache)},
        # A hang guard, not a timing: the build takes ~100 s on a quiet 2-core machine and passed
        # 300 s beside three other test workers and three other engineers' jobs (load 7, 2026-12-02).
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "building the Geryon rendezvous extension" in result.stderr
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    library = Path(facts["path"])
    assert library.parent.parent == cache and library.name == LIBRARY_NAME and library.exists()
    assert facts["loaded"] == facts["path"] and facts["tf"] == TF_VERSION
    assert facts["target"].startswith("grpc://")  # TF1 sessions find their factory by this prefix
    info = json.loads((library.parent / BUILD_INFO).read_text())
    assert info["tf_version"] == TF_VERSION
    assert set(info["sources"]) == {p.name for p in SOURCE_DIR.glob("*.cc")}
    # The exported symbols the Python side uses are there.
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True
    ).stdout
    for name in ("geryon_rendezvous_tf_version", "geryon_flow_counters", "geryon_set_class_marks"):
        assert name in symbols


def test_the_cache_is_keyed_by_sources_and_a_second_build_reuses_it(tmp_path: Path) -> None:
    src = _tiny_sources(tmp_path, TF_VERSION)
    first = build(source_dir=src, cache_dir=tmp_path / "cache")
    stamp = first.stat().st_mtime_ns
    assert build(source_dir=src, cache_dir=tmp_path / "cache") == first
    assert first.stat().st_mtime_ns == stamp  # not rebuilt
    assert first.parent.name.startswith(f"{TF_VERSION}-")
    # A changed source is a new cache entry; the old one stays for processes still using it.
    (src / "tiny.cc").write_text((src / "tiny.cc").read_text() + "\n// changed\n")
    second = build(source_dir=src, cache_dir=tmp_path / "cache")
    assert second != first and second.exists() and first.exists()
    assert plan(src, tmp_path / "cache").output == second


def test_the_cache_key_leaves_out_where_tensorflow_is_installed() -> None:
    # The same TF release in another venv (a fresh clone, a wheel's venv) reuses the build: only the
    # folder TF is installed in differs, in its headers, libraries and the runpath.
    def flags(root: str) -> tuple[list[str], list[str]]:
        tf = f"{root}/lib/python3.11/site-packages/tensorflow"
        return (
            [f"-I{tf}/include", "--std=c++17", f"-I{tf}/include/external/farmhash_archive/src"],
            [f"-L{tf}", "-l:libtensorflow_framework.so.2", f"-Wl,-rpath,{tf}", "-Wl,--no-undefined"],
        )

    a, b = _without_install_dir(*flags("/work/main/.venv")), _without_install_dir(*flags("/tmp/x/venv"))
    assert a == b
    assert a[0][0] == "-I<tensorflow>/include" and a[1][2] == "-Wl,-rpath,<tensorflow>"
    assert _without_install_dir(["-DX=1"], []) != _without_install_dir(["-DX=2"], [])


def test_concurrent_builds_compile_once(tmp_path: Path) -> None:
    src = _tiny_sources(tmp_path, TF_VERSION)
    cache = tmp_path / "cache"
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(build(source_dir=src, cache_dir=cache)))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 3 and len(set(results)) == 1
    # Only the installed library and its facts are left: no half-written files, no stray build dirs.
    assert sorted(p.name for p in results[0].parent.iterdir()) == [BUILD_INFO, LIBRARY_NAME]


def test_a_library_for_another_tensorflow_is_refused_before_it_is_loaded(tmp_path: Path) -> None:
    library = build(source_dir=_tiny_sources(tmp_path, TF_VERSION), cache_dir=tmp_path / "cache")
    info = json.loads((library.parent / BUILD_INFO).read_text())
    (library.parent / BUILD_INFO).write_text(json.dumps({**info, "tf_version": "2.20.0"}))
    result = _python(f"import geryon.tf; geryon.tf.load({str(library)!r})")
    assert result.returncode != 0
    assert "VersionMismatch" in result.stderr
    assert "built for TensorFlow 2.20.0, but TensorFlow 2.21.0 is imported" in result.stderr


def test_a_library_whose_own_version_differs_is_refused_at_load(tmp_path: Path) -> None:
    library = build(source_dir=_tiny_sources(tmp_path, "2.19.1"), cache_dir=tmp_path / "cache")
    (library.parent / BUILD_INFO).unlink()  # only the library's exported version is left to check
    result = _python(f"import geryon.tf; geryon.tf.load({str(library)!r})")
    assert result.returncode != 0
    assert "built for TensorFlow 2.19.1, but TensorFlow 2.21.0 is imported" in result.stderr


def test_a_missing_compiler_is_a_clear_cli_error(tmp_path: Path) -> None:
    for env in ({"CXX": "no-such-compiler-g++"}, {"PATH": str(tmp_path)}):
        result = subprocess.run(
            [sys.executable, "-m", "geryon", "native", "build", "--cache-dir", str(tmp_path / "c")],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO_ROOT,
            env={**os.environ, **env},
        )
        assert result.returncode == 2, result.stderr
        assert "geryon native: error: no C++ compiler:" in result.stderr
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "c").exists()


def test_missing_tensorflow_is_a_clear_error() -> None:
    result = _python(
        """
        import sys
        sys.modules["tensorflow"] = None  # as if TensorFlow were not installed
        from geryon.tf.build import plan
        plan()
        """
    )
    assert result.returncode != 0
    assert (
        "BuildError: the rendezvous extension is built against TensorFlow, which is missing" in result.stderr
    )


def test_a_checkout_builds_its_own_sources_and_an_install_the_packaged_copy(tmp_path: Path) -> None:
    # In the checkout the edited native/ is built (the cache key of every test's build depends on it).
    assert SOURCE_DIR == REPO_ROOT / "native" / "rendezvous" == CHECKOUT_NATIVE / "rendezvous"
    assert PACKAGED_NATIVE == REPO_ROOT / "geryon" / "_native"
    checkout, packaged = tmp_path / "checkout", tmp_path / "packaged"
    (packaged / "rendezvous").mkdir(parents=True)
    (packaged / "rendezvous" / "a.cc").write_text("")
    # No checkout (an install from the wheel): the package's copy.
    assert native_sources("rendezvous", (checkout, packaged)) == packaged / "rendezvous"
    (checkout / "rendezvous").mkdir(parents=True)
    (checkout / "rendezvous" / "README.md").write_text("")  # a folder without sources does not count
    assert native_sources("rendezvous", (checkout, packaged)) == packaged / "rendezvous"
    (checkout / "rendezvous" / "a.cc").write_text("")
    assert native_sources("rendezvous", (checkout, packaged)) == checkout / "rendezvous"
    assert native_sources("absent", (checkout, packaged)) == checkout / "absent"


def test_missing_sources_name_both_places_looked(tmp_path: Path) -> None:
    with pytest.raises(BuildError) as e:
        plan(CHECKOUT_NATIVE / "absent", tmp_path / "cache")
    assert str(CHECKOUT_NATIVE / "absent") in str(e.value) and str(PACKAGED_NATIVE / "absent") in str(e.value)
    assert "pip wheel ." in str(e.value)
    with pytest.raises(BuildError, match=re.escape(f"no C++ sources in {tmp_path}") + "$"):
        plan(tmp_path, tmp_path / "cache")  # a folder of the caller's: only that one is named


def test_a_source_that_does_not_compile_names_the_error(tmp_path: Path) -> None:
    src = tmp_path / "broken"
    src.mkdir()
    (src / "broken.cc").write_text("int f() { return undeclared_name; }\n")
    with pytest.raises(BuildError, match=r"(?s)compiling broken.cc failed .*undeclared_name"):
        build(source_dir=src, cache_dir=tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*/" + LIBRARY_NAME))


@pytest.mark.slow
def test_cli_build_prints_the_cached_library_and_its_facts() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "geryon", "native", "build", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    facts = json.loads(result.stdout)
    assert facts["library"] == str(plan().output) and Path(facts["library"]).exists()
    assert facts["tf_version"] == TF_VERSION and "server.cc" in facts["sources"]
