"""Build the native rendezvous extension (native/rendezvous/*.cc) against the installed TensorFlow.

Where the sources are: in a checkout (or an editable install), the repository's ``native/`` beside
``geryon/``, so that edits are built; installed from a wheel or an sdist, the copy that setup.py ships
in the package, ``geryon/_native/`` (the same files, so the same cache entry: the hash covers the
files' names and bytes, not where they lie). The checkout wins when it has the sources.

The library is cached per TensorFlow version and source hash, so it is compiled once (about a minute
per server translation unit on two cores) and rebuilt only when TF or the sources change:
``$GERYON_NATIVE_CACHE`` or ``~/.cache/geryon/native``, then ``<tf version>-<hash>/libgeryon_rendezvous.so``.
Flags (see shared/notes/tf-native-plugin.md): TF's compile flags plus ``-DNDEBUG`` (TF's headers change
the layout of graph classes without it), the bundled gRPC and farmhash include dirs, and a link
against ``libtensorflow_cc.so.2``, where the distributed runtime lives, with ``--no-undefined`` so a
missing symbol fails here and not at load time.

Sanitizer variants (``build(sanitizer="address"|"thread")``): the same sources with ``-fsanitize=...``,
``-O1 -g -fno-omit-frame-pointer``, in their own cache entry (``...-asan``/``...-tsan``; the sanitizer is
part of the hash). TensorFlow and Python are not instrumented, so the process that loads such a library
must preload the sanitizer's runtime: ``geryon.tf.sanitizers`` says how (native/rendezvous/README.md,
"Sanitizers").
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from geryon.errors import UsageError
from geryon.progress import Progress

__all__ = [
    "CHECKOUT_NATIVE",
    "LIBRARY_NAME",
    "PACKAGED_NATIVE",
    "SOURCE_DIR",
    "BuildError",
    "BuildPlan",
    "build",
    "build_test_device",
    "cache_root",
    "compiler_file",
    "native_sources",
    "plan",
    "sanitizer_runtime",
]

LIBRARY_NAME = "libgeryon_rendezvous.so"
# The checkout's native/ (two folders above this file), and the copy a wheel ships in the package.
CHECKOUT_NATIVE = Path(__file__).resolve().parents[2] / "native"
PACKAGED_NATIVE = Path(__file__).resolve().parents[1] / "_native"


def native_sources(folder: str, roots: tuple[Path, ...] = (CHECKOUT_NATIVE, PACKAGED_NATIVE)) -> Path:
    """native/<folder> of the first root that has its C++ sources: the checkout's, then the package's.

    When none has them, the first root's (plan() then names every place looked)."""
    for root in roots:
        if any((root / folder).glob("*.cc")):
            return root / folder
    return roots[0] / folder


SOURCE_DIR = native_sources("rendezvous")
# The test-only PluggableDevice (native/test_device/test_device.cc): a non-CPU TF device whose memory
# is host memory, so that tests without an accelerator run the data plane's device-copy path.
TEST_DEVICE_LIBRARY = "libgeryon_test_device.so"
TEST_DEVICE_SOURCE_DIR = native_sources("test_device")
BUILD_INFO = "build-info.json"
# Seconds one translation unit takes on this project's 2-core machines (for the progress line).
_SECONDS_PER_UNIT = 40
# -Wno-deprecated-declarations: TF's own headers use deprecated tsl helpers; the noise hides real errors.
_CFLAGS = ["-O2", "-fPIC", "-std=c++17", "-DNDEBUG", "-Wno-interference-size", "-Wno-deprecated-declarations"]
# Sanitizer name -> (short tag of the cache entry, runtime library the loading process must preload).
# -O1 -g -fno-omit-frame-pointer: the sanitizers' documented settings for readable stacks at tolerable
# speed (clang's AddressSanitizer/ThreadSanitizer docs; gcc's -fsanitize shares the runtime).
SANITIZERS = {"address": ("asan", "libasan.so"), "thread": ("tsan", "libtsan.so")}
_SANITIZER_CFLAGS = ["-O1", "-g", "-fno-omit-frame-pointer"]
# The compiler announces the sanitizer to the headers (__SANITIZE_*__), and absl and protobuf then
# change their classes' layout (protobuf adds `_tsan_detect_race` to every message under TSAN, absl's
# swiss tables add generation counters under ASAN). TF was built without a sanitizer, so our code
# must see TF's layout: instrumented, but compiled as if no sanitizer were there. Without this the
# TSAN build crashed reading TF's own ServerDef (protobuf Map::begin at the wrong offset).
_HIDE_SANITIZER = {"address": "-U__SANITIZE_ADDRESS__", "thread": "-U__SANITIZE_THREAD__"}
# Our own announcement instead, seen by our sources only: native/rendezvous/tsan.h turns its
# happens-before annotations into ThreadSanitizer calls under GERYON_TSAN (no-ops otherwise).
_ANNOUNCE_SANITIZER = {"address": "-DGERYON_ASAN=1", "thread": "-DGERYON_TSAN=1"}


