"""What `import tensorflow` costs one process, and what a package version changes in it.

    .venv/bin/python bench/bench_tf_import.py [--runs 10] [--alt DIR] [--module tensorflow]

Every Geryon process (agent aside) and every TF process of the tests starts by importing TensorFlow, and
`make test` starts several hundred of them on a 2-core machine: the import's CPU time is a large share of
the suite's. Each run starts a fresh `python -c "import MODULE"` and reads its user + system CPU from
wait4 (RUSAGE of that child alone) and its wall time. With `--alt DIR` (a `pip install --target DIR`
of other package versions, put first on PYTHONPATH) the two variants alternate run by run, A B A B, and
the table gives each one's median and the paired ratio alt/installed with a 95% bootstrap interval of
the median ratio. One `-X importtime` run of each variant lists the modules whose own import time is
largest. Writes JSON (default out/bench/tf_import.json).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import print_table, write_json

from geryon.demo.paired import bootstrap_ci

TOP = 8  # modules listed per variant from -X importtime


def child_env(alt: str | None) -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if alt:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (alt, env.get("PYTHONPATH", "")) if p)
    return env


def one_run(module: str, alt: str | None) -> dict[str, float]:
    """CPU (user + sys) and wall seconds of one fresh interpreter importing `module`."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import {module}"],
        env=child_env(alt),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"import {module} failed (exit {proc.returncode}): {err.decode()[-2000:]}")
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall}


def top_modules(module: str, alt: str | None) -> list[dict[str, Any]]:
    """The modules with the largest own (self) import time, from one -X importtime run."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        env=child_env(alt),
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, own, total, name = (part.strip() for part in line.replace("import time:", "|").split("|"))
        rows.append({"module": name, "self_ms": int(own) / 1e3, "cumulative_ms": int(total) / 1e3})
    return sorted(rows, key=lambda r: -r["self_ms"])[:TOP]


def version_of(package: str, alt: str | None) -> str:
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    done = subprocess.run([sys.executable, "-c", code], env=child_env(alt), capture_output=True, text=True)
    return done.stdout.strip() or "not installed"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="runs per variant (default 10)")
    ap.add_argument("--alt", help="a folder of other package versions, first on PYTHONPATH for variant B")
    ap.add_argument("--module", default="tensorflow", help="the module to import (default tensorflow)")
    ap.add_argument("--versions-of", default="ml_dtypes,numpy", help="packages whose versions are printed")
    ap.add_argument("--out", default="out/bench/tf_import.json")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error(f"--runs: {args.runs} must be at least 1")
    if args.alt is not None and not Path(args.alt).is_dir():
        ap.error(f"--alt: {args.alt} is not a folder")
    variants: dict[str, str | None] = {"installed": None}
    if args.alt:
        variants["alt"] = str(Path(args.alt).resolve())
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for i in range(args.runs):
        for name, alt in variants.items():  # A B A B: both see the same machine, round by round
            runs[name].append(one_run(args.module, alt))
        print(f"round {i + 1}/{args.runs}", file=sys.stderr, flush=True)
    packages = [p for p in args.versions_of.split(",") if p]
    rows = []
    for name, alt in variants.items():
        cpu = [r["cpu_s"] for r in runs[name]]
        wall = [r["wall_s"] for r in runs[name]]
        versions = ", ".join(f"{p} {version_of(p, alt)}" for p in packages)
        rows.append(
            {
                "variant": name,
                "versions": versions,
                "cpu": statistics.median(cpu),
                "cpu_lo": min(cpu),
                "cpu_hi": max(cpu),
                "wall": statistics.median(wall),
            }
        )
    print(f"\nimport {args.module}: {args.runs} runs per variant, alternated")
    print_table(
        rows,
        [
            ("variant", "variant", "s"),
            ("versions", "versions", "s"),
            ("cpu", "cpu s (median)", ".3f"),
            ("cpu_lo", "min", ".3f"),
            ("cpu_hi", "max", ".3f"),
            ("wall", "wall s", ".3f"),
        ],
    )
    paired: dict[str, Any] | None = None
    if "alt" in runs:
        ratios = [b["cpu_s"] / a["cpu_s"] for a, b in zip(runs["installed"], runs["alt"], strict=True)]
        ci = bootstrap_ci(ratios)
        paired = {"ratio": statistics.median(ratios), "ci": list(ci) if ci else None, "pairs": len(ratios)}
        shown = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "(one pair: no interval)"
        print(f"\nCPU alt / installed: {paired['ratio']:.3f} {shown}, {len(ratios)} pairs")
    tops = {name: top_modules(args.module, alt) for name, alt in variants.items()}
    for name, top in tops.items():
        print(f"\nlargest own import times ({name}, one -X importtime run):")
        print_table(
            top,
            [("module", "module", "s"), ("self_ms", "self ms", ".1f"), ("cumulative_ms", "cum ms", ".1f")],
        )
    write_json(
        args.out,
        {
            "module": args.module,
            "runs": runs,
            "variants": {name: alt for name, alt in variants.items()},
            "rows": rows,
            "paired_cpu_alt_over_installed": paired,
            "top_modules": tops,
            "loadavg": os.getloadavg(),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
