"""`python -m geryon.dashboard --regenerate | --check [--out PATH]`: write the dashboard JSON, or verify that
the committed file equals what the code generates (exit 1 naming the stale file). Bad arguments exit 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

try:
    from geryon.dashboard.flow_priorities import FILE_NAME, flow_priorities
    from geryon.dashboard.grafana import render
except ModuleNotFoundError as e:  # the SDK is an extra: name it instead of a traceback
    if e.name is None or not e.name.startswith("grafana_foundation_sdk"):
        raise
    sys.exit("python -m geryon.dashboard: needs grafana-foundation-sdk: pip install 'geryon[dashboard]'")

# The checkout's deploy/grafana/dashboards/, found from this file (geryon/dashboard/ -> repository root).
ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS_DIR = ROOT / "deploy" / "grafana" / "dashboards"
DEFAULT_PATH = DASHBOARDS_DIR / FILE_NAME
REGENERATE = "python -m geryon.dashboard --regenerate"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m geryon.dashboard",
        description="Generate the Geryon Grafana dashboard JSON, or check the committed file is current.",
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--regenerate", action="store_true", help="write the dashboard JSON")
    action.add_argument("--check", action="store_true", help="exit 1 when the file differs from the code")
    p.add_argument(
        "--out",
        metavar="PATH",
        type=Path,
        help=f"the dashboard file to write or check (default: {DEFAULT_PATH.relative_to(ROOT)}"
        " in this checkout)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)  # exits 2 with a usage line on bad arguments
    path: Path = args.out if args.out is not None else DEFAULT_PATH
    if args.out is None and not (ROOT / "deploy").is_dir():
        print(f"error: {ROOT} is no Geryon checkout (it has no deploy/); give --out PATH", file=sys.stderr)
        return 2
    text = render(flow_priorities())
    if args.check:
        try:
            current = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            print(f"{path}: missing; run `{REGENERATE}`", file=sys.stderr)
            return 1
        except (OSError, UnicodeDecodeError) as e:
            print(f"error: --out {path}: cannot read it: {e}", file=sys.stderr)
            return 2
        if current != text:
            print(f"{path}: stale (differs from geryon/dashboard/); run `{REGENERATE}`", file=sys.stderr)
            return 1
        print(f"{path}: up to date")
        return 0
    if path.is_dir():
        print(f"error: --out {path}: is a directory; give a file path", file=sys.stderr)
        return 2
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        print(f"error: --out {path}: cannot write it: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
