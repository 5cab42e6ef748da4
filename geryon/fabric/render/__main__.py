"""`python -m geryon.fabric.render --regenerate`: rewrite switch-configs/rendered/ from the intents."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from geryon.fabric.intent import IntentError
from geryon.fabric.render import INTENTS_DIR, RENDERED_DIR, regenerate


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m geryon.fabric.render", description=__doc__)
    p.add_argument("--regenerate", action="store_true", required=True, help="rewrite the rendered configs")
    p.add_argument(
        "--intents", type=Path, default=INTENTS_DIR, help="intent YAML files (default: %(default)s)"
    )
    p.add_argument("--out", type=Path, default=RENDERED_DIR, help="where to write (default: %(default)s)")
    args = p.parse_args(argv)
    try:
        written = regenerate(args.intents, args.out)
    except IntentError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{len(written)} files under {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
