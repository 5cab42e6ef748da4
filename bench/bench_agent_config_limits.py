"""Time and peak memory (RSS) to reject a hostile or oversized agent config: the strict loader
(geryon.fields.load_yaml, via load_config) beside the loader it replaced (yaml.safe_load of the whole
text, then parse_config).

    .venv/bin/python bench/bench_agent_config_limits.py [--repeats 5] [--old-repeats 3] [--out FILE]

Cases (files written to a temp dir):
  8 MB config        an 8 MiB file of sysctl lines (the issue: 39 s and 1.1 GB to reject with the old loader)
  2 MB config        the same at 2 MiB
  alias bomb         9 levels of 9 aliases each ("billion laughs", 1 KiB of text)
  10000-deep nesting [[[...]]] 10000 levels deep
  duplicate key      a valid config with `trust:` given twice (the old loader kept the last one: accepted)
  valid config       the default two-class config: the interpreter + import baseline

Each load runs in a fresh `python -c` child (so its peak RSS is its own); the child reports the load's
wall time and its ru_maxrss. Loaders are interleaved per repeat (new, old, new, old, ...); medians,
and per case the paired old/new time ratio as median [min, max] over the pairs. Prints a table and
writes JSON (default out/bench/agent_config_limits.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import print_table, write_json

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, resource, sys, time
mode, path = sys.argv[1], sys.argv[2]
from geryon.agent.config import ConfigError, load_config, parse_config
start = time.perf_counter()
try:
    if mode == "new":
        load_config(path)
    else:
        import yaml
        try:
            data = yaml.safe_load(open(path, encoding="utf-8").read())
        except yaml.YAMLError as e:
            raise ConfigError(f"malformed YAML: {e}") from None
        except RecursionError:
            raise ConfigError("malformed YAML: nested too deeply") from None
        parse_config(data)
    outcome, msg = "accepted", ""
except ConfigError as e:
    outcome, msg = "rejected", str(e)[-120:]
elapsed = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": elapsed, "rss_kib": rss, "outcome": outcome, "msg": msg}))
"""


def write_cases(d: Path) -> dict[str, Path]:
    cases: dict[str, Path] = {}

    def sysctl_file(name: str, size: int) -> None:
        p = d / f"{name}.yaml"
        with open(p, "w") as fh:
            fh.write("interfaces: [eth0]\nsysctls:\n")
            i = 0
            written = 0
            while written < size:
                line = f"  net.ipv4.conf.eth{i}.accept_local: 1\n"
                fh.write(line)
                written += len(line)
                i += 1
        cases[name] = p

    sysctl_file("8 MB config", 8 * 1024 * 1024)
    sysctl_file("2 MB config", 2 * 1024 * 1024)
    bomb = ["interfaces: [eth0]", "a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        bomb.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    (d / "bomb.yaml").write_text("\n".join(bomb) + "\n")
    cases["alias bomb"] = d / "bomb.yaml"
    (d / "deep.yaml").write_text("interfaces: [eth0]\nx: " + "[" * 10000 + "]" * 10000 + "\n")
    cases["10000-deep nesting"] = d / "deep.yaml"
    (d / "dup.yaml").write_text("interfaces: [eth0]\ntrust: pcp\ntrust: dscp\n")
    cases["duplicate key"] = d / "dup.yaml"
    (d / "valid.yaml").write_text("interfaces: [eth0]\n")
    cases["valid config"] = d / "valid.yaml"
    return cases


def load_once(mode: str, path: Path, timeout: float) -> dict:
    try:
        r = subprocess.run(
            [sys.executable, "-c", CHILD, mode, str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
    except subprocess.TimeoutExpired:
        return {"s": None, "rss_kib": None, "outcome": f"timeout > {timeout:g} s", "msg": ""}
    if r.returncode != 0 or not r.stdout.strip():
        return {"s": None, "rss_kib": None, "outcome": "crashed", "msg": r.stderr.strip()[-200:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="loads per case with the strict loader")
    ap.add_argument("--old-repeats", type=int, default=3, help="loads per case with the old loader (slow)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per load before giving up")
    ap.add_argument("--out", default="out/bench/agent_config_limits.json")
    args = ap.parse_args()
    runs: dict[str, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory(prefix="gcfglim") as tmp:
        cases = write_cases(Path(tmp))
        sizes = {name: p.stat().st_size for name, p in cases.items()}
        for i in range(max(args.repeats, args.old_repeats)):
            for name, path in cases.items():
                for mode in ("new", "old"):
                    if i >= (args.repeats if mode == "new" else args.old_repeats):
                        continue
                    res = load_once(mode, path, args.timeout)
                    runs.setdefault(name, {}).setdefault(mode, []).append(res)
                    print(f"[{i + 1}] {name:20s} {mode}: {res['outcome']} {res['s']}", file=sys.stderr)
    rows = []
    for name, by_mode in runs.items():
        row: dict = {"case": name, "bytes": sizes[name]}
        for mode in ("new", "old"):
            rs = by_mode.get(mode, [])
            times = [r["s"] for r in rs if r["s"] is not None]
            rss = [r["rss_kib"] for r in rs if r["rss_kib"] is not None]
            row[f"{mode}_s"] = statistics.median(times) if times else None
            row[f"{mode}_rss_mib"] = statistics.median(rss) / 1024 if rss else None
            row[f"{mode}_outcome"] = ",".join(sorted({r["outcome"] for r in rs}))
            row[f"{mode}_n"] = len(rs)
        pairs = [
            o["s"] / n["s"]
            for n, o in zip(by_mode.get("new", []), by_mode.get("old", []), strict=False)
            if n["s"] and o["s"]
        ]
        row["ratio_median"] = statistics.median(pairs) if pairs else None
        row["ratio_min"] = min(pairs) if pairs else None
        row["ratio_max"] = max(pairs) if pairs else None
        row["new_message"] = next((r["msg"] for r in by_mode.get("new", []) if r["msg"]), "")
        rows.append(row)
    print_table(
        rows,
        [
            ("case", "case", ""),
            ("bytes", "bytes", "d"),
            ("new_outcome", "strict", ""),
            ("new_s", "strict s", ".4f"),
            ("new_rss_mib", "strict RSS MiB", ".1f"),
            ("old_outcome", "old", ""),
            ("old_s", "old s", ".3f"),
            ("old_rss_mib", "old RSS MiB", ".1f"),
            ("ratio_median", "old/new", ".2f"),
            ("ratio_min", "min", ".2f"),
            ("ratio_max", "max", ".2f"),
        ],
    )
    print(f"strict: {args.repeats} loads per case, old: {args.old_repeats}; times are the load only,")
    print("RSS is the child's peak (interpreter and imports included: compare with 'valid config').")
    write_json(
        args.out,
        {
            "repeats": args.repeats,
            "old_repeats": args.old_repeats,
            "python": sys.version.split()[0],
            "rows": rows,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
