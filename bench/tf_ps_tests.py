"""TensorFlow's own parameter-server tests on `grpc` and on `grpc+geryon`, compared test by test.

    python bench/tf_ps_tests.py                       # all three files, both layers
    python bench/tf_ps_tests.py --files parameter_server_strategy_v2_test --layers grpc+geryon

The test files are read from ../shared/vendor/tf-ps-tests (or --vendor / GERYON_TF_PS_TESTS) and run
unchanged, each as its own `python FILE Class.test ...` process, with bench/tf_ps_shim on PYTHONPATH:
its sitecustomize switches every ServerDef TF's tests make from "grpc" to the layer under test
(servers and the coordinator alike, in every process multi_process_runner spawns) and records each
test's start and outcome as JSON lines. Per-test timeout: when no test finishes within --timeout
seconds, the process group is killed, the running test counts as `timeout` and the file goes on in a
new process with the tests not run yet; a process that dies mid-test gives `crash` the same way.
Files and layers are interleaved (grpc, then grpc+geryon, per file) so machine load hits both alike.

Prints a table (pass / fail / error / skip / timeout / crash per file and layer, and tests that pass
on grpc but not on grpc+geryon) and writes JSON to out/bench/tf_ps_tests.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

from benchlib import print_table, write_json

ROOT = Path(__file__).resolve().parent.parent
SHIM = Path(__file__).resolve().parent / "tf_ps_shim"
DEFAULT_VENDOR = ROOT.parent / "shared" / "vendor" / "tf-ps-tests"
FILES = ("parameter_server_strategy_v2_test", "cluster_coordinator_test", "fault_tolerance_test")
LAYERS = ("grpc", "grpc+geryon")
OUTCOMES = ("pass", "fail", "error", "skip", "timeout", "crash")
# `--subset fast` (CI, `make tf-ps-tests-fast`): the strategy file whole (a multi-process cluster the
# coordinator joins as "chief", variables and their partitioning), and the coordinator file's
# StrategyIntegrationTest (an in-process cluster, datasets and functions scheduled on workers).
# About 5 min for both layers on a loaded 2-core machine. The rest (ClusterCoordinatorTest's
# dozens of cluster round trips, fault tolerance's kills and restarts with their waits) runs in
# `make tf-ps-tests`, nightly-style: it takes far longer than the CI budget.
FAST: dict[str, list[str] | None] = {
    "parameter_server_strategy_v2_test": None,
    "cluster_coordinator_test": ["StrategyIntegrationTest"],
}

_LIST = """
import importlib, sys, unittest
sys.path.insert(0, sys.argv[1])
module = importlib.import_module(sys.argv[2])
def walk(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from walk(t)
        else:
            yield t.id()
for test_id in walk(unittest.TestLoader().loadTestsFromModule(module)):
    print(test_id.split(".", 1)[1])
"""


def vendor_dir(given: str | None) -> Path:
    return Path(given or os.environ.get("GERYON_TF_PS_TESTS") or DEFAULT_VENDOR)


def env_for(layer: str, results: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SHIM), str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["GERYON_TF_RPC_LAYER"] = "" if layer == "grpc" else layer
    env["GERYON_TF_PS_RESULTS"] = str(results) if results else ""
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    return env


def list_tests(vendor: Path, name: str) -> list[str]:
    """`Class.test` ids of one file, in unittest's order."""
    out = subprocess.run(
        [sys.executable, "-c", _LIST, str(vendor), name],
        env=env_for("grpc", None),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"listing the tests of {name} failed:\n{out.stderr[-3000:]}")
    return [line for line in out.stdout.splitlines() if line.strip()]


def _launcher(folder: Path, vendor: Path, name: str) -> Path:
    """An executable without ".py" that runs the test file as __main__.

    multi_process_runner makes its servers by re-executing sys.argv[0] as a binary (Bazel's test
    target); a bare `python file.py` makes it fail with "Cannot determine binary path". This
    stands in for that binary: it executes the unchanged file in the real __main__ namespace, so the
    functions multiprocessing pickles by `__main__.name` resolve in the children too."""
    path = folder / name
    source = vendor / f"{name}.py"
    path.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(vendor)!r})\n"
        f"__file__ = {str(source)!r}\n"
        f"exec(compile(open(__file__).read(), __file__, 'exec'))\n"
    )
    path.chmod(0o755)
    return path


