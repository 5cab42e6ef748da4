"""The `geryon` command. Subcommands live beside the parts they drive and register themselves here."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from geryon import __version__
from geryon.errors import UsageError


def build_parser() -> argparse.ArgumentParser:
    from geryon import demo
    from geryon.agent import cli as agent_cli
    from geryon.fabric import cli as fabric_cli
    from geryon.fabric import cli_check as fabric_check_cli
    from geryon.jobs import cli as jobs_cli
    from geryon.plan import cli as plan_cli
    from geryon.tagger import cli as tagger_cli
    from geryon.testbed import cli as testbed_cli
    from geryon.tf import cli as tf_cli
    from geryon.threshold import cli as threshold_cli

    parser = argparse.ArgumentParser(
        prog="geryon",
        description="Network-level flow scheduling for parameter-server training.",
    )
    parser.add_argument("--version", action="version", version=f"geryon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    tagger_cli.register(sub)
    threshold_cli.register(sub)
    plan_cli.register(sub)
    demo.register(sub)
    agent_cli.register(sub)
    tf_cli.register(sub)
    fabric_check_cli.register(sub)
    fabric_cli.register(sub)
    testbed_cli.register(sub)
    jobs_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except UsageError as e:
        print(f"geryon {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"geryon {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`geryon simulate | head`): not an error of ours. Point stdout at
        # /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
