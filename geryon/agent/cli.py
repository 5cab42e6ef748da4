"""`geryon agent plan|apply|verify|restore|run`: the host agent's command line (arguments only: the
commands are geryon.agent.commands', the daemon geryon.agent.daemon's).

Exit codes: 0 ok; 1 drift (verify) or a failed apply/restore (rolled back); 2 bad input (config,
arguments, journal), with nothing applied.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from geryon.agent.commands import run_apply, run_plan, run_restore, run_verify
from geryon.agent.journal import DEFAULT_PATH as DEFAULT_JOURNAL

DEFAULT_CONFIG = "/etc/geryon/agent.yaml"


def register(sub: Any) -> None:
    agent = sub.add_parser(
        "agent",
        help="the host agent: declarative host QoS (queues, sysctls, DCB, RoCE) with drift repair",
        description="Makes this host's QoS match a YAML config: plan shows the diff, apply makes it so "
        "(all or nothing), verify checks for drift, restore undoes Geryon, run keeps it in sync.",
    )
    asub = agent.add_subparsers(dest="agent_command", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser, config: bool = True, journal: bool = True) -> None:
        if config:
            p.add_argument("--config", default=DEFAULT_CONFIG, metavar="FILE", help="agent config (YAML)")
        if journal:
            p.add_argument(
                "--journal",
                default=DEFAULT_JOURNAL,
                metavar="FILE",
                help="where the pre-Geryon state is kept",
            )
        p.add_argument("--netns", metavar="NAME", help="act inside this network namespace (ip netns name)")
        p.add_argument(
            "--root",
            default="/",
            metavar="DIR",
            help="root for sysfs/configfs (RoCE ToS, ECN); tests use a tree",
        )

    p = asub.add_parser("plan", help="show what apply would change (changes nothing)")
    common(p)
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(run=run_plan)

    p = asub.add_parser("apply", help="make the host match the config; on any failure roll everything back")
    common(p)
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(run=run_apply)

    p = asub.add_parser("verify", help="exit 1 and list the drift when the host differs from the config")
    common(p)
    p.add_argument("--json", action="store_true", help="print the drift as JSON")
    p.set_defaults(run=run_verify)

    p = asub.add_parser("restore", help="bring back the state from before Geryon's first apply (journal)")
    common(p, config=False)
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(run=run_restore)

    from geryon.agent import daemon

    p = asub.add_parser("run", help="the daemon: apply, then watch netlink and repair drift")
    common(p)
    daemon_arguments(p)
    p.set_defaults(run=daemon.run)

    try:
        cli_obs = importlib.import_module("geryon.agent.cli_obs")  # `agent flows|status`, when installed
    except ImportError:
        pass
    else:
        cli_obs.register(asub)


def daemon_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--interval", type=float, default=30.0, metavar="S", help="periodic verify, seconds (default 30)"
    )
    p.add_argument(
        "--debounce",
        type=float,
        default=0.2,
        metavar="S",
        help="wait this long after a netlink event before verifying, so one change is one repair",
    )
    p.add_argument(
        "--api-socket",
        default="/run/geryon/agent.sock",
        metavar="PATH",
        help="gRPC API on this unix socket (mode 0600); '' to disable",
    )
    p.add_argument(
        "--api-tcp", metavar="HOST:PORT", help="also serve the API on TCP (needs --tls-cert/--tls-key)"
    )
    p.add_argument("--tls-cert", metavar="FILE", help="server certificate (PEM) for --api-tcp")
    p.add_argument("--tls-key", metavar="FILE", help="server key (PEM) for --api-tcp")
    p.add_argument(
        "--tls-client-ca", metavar="FILE", help="CA (PEM) that client certificates must chain to (mTLS)"
    )
    cluster = p.add_argument_group(
        "cluster view (docs/jobs.md)",
        "with --etcd the agent registers its host in etcd under a lease it keeps alive (only registered "
        "hosts may carry jobs' tasks) and logs the bands the controller gives the host's jobs",
    )
    cluster.add_argument("--etcd", metavar="URL[,URL...]", help="etcd endpoints; http only to loopback")
    cluster.add_argument(
        "--cluster-host",
        metavar="NAME",
        help="this host's name in the jobs' task addresses (default: the system's host name)",
    )
    cluster.add_argument(
        "--etcd-prefix", default=None, metavar="PREFIX", help="key prefix (default /geryon/)"
    )
    cluster.add_argument(
        "--cluster-ttl",
        type=int,
        default=5,
        metavar="S",
        help="the host's lease, seconds: a dead agent's host leaves the view this long after (default 5)",
    )
    cluster.add_argument("--etcd-cacert", metavar="FILE", help="CA (PEM) of etcd's server certificate")
    cluster.add_argument("--etcd-cert", metavar="FILE", help="client certificate (PEM) for etcd")
    cluster.add_argument("--etcd-key", metavar="FILE", help="the client certificate's key (PEM)")
    p.add_argument(
        "--metrics",
        default="127.0.0.1:9477",
        metavar="HOST:PORT",
        help="Prometheus metrics (/metrics) and the status page (/, /status.json); "
        "default 127.0.0.1:9477, '' to disable",
    )
