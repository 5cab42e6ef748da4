"""`geryon tag`: one row per parameter (order, name, shape, size, urgency, class) and a summary."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from geryon.errors import UsageError
from geryon.progress import Progress
from geryon.tagger.map_table import MAX_CLASSES, default_thresholds, validate_thresholds
from geryon.tagger.models import BUILTIN_MODELS, ModelLoadError, check_model_spec
from geryon.tagger.partition import parse_size
from geryon.tagger.tac import OpTimes, OpTimesError
from geryon.tagger.tagging import Tagging
from geryon.tagger.urgency import URGENCY_FUNCTIONS
from geryon.tfenv import import_tensorflow


def register(sub: Any) -> None:
    p = sub.add_parser(
        "tag",
        help="tag a model's parameters: consumption order, urgency, priority class",
        description="Traces a model's forward pass and prints, for every trainable parameter in the order "
        "the forward pass consumes it, its size, urgency and priority class (0 = most urgent).",
    )
    p.add_argument(
        "--model",
        required=True,
        help=f"one of {', '.join(sorted(BUILTIN_MODELS))}, or module:callable returning a Keras model, "
        "a ConcreteFunction or a TF1 tf.Graph",
    )
    p.add_argument(
        "--urgency",
        default="layer",
        choices=sorted(URGENCY_FUNCTIONS),
        help="urgency function: layer (the paper's 1 - l/L), tic (TicTac's TIC, from the graph alone) or "
        "tac (TicTac's TAC, from the graph and op times: needs --op-times)",
    )
    p.add_argument(
        "--op-times",
        metavar="FILE",
        help="with --urgency tac: the time oracle, a geryon.op_times JSON (seconds per graph op and per "
        "parameter transfer), e.g. from a profile or an in-cluster trace "
        "(geryon.threshold.tac_times.op_times_from_profile)",
    )
    p.add_argument(
        "--threshold",
        type=float,
        nargs="+",
        metavar="T",
        help="k-1 strictly increasing thresholds in [0, 1] for k classes (default: 0.5, two classes)",
    )
    p.add_argument(
        "--classes",
        type=int,
        metavar="K",
        help=f"number of classes, 2..{MAX_CLASSES}, with evenly spaced thresholds (instead of --threshold)",
    )
    p.add_argument("--input-shape", metavar="H,W,C", help="input shape without the batch dimension")
    p.add_argument(
        "--num-ps", type=int, metavar="N", help="also print the partition plan over N parameter servers"
    )
    p.add_argument(
        "--slice-size",
        metavar="BYTES",
        help="with --num-ps: slice parameters into shards of at most this many bytes "
        "(e.g. 1MiB, 512KiB, 4000000)",
    )
    p.add_argument(
        "--map-table", metavar="FILE", help="write the map_table (JSON for the native side) to FILE"
    )
    p.add_argument("--json", action="store_true", help="print the full table and summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(run=run)


def parse_op_times(urgency: str, path: str | None) -> OpTimes | None:
    """--op-times FILE, required by --urgency tac (TAC has no meaning without op times) and only by it."""
    if urgency == "tac" and path is None:
        raise UsageError(
            "--urgency tac needs --op-times FILE: TicTac's TAC orders transfers by measured or modelled "
            "op and transfer times, and none were given (--urgency tic needs none)"
        )
    if path is None:
        return None
    if urgency != "tac":
        raise UsageError(f"--op-times: only with --urgency tac (got --urgency {urgency})")
    try:
        return OpTimes.load(path)
    except OpTimesError as e:
        raise UsageError(f"--op-times: {e}") from None


def _parse_args(args: argparse.Namespace) -> tuple[tuple[float, ...], tuple[int, ...] | None, int | None]:
    """Validates everything that needs no TensorFlow, so bad input fails fast."""
    try:
        check_model_spec(args.model)
    except ModelLoadError as e:
        raise UsageError(str(e)) from None
    if args.threshold is not None and args.classes is not None and args.classes != len(args.threshold) + 1:
        raise UsageError(
            f"--classes {args.classes} disagrees with {len(args.threshold)} --threshold values "
            f"(k classes need k-1 thresholds)"
        )
    try:
        if args.threshold is not None:
            thresholds = validate_thresholds(args.threshold, "--threshold")
        else:
            thresholds = default_thresholds(args.classes if args.classes is not None else 2, "--classes")
    except ValueError as e:
        raise UsageError(str(e)) from None
    input_shape = parse_input_shape(args.input_shape)
    if args.map_table and not os.path.isdir(os.path.dirname(os.path.abspath(args.map_table))):
        raise UsageError(f"--map-table {args.map_table!r}: its directory does not exist")
    if args.slice_size is not None and args.num_ps is None:
        raise UsageError("--slice-size needs --num-ps (the plan partitions over the parameter servers)")
    return thresholds, input_shape, parse_plan_args(args.num_ps, args.slice_size)


def parse_input_shape(text: str | None) -> tuple[int, ...] | None:
    """--input-shape ``H,W,C`` (no batch dimension); None when not given."""
    if not text:
        return None
    try:
        shape = tuple(int(d) for d in text.split(","))
    except ValueError:
        shape = ()
    if not shape or any(d <= 0 for d in shape):
        raise UsageError(f"--input-shape {text!r}: expected positive integers like 224,224,3")
    return shape


def parse_plan_args(num_ps: int | None, slice_size: str | None) -> int | None:
    """Checks --num-ps and returns --slice-size in bytes (None: no slicing)."""
    if num_ps is not None and num_ps < 1:
        raise UsageError(f"--num-ps {num_ps}: expected an integer >= 1")
    if slice_size is None:
        return None
    try:
        return parse_size(slice_size)
    except ValueError as e:
        raise UsageError(f"--slice-size: {e}") from None


def run(args: argparse.Namespace) -> int:
    thresholds, input_shape, slice_bytes = _parse_args(args)
    op_times = parse_op_times(args.urgency, getattr(args, "op_times", None))
    progress = Progress("geryon tag", enabled=not args.quiet)
    result = tag(
        args.model, args.urgency, thresholds, input_shape, args.num_ps, slice_bytes, progress, op_times
    )
    if args.map_table:
        # Write then rename: a process watching the file never reads half a table.
        tmp = f"{args.map_table}.tmp{os.getpid()}"
        try:
            with open(tmp, "w") as f:
                f.write(json.dumps(result["map_table"], indent=1) + "\n")
            os.replace(tmp, args.map_table)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise UsageError(f"--map-table {args.map_table!r}: {e.strerror}") from None
        progress.say(f"map_table v{result['map_table']['version']} written to {args.map_table}")
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_text(result))
    return 0


def tag(
    model_spec: str,
    urgency: str,
    thresholds: Sequence[float],
    input_shape: tuple[int, ...] | None,
    num_ps: int | None,
    slice_bytes: int | None,
    progress: Progress,
    op_times: OpTimes | None = None,
) -> dict[str, Any]:
    """Builds, traces and tags a model; returns the JSON-able result the CLI prints."""
    model = load_model(model_spec, input_shape, progress)
    with progress.step("tracing the forward graph and ranking parameters"):
        if urgency == "tac":
            if op_times is None:
                raise UsageError("--urgency tac needs --op-times FILE (TAC's op and transfer times)")
            tagging = tag_loaded(model_spec, model, "tic", input_shape)
            try:
                tagging = tagging.with_tac(op_times)
            except ValueError as e:
                raise UsageError(f"--op-times: {e}") from None
        else:
            tagging = tag_loaded(model_spec, model, urgency, input_shape)
    return describe(model_spec, tagging, thresholds, num_ps, slice_bytes)


def load_model(model_spec: str, input_shape: tuple[int, ...] | None, progress: Progress) -> Any:
    with progress.step("importing TensorFlow"):
        import_tensorflow()
    from geryon.tagger.models import BUILTIN_MODELS, build_model

    default = BUILTIN_MODELS.get(model_spec, (None, None))[1]
    if (
        default is not None
        and input_shape is not None
        and tuple(input_shape) != default
        and model_spec != "alexnet"
    ):
        shape = ",".join(map(str, default))
        progress.say(f"input shape differs from {shape}: {model_spec} is built without its classifier head")
    with progress.step(f"building {model_spec}"):
        try:
            return build_model(model_spec, input_shape)
        except ModelLoadError as e:
            raise UsageError(str(e)) from None
        except Exception as e:  # a user's callable or Keras rejecting an input shape
            raise UsageError(f"model {model_spec!r} could not be built: {type(e).__name__}: {e}") from None


def tag_loaded(model_spec: str, model: Any, urgency: str, input_shape: tuple[int, ...] | None) -> Tagging:
    from geryon.tagger import tag_model

    try:
        return tag_model(model, urgency, input_shape)
    except ValueError as e:  # the tagger's own checks: no variables, no input shape, bad graph
        raise UsageError(f"model {model_spec!r}: {e}") from None
    except Exception as e:  # the model's call failed while tracing (e.g. a wrong --input-shape)
        raise UsageError(f"model {model_spec!r} could not be traced: {type(e).__name__}: {e}") from None


def describe(
    model_spec: str,
    tagging: Tagging,
    thresholds: Sequence[float],
    num_ps: int | None,
    slice_bytes: int | None,
) -> dict[str, Any]:
    """The JSON-able result of tagging: rows, summary, map_table and, with `num_ps`, the plan."""
    table = tagging.map_table(thresholds)
    result: dict[str, Any] = {
        "model": model_spec,
        "urgency_function": tagging.urgency_function,
        "op_times_source": tagging.times_source,
        "thresholds": list(table.thresholds),
        "rows": tagging.rows(table),
        "summary": tagging.summary(table),
        "map_table": table.to_dict(),
    }
    if num_ps is not None:
        if any(p.parent is not None for p in tagging.params):
            raise UsageError("--num-ps: the model is already partitioned (its variables are shards)")
        plan = tagging.partition_plan(num_ps, slice_bytes)
        result["plan"] = plan.to_dict()
        shards = {group[0].parent: len(group) for group in plan.params}
        for row in result["rows"]:
            row["shards"] = shards[row["name"]]
    return result


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_text(result: dict[str, Any]) -> str:
    rows = result["rows"]
    with_plan = "plan" in result
    header = ["#", "name", "shape", "size", "urgency", "class", "kind"] + (["shards"] if with_plan else [])
    table = [
        [
            str(r["order"]),
            r["name"],
            "x".join(str(d) for d in r["shape"]) or "scalar",
            format_bytes(r["bytes"]),
            f"{r['urgency']:.3f}",
            str(r["class"]),
            r["kind"],
        ]
        + ([str(r["shards"])] if with_plan else [])
        for r in rows
    ]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(header)]
    right = {0, 3, 4, 5, 7}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    s = result["summary"]
    out = [
        f"model {result['model']}: urgency={result['urgency_function']}, thresholds={result['thresholds']} "
        f"({len(result['thresholds']) + 1} classes, 0 = most urgent)",
        line(header).rstrip(),
        *(line(row).rstrip() for row in table),
        "",
        f"{s['parameters']} parameters ({s['variables']} variables, {s['layers']} layers), "
        f"{format_bytes(s['total_bytes'])}",
    ]
    for c, (b, n, share) in enumerate(
        zip(s["bytes_per_class"], s["parameters_per_class"], s["share_per_class"], strict=True)
    ):
        out.append(f"  class {c}: {n} parameters, {format_bytes(b)} ({share * 100:.2f}% of bytes)")
    out.append(
        f"  dense/FC layers: {s['dense_share'] * 100:.2f}% of bytes; "
        f"conv layers: {s['conv_share'] * 100:.2f}%"
    )
    if s["unconsumed"]:
        out.append(f"  not read by the forward pass (urgency 0): {', '.join(s['unconsumed'])}")
    if with_plan:
        plan = result["plan"]
        slices = (
            "no slicing" if plan["slice_bytes"] is None else f"slices <= {format_bytes(plan['slice_bytes'])}"
        )
        out.append(
            f"  partition plan: {plan['num_ps']} PS, {slices}: {plan['total_shards']} shards; "
            "bytes per PS (trainable variables placed round-robin in model order): "
            + ", ".join(format_bytes(b) for b in plan["bytes_per_ps"])
        )
    return "\n".join(out) + "\n"
