"""Running the extension's AddressSanitizer / ThreadSanitizer builds under an uninstrumented TensorFlow.

Only libgeryon_rendezvous is instrumented; Python and TensorFlow are not. The sanitizer's runtime must
therefore be the first library of the process (LD_PRELOAD), before Python maps anything: a runtime
that comes in later with the extension finds memory it does not know and aborts. `environment()`
gives a process everything it needs: the preload, the runtime's options (reports to one log file per
process, suppressions from native/sanitizers/), and GERYON_SANITIZER, which makes `geryon.tf.load()`
build and load the instrumented variant. `reports()` reads the logs back and tells ours (a frame in
libgeryon_rendezvous or native/rendezvous/) from those in TensorFlow's and Python's own code.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from geryon.tf.build import (
    CHECKOUT_NATIVE,
    SANITIZERS,
    SOURCE_DIR,
    BuildError,
    compiler_file,
    sanitizer_runtime,
)

__all__ = [
    "ENV",
    "SUPPRESSIONS_DIR",
    "Group",
    "Report",
    "active",
    "environment",
    "groups",
    "ours",
    "reports",
    "run_pytest",
    "triage_table",
]

# Set in a process's environment, geryon.tf.load() loads the named sanitizer's variant.
ENV = "GERYON_SANITIZER"
SUPPRESSIONS_DIR = SOURCE_DIR.parent / "sanitizers"
LOG_PREFIX = "sanitizer"
# A frame or a summary in our code: the library itself (unsymbolized frames name the module) or one
# of its sources (symbolized frames name the file, -g).
_OURS = re.compile(r"libgeryon_rendezvous|native/rendezvous/")
# Where a report starts: ASAN/TSAN/UBSAN headers, and each leak of a LeakSanitizer report.
_START = re.compile(r"^(WARNING: ThreadSanitizer:|==\d+==ERROR: \w+Sanitizer:|(Direct|Indirect) leak of )")
_FRAME = re.compile(r"#\d+ ")
# Stacks that say where a thread or a mutex was created: not where the reported access was (a race
# between two of TF's threads on a TF buffer names the mutex of ours one of them held at the time).
# A lock-order inversion's stacks ("Mutex M1 acquired here while holding mutex M2") do count.
_CREATED = re.compile(r"Thread T\d+.* created (by|at)|Mutex M\d+ .*created at:")
# Frames of the sanitizer's runtime (interceptors), libc and libstdc++'s own code: the caller is
# what made the access.
_RUNTIME = re.compile(r"\((libtsan|libasan|liblsan|libc|libstdc\+\+|ld-linux[^ ]*)\.so|/libsanitizer/")
# A frame's address: ASAN prints the pc ("#1 0x7f.. in"), TSAN the module and offset; frames inlined
# into one instruction share it.
_ADDRESS = re.compile(r"^#\d+ (0x[0-9a-f]+)|\(([^()]+\+0x[0-9a-f]+)\)$")
_NOT_A_REPORT = re.compile(r"==\d+==ERROR: LeakSanitizer: detected memory leaks")


@dataclass(frozen=True)
class Report:
    path: Path
    kind: str  # its first line, e.g. "WARNING: ThreadSanitizer: data race (pid=...)"
    text: str

    @property
    def ours(self) -> bool:
        """Whether the code that did it is ours: in some stack of the error itself (an access, an
        allocation, a free, a leak's allocation), the first frame past the sanitizer runtime, libc
        and libstdc++ (with the frames inlined at the same address) is in our library or sources.
        Not any frame anywhere: TF's gRPC threads are created, and its resolver called, from our
        NewServer, which would make every race between two gRPC threads name us far up a stack."""
        for stack in _stacks(self.text):
            frames = [f for f in stack if not _RUNTIME.search(f)]
            if not frames:
                continue
            key = _address(frames[0])
            top = [f for f in frames if key is not None and _address(f) == key] or frames[:1]
            if any(_OURS.search(f) for f in top):
                return True
        return False


@dataclass(frozen=True, order=True)
class Group:
    """What a triage groups reports by: our top frame, the report's kind and the other access's top
    frame (for a race: the other thread's; "-" where the report has one stack)."""

    ours: str
    kind: str
    other: str


def _address(frame: str) -> str | None:
    m = _ADDRESS.search(frame)
    return None if m is None else (m.group(1) or m.group(2))


def _stacks(text: str) -> list[list[str]]:
    """The report's stacks, without those that say where a thread was created."""
    return [frames for _, frames in _sections(text)]


def _sections(text: str) -> list[tuple[str, list[str]]]:
    """The report's stacks with the line that heads each ("Read of size 8 at ... by thread T3:"),
    without those that say where a thread was created."""
    sections: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if _FRAME.match(stripped):
            if current is not None:
                current.append(stripped)
        elif stripped:
            current = None if _CREATED.match(stripped) else []
            if current is not None:
                sections.append((stripped, current))
    return sections


# The two accesses of a TSAN race ("Write of size 8 ...", "Previous atomic read of size 4 ...").
_ACCESS = re.compile(r"^(Previous )?(atomic )?(read|write) of size", re.IGNORECASE)
# A symbolized frame: "#3 function file:line[:col] (module+0x..)"; "<null>" where there is no file.
_FRAME_PARTS = re.compile(
    r"^#\d+ (?:0x[0-9a-f]+ in )?(?P<func>.*?) (?P<file>\S+) \((?P<module>[^()+]+)\+0x[0-9a-f]+\)$"
)
_KIND = re.compile(
    r"^(?:WARNING: ThreadSanitizer: |==\d+==ERROR: \w+Sanitizer: )?"
    r"(?P<kind>[a-zA-Z -]+?)(?: \(pid=\d+\)| on address.*)?$"
)


def _short_function(func: str) -> str:
    """`ns::Class<T>::method(args) const` -> `ns::Class::method`; lambdas stay `operator()`."""
    func = func.replace("(anonymous namespace)::", "").replace("operator()", "operator\x00")
    func = func.replace("~<lambda", "~lambda<")
    out, depth = [], 0
    for ch in func:
        if ch in "<(":
            depth += 1
        elif ch in ">)" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    short = "".join(out).replace("operator\x00", "operator()").strip()
    return short.removesuffix(" const").strip()


def _frame_name(frame: str) -> str:
    """A frame as the triage table shows it: `function file:line` for our sources and the
    libraries' headers, `function (module)` where there is no file."""
    m = _FRAME_PARTS.match(frame)
    if m is None:
        return frame.split(" ", 1)[-1]
    func, file = _short_function(m.group("func")), m.group("file")
    if file == "<null>":
        return f"{func} ({m.group('module')})"
    return f"{func} {file.rsplit('/', 1)[-1]}"


def _top(stack: list[str]) -> tuple[str, bool]:
    """The frame that made the access (first past the runtime, libc and libstdc++; of the frames
    inlined at its address, ours if one is) and whether it is ours."""
    frames = [f for f in stack if not _RUNTIME.search(f)]
    if not frames:
        return ("-", False)
    key = _address(frames[0])
    same = [f for f in frames if key is not None and _address(f) == key] or frames[:1]
    if not any(_OURS.search(f) for f in same):
        return (_frame_name(same[0]), False)
    # Ours: name the first line of our sources (a library header's code inlined into our library,
    # e.g. std::function's, says less than the line of ours that ran it).
    for f in frames:
        if "native/rendezvous/" in f:
            return (_frame_name(f), True)
        if not _OURS.search(f):
            break
    return (_frame_name(same[0]), True)


def _kind(first_line: str) -> str:
    m = _KIND.match(first_line.strip())
    return m.group("kind").strip() if m else first_line.strip()


def group_of(report: Report) -> Group:
    """The report's triage group: for a race, our access's top frame and the other access's top
    frame; for a one-stack report (a leak, a use-after-free, a signal-unsafe call), its first stack."""
    sections = _sections(report.text)
    accesses = [frames for head, frames in sections if _ACCESS.match(head)] or [
        frames for _, frames in sections[:1]
    ]
    tops = [_top(frames) for frames in accesses]
    mine = next((i for i, (_, is_ours) in enumerate(tops) if is_ours), 0) if tops else None
    if mine is None:
        return Group("-", _kind(report.kind), "-")
    others = [name for i, (name, _) in enumerate(tops) if i != mine]
    return Group(tops[mine][0], _kind(report.kind), others[0] if others else "-")


def groups(found: list[Report]) -> dict[Group, list[Report]]:
    """The reports by triage group, the biggest group first."""
    by: dict[Group, list[Report]] = {}
    for report in found:
        by.setdefault(group_of(report), []).append(report)
    return dict(sorted(by.items(), key=lambda item: (-len(item[1]), item[0])))


def triage_table(found: list[Report]) -> str:
    """One line per group: count, kind, our top frame, the other access's top frame."""
    rows = [("count", "kind", "our frame", "other frame")]
    rows += [(str(len(rs)), g.kind, g.ours, g.other) for g, rs in groups(found).items()]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(
        "  ".join([r[0].rjust(widths[0]), r[1].ljust(widths[1]), r[2].ljust(widths[2]), r[3]]) for r in rows
    )


def active() -> str | None:
    """The sanitizer this process was asked to load (env GERYON_SANITIZER), checked."""
    name = os.environ.get(ENV) or None
    if name is not None and name not in SANITIZERS:
        raise BuildError(f"{ENV} must be one of {', '.join(sorted(SANITIZERS))} or empty, got {name!r}")
    return name


def check_preloaded(sanitizer: str) -> None:
    """Refuses to load an instrumented library into a process whose first library is not its runtime."""
    runtime = SANITIZERS[sanitizer][1]
    maps = Path("/proc/self/maps").read_text()
    if f"/{runtime}" not in maps and f"/{runtime}." not in maps:
        raise BuildError(
            f"{ENV}={sanitizer}: this process has no {runtime} loaded; start it with the runtime preloaded "
            "(geryon.tf.sanitizers.environment(), or `make sanitize`): loading it now would abort the process"
        )


def environment(sanitizer: str, log_dir: Path) -> dict[str, str]:
    """What to add to a process's environment to run the extension's `sanitizer` variant under TF.

    The runtime's reports go to `log_dir`/sanitizer.<pid>; the process goes on after a report where
    the runtime allows it (TSAN always; ASAN stops at its first error, as it must)."""
    runtime = sanitizer_runtime(sanitizer)
    log = f"log_path={log_dir / LOG_PREFIX}"
    env = {ENV: sanitizer}
    if sanitizer == "address":
        # libstdc++ preloaded too: ASAN resolves the real __cxa_throw when it starts, and without
        # libstdc++ already mapped it finds none and aborts on the first C++ exception (matplotlib's
        # ft2font throws one while TF imports; found here, see README "Sanitizers").
        stdcxx = compiler_file("libstdc++.so")
        if stdcxx is None:
            raise BuildError("the compiler has no libstdc++.so, which the address sanitizer run preloads")
        env["LD_PRELOAD"] = f"{runtime} {stdcxx}"
        env["ASAN_OPTIONS"] = ":".join(
            [
                log,
                # Leaks are looked for on request (__lsan_do_recoverable_leak_check), not at exit: the
                # test processes end with os._exit or SIGKILL, and Python's interned objects at exit
                # are not leaks.
                "detect_leaks=1",
                "leak_check_at_exit=0",
                # TF's libraries register the same absl/protobuf globals as ours (ODR "violations" of
                # code we do not build); our own ODR problems would fail the link anyway.
                "detect_odr_violation=0",
                # TF probes huge allocations (a bad frame's length) and handles nullptr itself.
                "allocator_may_return_null=1",
            ]
        )
        env["LSAN_OPTIONS"] = f"suppressions={SUPPRESSIONS_DIR / 'lsan.supp'}:print_suppressions=0"
    else:
        env["LD_PRELOAD"] = str(runtime)
        env["TSAN_OPTIONS"] = ":".join(
            [
                log,
                f"suppressions={SUPPRESSIONS_DIR / 'tsan.supp'}",
                "print_suppressions=0",
                # Report every race and go on: one run shows all of them, not the first; and exit as
                # the process would (not 66): the reports are read from the logs.
                "halt_on_error=0",
                "exitcode=0",
                # Python's signal handlers call async-unsafe functions by design (TF's too).
                "report_signal_unsafe=0",
                # The longest access history (4M accesses per thread): TF's threads log every
                # intercepted malloc/free, and an earlier access whose stack has left the history is
                # "[failed to restore the stack]", which no suppression can match (README, TSAN triage).
                "history_size=7",
            ]
        )
    return env


def reports(log_dir: Path) -> list[Report]:
    """Every report in the sanitizer logs under `log_dir`, one per race, error or leak."""
    found: list[Report] = []
    for path in sorted(log_dir.glob(f"{LOG_PREFIX}.*")):
        current: list[str] = []
        for line in path.read_text(errors="replace").splitlines():
            if _START.match(line) and not _NOT_A_REPORT.match(line):
                if current:
                    found.append(Report(path, current[0], "\n".join(current)))
                current = [line]
            elif current:
                current.append(line)
        if current:
            found.append(Report(path, current[0], "\n".join(current)))
    return found


def ours(found: list[Report]) -> list[Report]:
    return [r for r in found if r.ours]


def run_pytest(sanitizer: str, log_dir: Path, args: list[str], timeout: float) -> tuple[int, str, float]:
    """Runs pytest with `args` in a process (and its children) under `sanitizer`, from the repository
    root: (exit status, the output's tail, seconds)."""
    root = CHECKOUT_NATIVE.parent  # the checkout (an installed package has no tests to run)
    env = {**os.environ, **environment(sanitizer, log_dir)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=root,
        env=env,
        check=False,
    )
    return proc.returncode, proc.stdout[-6000:] + proc.stderr[-3000:], time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    """`python -m geryon.tf.sanitizers SANITIZER [PYTEST ARGS]` (`make sanitize-long`): the tests under
    the sanitizer, then every report; exit 1 if a test failed or a report is in our code."""
    parser = argparse.ArgumentParser(prog="python -m geryon.tf.sanitizers", description=main.__doc__)
    parser.add_argument("sanitizer", choices=sorted(SANITIZERS))
    parser.add_argument(
        "--logs", type=Path, help="where the runtime writes its reports (default: a new temp dir)"
    )
    parser.add_argument("--timeout", type=float, default=3600, help="seconds for the whole pytest run")
    parser.add_argument("pytest_args", nargs="*", help="what to run, and pytest's options (default tests/tf)")
    # pytest's own options (-k, -x, ...) pass through with the test paths.
    args, passthrough = parser.parse_known_args(argv)
    args.pytest_args = [*args.pytest_args, *passthrough]
    from geryon.tf.build import build

    build(sanitizer=args.sanitizer)
    logs = args.logs or Path(tempfile.mkdtemp(prefix=f"geryon-{args.sanitizer}-"))
    logs.mkdir(parents=True, exist_ok=True)
    status, tail, seconds = run_pytest(args.sanitizer, logs, args.pytest_args or ["tests/tf"], args.timeout)
    found = reports(logs)
    mine = ours(found)
    print(tail)
    for report in found:
        print(("OURS   " if report.ours else "theirs ") + report.kind + f"  ({report.path})")
    counts = f"{len(found)} reports, {len(mine)} in our code"
    print(f"{args.sanitizer}: pytest exit {status} in {seconds:.0f} s; {counts}")
    return 0 if status == 0 and not mine else 1


if __name__ == "__main__":
    sys.exit(main())