class BuildError(UsageError):
    """TensorFlow or a compiler is missing, or the extension does not compile."""


@dataclass(frozen=True)
class BuildPlan:
    tf_version: str
    compiler: str
    sources: tuple[Path, ...]
    compile_flags: tuple[str, ...]
    link_flags: tuple[str, ...]
    digest: str
    output: Path
    sanitizer: str | None = None

    @property
    def directory(self) -> Path:
        return self.output.parent


def cache_root() -> Path:
    override = os.environ.get("GERYON_NATIVE_CACHE")
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "geryon" / "native"


def _tensorflow() -> tuple[str, list[str], list[str]]:
    try:
        from geryon.tfenv import import_tensorflow

        tf = import_tensorflow()
    except UsageError as e:
        raise BuildError(
            f"the rendezvous extension is built against TensorFlow, which is missing: {e}"
        ) from None
    include = tf.sysconfig.get_include()
    libdir = tf.sysconfig.get_lib()
    compile_flags = [
        *tf.sysconfig.get_compile_flags(),
        f"-I{include}/external/com_github_grpc_grpc/include",
        f"-I{include}/external/farmhash_archive/src",
        # The release the library is built for; load() compares it with the TF it is loaded into.
        f'-DGERYON_TF_VERSION="{tf.__version__}"',
    ]
    link_flags = [
        *tf.sysconfig.get_link_flags(),
        "-l:libtensorflow_cc.so.2",
        f"-Wl,-rpath,{libdir}",
        "-Wl,--no-undefined",
    ]
    return str(tf.__version__), compile_flags, link_flags


def _compiler() -> str:
    name = os.environ.get("CXX") or "g++"
    found = shutil.which(name)
    if found is None:
        hint = "" if "CXX" in os.environ else " (install g++, e.g. `apt-get install g++`, or set CXX)"
        raise BuildError(f"no C++ compiler: '{name}' is not on PATH{hint}")
    return found


def _check_sanitizer(sanitizer: str | None) -> None:
    if sanitizer is not None and sanitizer not in SANITIZERS:
        raise BuildError(
            f"sanitizer must be one of {', '.join(sorted(SANITIZERS))} or none, got {sanitizer!r}"
        )


def sanitizer_runtime(sanitizer: str, compiler: str | None = None) -> Path:
    """The sanitizer's runtime library of this compiler (what a loading process must LD_PRELOAD).

    Asks the compiler (`-print-file-name`), which answers the bare name when it has no such file:
    then the runtime is not installed, and the error says which package brings it."""
    _check_sanitizer(sanitizer)
    name = SANITIZERS[sanitizer][1]
    compiler = compiler or _compiler()
    found = compiler_file(name, compiler)
    if found is None:
        package = {"address": "libasan8", "thread": "libtsan2"}[sanitizer]
        raise BuildError(
            f"sanitizer {sanitizer!r}: {compiler} has no {name} (the {sanitizer} sanitizer's runtime); "
            f"install it (Debian 12 with g++ 12: `apt-get install {package}`) or use a compiler that has it"
        )
    return found