def _read_events(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    if not path.exists():
        return [], offset
    with open(path) as f:
        f.seek(offset)
        data = f.read()
    complete = data[: data.rfind("\n") + 1]
    events = [json.loads(line) for line in complete.splitlines() if line.strip()]
    return events, offset + len(complete)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_file(
    vendor: Path, name: str, layer: str, tests: list[str], timeout: float, log: Path
) -> dict[str, dict[str, Any]]:
    """Outcome of every test in `tests`: {"outcome", "seconds", "detail"}."""
    results: dict[str, dict[str, Any]] = {}
    flows: list[dict[str, Any]] = []  # per process that loaded geryon.tf and exited normally
    with tempfile.TemporaryDirectory(prefix="tfps-") as tmp:
        events_path = Path(tmp) / "events.jsonl"
        while True:
            remaining = [t for t in tests if t not in results]
            if not remaining:
                break
            offset = events_path.stat().st_size if events_path.exists() else 0
            with open(log, "ab") as log_file:
                log_file.write(f"\n==== {name} on {layer}: {len(remaining)} tests\n".encode())
                log_file.flush()
                proc = subprocess.Popen(
                    # absl's parameterized ids carry " (params)"; the command line takes the bare name.
                    [
                        str(_launcher(Path(tmp), vendor, name)),
                        *dict.fromkeys(t.split(" ", 1)[0] for t in remaining),
                    ],
                    cwd=tmp,
                    env=env_for(layer, events_path),
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: a kill reaches every server it spawned
                )
                running: str | None = None
                started = last_progress = time.monotonic()
                rc: int | None = None
                while rc is None:
                    time.sleep(0.5)
                    rc = proc.poll()
                    events, offset = _read_events(events_path, offset)
                    for ev in events:
                        if ev["event"] == "flows":
                            flows.append(ev)
                            continue
                        test = (
                            ev["test"].split(".", 1)[1] if ev["test"].startswith("__main__.") else ev["test"]
                        )
                        now = time.monotonic()
                        if ev["event"] == "start":
                            running, started = test, now
                        else:
                            key = test if test in tests else _class_error_key(test, remaining, results)
                            for k in key if isinstance(key, list) else [key]:
                                results.setdefault(
                                    k,
                                    {
                                        "outcome": ev["event"],
                                        "seconds": round(now - started, 1),
                                        "detail": ev["detail"],
                                    },
                                )
                            running = None
                        last_progress = now
                    if rc is None and time.monotonic() - last_progress > timeout:
                        _kill(proc)
                        rc = -9
                        victim = running or next(t for t in tests if t not in results)
                        results[victim] = {
                            "outcome": "timeout",
                            "seconds": round(time.monotonic() - started, 1),
                            "detail": f"no test finished in {timeout:.0f} s; process group killed",
                        }
                        break
                _kill(proc) if proc.poll() is None else None
            if all(t in results for t in tests):
                break
            if rc != -9:
                # The process ended with tests left: the one running (or the next) crashed it.
                victim = running or next(t for t in tests if t not in results)
                results[victim] = {
                    "outcome": "crash",
                    "seconds": round(time.monotonic() - started, 1),
                    "detail": f"the test process exited with {rc} (see the log)",
                }
        # The last process's exit record is written after its last test; read what is left.
        events, _ = _read_events(events_path, 0)
        flows[:] = [ev for ev in events if ev["event"] == "flows"]
    results["__flows__"] = {
        "outcome": "flows",
        "messages_received": sum(f["messages_received"] for f in flows),
        "bytes_received": sum(f["bytes_received"] for f in flows),
        "processes": len(flows),
    }
    return results


def _class_error_key(test: str, remaining: list[str], results: dict[str, Any]) -> list[str]:
    """A setUpClass / tearDownClass error names the class ("setUpClass (__main__.Cls)"): it counts for
    every test of that class not finished yet."""
    cls = test.rsplit(".", 1)[-1].rstrip(")") if "(" in test else test.split(".")[0]
    return [t for t in remaining if t.split(".")[0] == cls and t not in results] or [test]


def summarize(per_layer: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    counts = {layer: dict(Counter(r["outcome"] for r in res.values())) for layer, res in per_layer.items()}
    grpc = per_layer.get("grpc", {})
    regressions = sorted(
        t
        for t, r in grpc.items()
        if r["outcome"] == "pass"
        and any(
            per_layer[layer].get(t, {}).get("outcome") != "pass" for layer in per_layer if layer != "grpc"
        )
    )
    return {"counts": counts, "pass_on_grpc_not_on_others": regressions}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--vendor", help=f"folder of TF's test files (default {DEFAULT_VENDOR})")
    parser.add_argument("--files", nargs="+", default=list(FILES), choices=FILES)
    parser.add_argument("--layers", nargs="+", default=list(LAYERS), choices=LAYERS)
    parser.add_argument("--tests", nargs="+", help="only these Class.test ids (or Class prefixes)")
    parser.add_argument(
        "--subset", choices=["fast"], help="the CI subset (see FAST); replaces --files/--tests"
    )
    parser.add_argument(
        "--timeout", type=float, default=240.0, help="seconds one test may take (default 240)"
    )
    parser.add_argument("--out", default=str(ROOT / "out" / "bench" / "tf_ps_tests.json"))
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error(f"--timeout must be > 0 seconds, got {args.timeout}")
    vendor = vendor_dir(args.vendor)
    if not vendor.is_dir():
        print(
            f"TensorFlow's PS tests are not at {vendor} (set --vendor or GERYON_TF_PS_TESTS)", file=sys.stderr
        )
        return 2
    if "grpc+geryon" in args.layers:
        sys.path.insert(0, str(ROOT))
        import geryon.tf

        geryon.tf.load()  # build once here, not in every test process at once
    out = Path(args.out)
    log = out.with_suffix(".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"")
    report: dict[str, Any] = {"vendor": str(vendor), "timeout_s": args.timeout, "files": {}}
    rows = []
    selection: dict[str, list[str] | None] = (
        dict(FAST) if args.subset == "fast" else dict.fromkeys(args.files, args.tests)
    )
    report["selection"] = selection
    for name, prefixes in selection.items():
        tests = list_tests(vendor, name)
        if prefixes:
            tests = [t for t in tests if any(t.startswith(p) for p in prefixes)]
        per_layer: dict[str, dict[str, dict[str, Any]]] = {}
        for layer in args.layers:
            start = time.monotonic()
            results = run_file(vendor, name, layer, tests, args.timeout, log)
            flows = results.pop("__flows__")
            per_layer[layer] = results
            seconds = time.monotonic() - start
            counts = Counter(r["outcome"] for r in results.values())
            rows.append(
                {
                    "file": name,
                    "layer": layer,
                    "tests": len(tests),
                    **counts,
                    "seconds": seconds,
                    "data_plane_msgs": flows["messages_received"] if layer != "grpc" else None,
                }
            )
            print(f"{name} on {layer}: {dict(counts)} in {seconds:.0f} s", flush=True)
        report["files"][name] = {"tests": tests, "results": per_layer, **summarize(per_layer)}
        file_rows = [r for r in rows if r["file"] == name]
        report["files"][name]["seconds"] = {r["layer"]: round(r["seconds"], 1) for r in file_rows}
        report["files"][name]["data_plane_messages"] = {r["layer"]: r["data_plane_msgs"] for r in file_rows}
    print()
    print_table(
        rows,
        [("file", "file", "s"), ("layer", "layer", "s"), ("tests", "tests", "d")]
        + [(o, o, "d") for o in OUTCOMES]
        + [("seconds", "wall s", ".0f"), ("data_plane_msgs", "geryon msgs", "d")],
    )
    for name, data in report["files"].items():
        if data["pass_on_grpc_not_on_others"]:
            print(f"\n{name}: pass on grpc, not on every other layer:")
            for t in data["pass_on_grpc_not_on_others"]:
                outs = {layer: data["results"][layer][t]["outcome"] for layer in data["results"]}
                print(f"  {t}: {outs}")
    print(f"log: {log}")
    write_json(out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
