"""`geryon demo` and `geryon bench`: argument parsing and output; the work is in geryon.demo.runner.

Progress goes to stderr; stdout gets the table (geryon.demo.report.format_table) and the paths of
the JSON, the charts and Geryon's simulated Chrome trace, or with --json the result JSON alone.
Exit codes: 0 every mode ran, 1 some mode failed (named on stderr), 2 bad arguments, 130 interrupted
(the testbed is down either way).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from geryon.cluster.models import MODELS
from geryon.demo import modes as modes_mod
from geryon.errors import UsageError
from geryon.progress import Progress


def add_demo(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="the main job: train a CNN on an emulated cluster under vanilla, partition+slicing, Geryon, "
        "the paper's Geryon, end-host scheduling and one worker; print a throughput table",
    )
    p.add_argument("--quick", action="store_true", help="the 1-2 minute version (tiny model, few steps)")
    p.add_argument("--model", help=f"model (default vggmini; tiny with --quick): {', '.join(MODELS)}")
    p.add_argument(
        "--steps", type=str, metavar="N", help="measured steps per mode (default 40; 10 with --quick)"
    )
    p.add_argument("--modes", metavar="M,M", help=f"modes to run (default all: {','.join(modes_mod.MODES)})")
    p.add_argument(
        "--background",
        metavar="RATE",
        help="background traffic toward every worker's switch port, e.g. 50mbit, or none (DSCP 8, its own "
        "host; default half the link rate, 100mbit at 200mbit; none with --quick)",
    )
    p.add_argument(
        "--chunk-size",
        metavar="BYTES",
        help="the data plane's chunk inside a class, 4KiB..1GiB (default 256KiB)",
    )
    p.add_argument(
        "--second-job",
        metavar="MODEL[:BATCH]",
        help="a second training job during every mode, e.g. vggmini:16 (its own PS in ps0's host, a worker "
        "in every worker's host, DSCP 10; default none)",
    )
    add_api_flags(p)
    add_prediction_flags(p)
    p.add_argument(
        "--out", default="out/demo", metavar="DIR", help="where JSON and charts go (default out/demo)"
    )
    p.add_argument("--json", action="store_true", help="print the result JSON instead of the table")
    p.set_defaults(run=run_demo_cmd)


def add_api_flags(p: Any) -> None:
    p.add_argument(
        "--api",
        metavar="A",
        help="training code: custom (the demo's Keras 3 step, default) or fit (tf_keras model.fit's own "
        "train function; vggmini and tiny; geryon.demo.fit)",
    )
    p.add_argument(
        "--steps-per-execution",
        metavar="N",
        help="with --api fit: steps per scheduled train function (default 1); step times are per step",
    )


def add_prediction_flags(p: Any) -> None:
    p.add_argument(
        "--profile-source",
        metavar="S",
        help="compute profile of the prediction: cluster (worker 0 traced during the ps mode's run; "
        "falls back to alone if that fails) or alone (each layer on an idle machine); default cluster",
    )
    p.add_argument(
        "--ps-costs",
        metavar="FILE",
        help="PS-cost calibration for the prediction: bench/bench_ps_costs.py's JSON, or none; default "
        "out/bench/ps_costs.json, which `geryon demo` (not --quick) measures first when it is absent "
        "(about 20 s, once)",
    )
    p.add_argument(
        "--incast",
        metavar="FILE",
        help="switch ports' incast efficiency for the prediction: bench/bench_incast.py's JSON, or none; "
        "default out/bench/incast.json, which `geryon demo` (not --quick) measures first when it is "
        "absent (about 2 minutes, once)",
    )


def add_bench(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="sweep the demo's knobs (comma-separated lists: the product runs) on the emulated cluster",
    )
    p.add_argument("--model", help=f"model: {', '.join(MODELS)} (default vggmini)")
    p.add_argument("--input-shape", metavar="H,W,C", help="input shape (default: the model's)")
    p.add_argument("--batch-size", metavar="N", help="per-worker batch (default 256)")
    p.add_argument("--workers", metavar="N[,N]", help="workers, e.g. 1,2,4 (default 2)")
    p.add_argument("--ps", metavar="N[,N]", help="parameter servers (default 2)")
    p.add_argument("--rate", metavar="R[,R]", help="link rate, e.g. 100mbit (default 200mbit)")
    p.add_argument("--buffer", metavar="B[,B]", help="queue buffer per class, e.g. 256KiB (default 256KiB)")
    p.add_argument("--classes", metavar="K[,K]", help="priority classes (default 2)")
    p.add_argument(
        "--slice-size", metavar="S[,S]", help="slice size in bytes, e.g. 1MiB,256KiB (default 1MiB)"
    )
    p.add_argument("--modes", metavar="M,M", help=f"modes (default all: {','.join(modes_mod.MODES)})")
    p.add_argument("--steps", metavar="N", help="measured steps per mode (default 40)")
    p.add_argument("--warmup", metavar="N", help="warm-up rounds per mode (default 5)")
    p.add_argument("--repeats", metavar="N", help="repeats of every mode (default 1)")
    p.add_argument("--search", metavar="S", help="sweep|guided|bayes|fixed:T (default sweep)")
    p.add_argument(
        "--search-chunk",
        action="store_true",
        help="search the chunk size inside a class with the thresholds (16KiB..4MiB; not with --search "
        "fixed:T)",
    )
    p.add_argument(
        "--background",
        metavar="RATE",
        help="background traffic per worker port, or none (default half the link rate)",
    )
    p.add_argument("--chunk-size", metavar="BYTES", help="data plane chunk, 4KiB..1GiB (default 256KiB)")
    p.add_argument("--second-job", metavar="MODEL[:BATCH]", help="a second training job (default none)")
    p.add_argument("--quick", action="store_true", help="start from the --quick settings")
    add_api_flags(p)
    add_prediction_flags(p)
    p.add_argument("--out", default="out/bench", metavar="DIR", help="where JSON goes (default out/bench)")
    p.add_argument("--json", action="store_true", help="print the results JSON instead of the tables")
    p.set_defaults(run=run_bench_cmd)


# --- parsing --------------------------------------------------------------------------------------


def _int(text: str, flag: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected an integer") from None


def _size(text: str, flag: str) -> int:
    from geryon.tagger.partition import parse_size

    try:
        return parse_size(text.strip())
    except ValueError as e:
        raise UsageError(f"{flag}: {e}") from None


def _rate(text: str, flag: str) -> int:
    from geryon.units import parse_rate

    try:
        return int(parse_rate(text.strip(), flag))
    except ValueError as e:
        raise UsageError(str(e)) from None


def _background(text: str, flag: str) -> int:
    """A rate, or none / 0 for no background traffic."""
    return 0 if text.strip().lower() in ("none", "0") else _rate(text, flag)


def _list(text: str | None, flag: str, parse: Callable[[str, str], Any]) -> list[Any] | None:
    if text is None:
        return None
    items = text.split(",")
    if not items or any(not i.strip() for i in items):
        raise UsageError(f"{flag} {text!r}: expected a comma-separated list")
    return [parse(i, flag) for i in items]


def _one(text: str | None, flag: str, parse: Callable[[str, str], Any]) -> Any:
    return None if text is None else parse(text, flag)


def _shape(text: str | None) -> list[int] | None:
    if text is None:
        return None
    parts = text.split(",")
    if len(parts) != 3:
        raise UsageError(f"--input-shape {text!r}: expected H,W,C")
    return [_int(p, "--input-shape") for p in parts]


def _out_dir(text: str) -> Path:
    out = Path(text)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {text!r}: {e.strerror}") from None
    return out


def demo_config(args: argparse.Namespace) -> dict[str, Any]:
    from geryon.demo.config import make_config

    overrides: dict[str, Any] = {
        "model": args.model,
        "steps": _one(args.steps, "--steps", _int),
        "background_bits": _one(args.background, "--background", _background),
        "second_job": args.second_job,
        "chunk_bytes": _one(args.chunk_size, "--chunk-size", _size),
        "profile_source": args.profile_source,
        "ps_costs": args.ps_costs,
        "incast": args.incast,
        **api_overrides(args),
    }
    if args.modes is not None:
        overrides["modes"] = args.modes
    return make_config(overrides, quick=args.quick)


def api_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "api": args.api,
        "steps_per_execution": _one(args.steps_per_execution, "--steps-per-execution", _int),
    }


def bench_config(args: argparse.Namespace) -> dict[str, Any]:
    from geryon.demo.config import validate
    from geryon.demo.defaults import DEFAULTS, QUICK

    lists = {
        "workers": _list(args.workers, "--workers", _int),
        "ps": _list(args.ps, "--ps", _int),
        "rate_bits": _list(args.rate, "--rate", _rate),
        "buffer_bytes": _list(args.buffer, "--buffer", _size),
        "classes": _list(args.classes, "--classes", _int),
        "slice_bytes": _list(args.slice_size, "--slice-size", _size),
    }
    scalars = {
        "model": args.model,
        "input_shape": _shape(args.input_shape),
        "batch_size": _one(args.batch_size, "--batch-size", _int),
        "steps": _one(args.steps, "--steps", _int),
        "warmup": _one(args.warmup, "--warmup", _int),
        "repeats": _one(args.repeats, "--repeats", _int),
        "search": args.search,
        "search_chunk": True if args.search_chunk else None,
        "modes": args.modes,
        "background_bits": _one(args.background, "--background", _background),
        "second_job": args.second_job,
        "chunk_bytes": _one(args.chunk_size, "--chunk-size", _size),
        "profile_source": args.profile_source,
        "ps_costs": args.ps_costs,
        "incast": args.incast,
        **api_overrides(args),
    }
    cfg: dict[str, Any] = dict(DEFAULTS)
    if args.quick:
        cfg.update(QUICK)
    cfg.update({k: v for k, v in scalars.items() if v is not None})
    cfg.update({k: v for k, v in lists.items() if v is not None})
    # Validate every combination now: a bad knob fails before any testbed is built.
    for combo in _combinations(cfg):
        validate(combo)
    return cfg


def _combinations(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    from geryon.demo.config import BENCH_LISTS

    combos = [dict(cfg)]
    for key in BENCH_LISTS:
        values = cfg[key] if isinstance(cfg[key], list) else [cfg[key]]
        combos = [{**c, key: v} for c in combos for v in values]
    return combos


# --- output ---------------------------------------------------------------------------------------


def table(result: dict[str, Any]) -> str:
    try:
        from geryon.demo.report import format_table

        return format_table(result)
    except Exception as e:
        lines = [f"(report table unavailable: {type(e).__name__}: {e})", "mode      s/step   images/s  error"]
        for r in result["runs"]:
            step = f"{r['median_step_s']:.3f}" if r.get("median_step_s") else "-"
            ips = f"{r['images_per_s']:.1f}" if r.get("images_per_s") else "-"
            lines.append(f"{r['mode']:<9} {step:>7} {ips:>10}  {r.get('error') or ''}")
        return "\n".join(lines)


def report_failures(results: list[dict[str, Any]], command: str) -> int:
    from geryon.demo.runner import failed_modes

    failed = sorted({m for r in results for m in failed_modes(r)})
    if failed:
        print(f"geryon {command}: mode(s) failed: {', '.join(failed)} (errors in the JSON)", file=sys.stderr)
        return 1
    return 0


def _in_user_namespace(argv: list[str], command: str) -> None:
    """Without root: re-runs `geryon <argv>` as root of an unprivileged user namespace (the testbed's
    helper; the testbed and every process die with it), or exits 1 saying why it cannot."""
    from geryon.testbed import TestbedError, userns

    if not userns.needed():
        return
    try:
        userns.reexec(argv)
    except TestbedError as e:
        print(f"geryon {command}: error: {e}", file=sys.stderr)
        raise SystemExit(1) from None


def _demo_argv(args: argparse.Namespace) -> list[str]:
    argv = ["demo", "--out", args.out]
    flags = (("--model", args.model), ("--steps", args.steps), ("--modes", args.modes))
    more = (
        ("--background", args.background),
        ("--second-job", args.second_job),
        ("--chunk-size", args.chunk_size),
        ("--profile-source", args.profile_source),
        ("--ps-costs", args.ps_costs),
        ("--incast", args.incast),
        ("--api", args.api),
        ("--steps-per-execution", args.steps_per_execution),
    )
    for flag, value in (*flags, *more):
        if value is not None:
            argv += [flag, value]
    return argv + [flag for flag, on in (("--quick", args.quick), ("--json", args.json)) if on]


def run_demo_cmd(args: argparse.Namespace) -> int:
    from geryon.demo import pscosts
    from geryon.demo.runner import run_demo

    cfg = demo_config(args)
    out = _out_dir(args.out)
    # Before the re-exec: the user namespace's own network has no loopback cluster to measure on.
    pscosts.ensure(args.ps_costs, Progress("geryon demo"), quick=args.quick)
    _in_user_namespace(_demo_argv(args), "demo")
    from geryon.demo import incastcal
    from geryon.testbed import TestbedError

    # After the re-exec: the measurement builds its own testbeds, as the demo does.
    incastcal.ensure(args.incast, Progress("geryon demo"), quick=args.quick)
    try:
        result = run_demo(cfg, out, Progress("geryon demo"))
    except TestbedError as e:
        print(f"geryon demo: testbed error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(table(result))
        print(f"result: {result['path']}")
        for chart in result.get("charts", []):
            print(f"chart: {chart}")
        timeline = (result.get("prediction") or {}).get("timeline") or {}
        if timeline.get("trace"):
            print(f"trace: {timeline['trace']} (Geryon's simulated run: chrome://tracing or ui.perfetto.dev)")
    return report_failures([result], "demo")


def run_bench_cmd(args: argparse.Namespace) -> int:
    from geryon.demo.runner import run_bench

    cfg = bench_config(args)
    out = _out_dir(args.out)
    _in_user_namespace(sys.argv[1:], "bench")
    from geryon.testbed import TestbedError

    try:
        results = run_bench(cfg, out, Progress("geryon bench"))
    except TestbedError as e:
        print(f"geryon bench: testbed error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for result in results:
            print(table(result))
            print()
        print(f"results: {out / 'bench.json'}")
        if (out / "bench.png").is_file():
            print(f"chart: {out / 'bench.png'}")
    return report_failures(results, "bench")