def compiler_file(name: str, compiler: str | None = None) -> Path | None:
    """A library of the compiler's own runtime directories, or None (gcc and clang answer
    `-print-file-name` with the bare name when they have no such file)."""
    proc = subprocess.run(
        [compiler or _compiler(), f"-print-file-name={name}"], capture_output=True, text=True, check=False
    )
    found = Path(proc.stdout.strip())
    if proc.returncode != 0 or not found.is_absolute() or not found.exists():
        return None
    return found.resolve()


def _no_sources(source_dir: Path) -> str:
    if source_dir.parent not in (CHECKOUT_NATIVE, PACKAGED_NATIVE):
        return f"no C++ sources in {source_dir}"
    folder = source_dir.name
    return (
        f"no C++ sources of native/{folder}: looked in the checkout ({CHECKOUT_NATIVE / folder}) and in "
        f"the installed package ({PACKAGED_NATIVE / folder}); install Geryon from a wheel built with "
        "`pip wheel .` in a checkout (it ships the sources in geryon/_native/), or run from the checkout"
    )


def plan(
    source_dir: Path = SOURCE_DIR,
    cache_dir: Path | None = None,
    library_name: str = LIBRARY_NAME,
    sanitizer: str | None = None,
) -> BuildPlan:
    """What would be built, and where: TF version, the sources' hash and the flags name the cache entry."""
    _check_sanitizer(sanitizer)
    sources = tuple(sorted(source_dir.glob("*.cc")))
    if not sources:
        raise BuildError(_no_sources(source_dir))
    compiler = _compiler()
    tf_version, compile_flags, link_flags = _tensorflow()
    suffix = ""
    if sanitizer is not None:
        # After TF's flags and _CFLAGS, so -O1 overrides -O2 (the last -O wins).
        instrument = [f"-fsanitize={sanitizer}", _HIDE_SANITIZER[sanitizer], _ANNOUNCE_SANITIZER[sanitizer]]
        compile_flags = [*compile_flags, *_SANITIZER_CFLAGS, *instrument]
        link_flags = [*link_flags, f"-fsanitize={sanitizer}"]
        suffix = "-" + SANITIZERS[sanitizer][0]
    digest = hashlib.sha256()
    for path in sorted([*sources, *source_dir.glob("*.h")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(json.dumps([compiler, _CFLAGS, *_without_install_dir(compile_flags, link_flags)]).encode())
    short = digest.hexdigest()[:16]
    root = cache_dir if cache_dir is not None else cache_root()
    return BuildPlan(
        tf_version=tf_version,
        compiler=compiler,
        sources=sources,
        compile_flags=tuple(compile_flags),
        link_flags=tuple(link_flags),
        digest=short,
        output=root / f"{tf_version}-{short}{suffix}" / library_name,
        sanitizer=sanitizer,
    )


def _without_install_dir(compile_flags: list[str], link_flags: list[str]) -> list[list[str]]:
    """The flags with TensorFlow's install folder (its headers, its libraries, the runpath) named by a
    placeholder, for the cache key: the same TF release in another venv or clone builds the same
    library, so a fresh clone, a wheel's venv or a test's venv reuse the build instead of compiling
    again (about 100 s here, the sanitizer variants 2-3 min each). The library's runpath still names
    the venv that built it; it is only loaded into a process that has imported TensorFlow, whose
    libtensorflow_framework and libtensorflow_cc the loader then matches by soname."""
    prefix = re.compile(r"(-I|-L|-Wl,-rpath,)(\S*?)/tensorflow(?=/|$)")
    return [[prefix.sub(r"\1<tensorflow>", f) for f in flags] for flags in (compile_flags, link_flags)]


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_jobs() -> int:
    """Compilers run at once: GERYON_BUILD_JOBS, else the cores this process may use."""
    raw = os.environ.get("GERYON_BUILD_JOBS", "")
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise UsageError(f"GERYON_BUILD_JOBS={raw!r}: expected a whole number of at least 1")
        return int(raw)
    return max(1, len(os.sched_getaffinity(0)))


def _run(command: list[str], what: str) -> None:
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        # The compiler's error lines first: template notes around them run to thousands of lines.
        errors = [line for line in lines if "error" in line]
        tail = "\n".join((errors or lines)[-40:])
        raise BuildError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def build(
    source_dir: Path = SOURCE_DIR,
    cache_dir: Path | None = None,
    force: bool = False,
    progress: Progress | None = None,
    library_name: str = LIBRARY_NAME,
    what: str = "the Geryon rendezvous extension",
    sanitizer: str | None = None,
) -> Path:
    """Returns the path of the built library, compiling it first unless the cache has it.

    `sanitizer`: None, "address" or "thread" (an instrumented variant in its own cache entry)."""
    p = plan(source_dir, cache_dir, library_name, sanitizer)
    progress = progress or Progress("geryon native")
    if p.output.exists() and not force:
        return p.output
    if sanitizer is not None:
        sanitizer_runtime(sanitizer, p.compiler)  # a clear error now, not a link error after minutes
        what = f"{what} with the {sanitizer} sanitizer"
    # One builder per cache entry; a second process waits, then finds the library built.
    with _lock(p.directory.parent / f".{p.directory.name}.lock"):
        if p.output.exists() and not force:
            return p.output
        jobs = build_jobs()
        seconds = _SECONDS_PER_UNIT * len(p.sources) * (2 if sanitizer else 1) // jobs
        progress.say(f"building {what} on {jobs} cores (about {seconds} s the first time)")
        start = time.perf_counter()
        p.directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".build-", dir=p.directory) as tmp:
            objects = [str(Path(tmp, source.stem + ".o")) for source in p.sources]

            def compile_one(source: Path, obj: str) -> None:
                with progress.step(f"compiling {source.name}"):
                    _run(
                        [p.compiler, *_CFLAGS, *p.compile_flags, "-c", str(source), "-o", obj],
                        f"compiling {source.name}",
                    )

            # One compiler per core: each unit parses TensorFlow's headers on its own, so the units are
            # independent and the build takes about 1/cores of the serial time.
            # The first failure is raised; leaving the `with` waits for the other compilers first.
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                for done in [pool.submit(compile_one, s, o) for s, o in zip(p.sources, objects, strict=True)]:
                    done.result()
            staged = Path(tmp, library_name)
            with progress.step(f"linking {library_name}"):
                _run([p.compiler, "-shared", *map(str, objects), "-o", str(staged), *p.link_flags], "linking")
            info = {
                "tf_version": p.tf_version,
                "digest": p.digest,
                "compiler": p.compiler,
                "sources": [s.name for s in p.sources],
                "sanitizer": p.sanitizer,
            }
            Path(tmp, BUILD_INFO).write_text(json.dumps(info, indent=1) + "\n")
            # Rename into place: a reader sees the old library or the whole new one, never a partial file.
            os.replace(Path(tmp, BUILD_INFO), p.directory / BUILD_INFO)
            os.replace(staged, p.output)
        progress.say(f"built {p.output} in {time.perf_counter() - start:.0f} s")
    return p.output


def build_test_device(
    cache_dir: Path | None = None, force: bool = False, progress: Progress | None = None
) -> Path:
    """Builds the test-only GERYONTEST PluggableDevice (load it with geryon.tf.test_device.load)."""
    return build(
        TEST_DEVICE_SOURCE_DIR,
        cache_dir,
        force,
        progress,
        library_name=TEST_DEVICE_LIBRARY,
        what="the GERYONTEST test device",
    )
