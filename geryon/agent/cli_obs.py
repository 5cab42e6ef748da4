"""`geryon agent status` and `geryon agent flows`: gRPC clients of the running agent daemon."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from geryon.errors import UsageError

DEFAULT_API_SOCKET = "/run/geryon/agent.sock"


def register(agent_sub: Any) -> None:
    """Adds the two subcommands to `geryon agent`'s subparsers."""
    p = agent_sub.add_parser(
        "status",
        help="ask the running agent: config sync, jobs, PS-worker pairs",
        description="Asks the running agent daemon over its gRPC API whether the host matches the config, "
        "which jobs are registered, and whether each PS-worker pair on this host has its flows with the "
        "right DSCP. Exit status 1 when the host drifted or a pair has a problem.",
    )
    _connection_args(p)
    p.set_defaults(run=run_status)
    p = agent_sub.add_parser(
        "flows",
        help="list the flows of registered jobs on this host",
        description="Lists the TCP flows of the registered jobs as the running agent sees them in the "
        "kernel: role, peer task, class, DSCP, bytes, RTT and retransmits.",
    )
    _connection_args(p)
    p.add_argument("--job", metavar="ID", default="", help="only this job (default: every registered job)")
    p.set_defaults(run=run_flows)


def _connection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--api-socket", metavar="PATH", help=f"the agent's unix socket (default {DEFAULT_API_SOCKET})"
    )
    p.add_argument("--api-tcp", metavar="HOST:PORT", help="the agent's TLS endpoint instead of the socket")
    p.add_argument("--tls-ca", metavar="FILE", help="with --api-tcp: CA certificate that signed the agent's")
    p.add_argument(
        "--tls-cert", metavar="FILE", help="with --api-tcp: client certificate, when the agent asks"
    )
    p.add_argument("--tls-key", metavar="FILE", help="with --api-tcp: the client certificate's key")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S", help="seconds to wait for the agent")
    p.add_argument("--json", action="store_true", help="print the reply as JSON")


def _read(path: str | None, flag: str) -> bytes | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot read ({e.strerror or e})") from None


def channel(args: argparse.Namespace) -> tuple[Any, str]:
    """A gRPC channel to the agent from the command line's connection arguments, and its address."""
    import grpc

    if args.api_tcp is not None:
        if args.api_socket is not None:
            raise UsageError("give --api-socket or --api-tcp, not both")
        if (args.tls_cert is None) != (args.tls_key is None):
            raise UsageError("--tls-cert and --tls-key go together")
        creds = grpc.ssl_channel_credentials(
            root_certificates=_read(args.tls_ca, "--tls-ca"),
            private_key=_read(args.tls_key, "--tls-key"),
            certificate_chain=_read(args.tls_cert, "--tls-cert"),
        )
        return grpc.secure_channel(args.api_tcp, creds), args.api_tcp
    for flag in ("tls_ca", "tls_cert", "tls_key"):
        if getattr(args, flag) is not None:
            raise UsageError(f"--{flag.replace('_', '-')} only applies with --api-tcp")
    path = args.api_socket or DEFAULT_API_SOCKET
    return grpc.insecure_channel(f"unix:{path}"), f"unix:{path}"


def _call(args: argparse.Namespace, method: str, request: Any) -> Any:
    import grpc

    from geryon.agent.proto import agent_pb2_grpc

    ch, address = channel(args)
    try:
        stub = agent_pb2_grpc.AgentStub(ch)
        return getattr(stub, method)(request, timeout=args.timeout)
    except grpc.RpcError as e:
        code = e.code()
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            raise UsageError(
                f"cannot reach the agent at {address} ({e.details()}); is `geryon agent run` running?"
            ) from None
        raise UsageError(f"{address}: {e.details()} ({code.name})") from None
    finally:
        ch.close()


def _to_dict(msg: Any) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict

    out: dict[str, Any] = MessageToDict(
        msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return out


def run_status(args: argparse.Namespace) -> int:
    from geryon.agent.proto import agent_pb2

    status = _call(args, "GetStatus", agent_pb2.GetStatusRequest())
    problems = [p for p in status.pairs if not p.ok]
    if args.json:
        print(json.dumps(_to_dict(status), indent=2))
        return 0 if status.in_sync and not problems else 1
    classes = ", ".join(f"{c.name}=DSCP {c.dscp}/prio {c.priority}" for c in status.classes)
    print(f"agent {status.version}: interfaces {', '.join(status.interfaces)}; classes {classes}")
    if status.HasField("last_apply"):
        import time

        print(f"last apply: {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(status.last_apply))}")
    if status.in_sync:
        print("config: in sync")
    else:
        print(f"config: DRIFT in {len(status.drift)} target(s)")
        for d in status.drift:
            print(f"  {d}")
    if not status.jobs:
        print("jobs: none registered")
    for job in status.jobs:
        it = f"{job.iteration_time_s:.3f} s" if job.HasField("iteration_time_s") else "-"
        th = ", ".join(f"{t:g}" for t in job.thresholds) or "-"
        roles = ", ".join(f"{r}: {len(t.addresses)}" for r, t in sorted(job.cluster.items()))
        print(f"job {job.job_id}: {roles}; iteration {it}; threshold {th}")
        for line in unresolved_lines(job) + fallback_lines(job):
            print(f"  {line}")
    for p in status.pairs:
        state = (
            "ok"
            if p.ok
            else "; ".join(
                [f"no flow for {c}" for c in p.missing_classes] + [f"wrong DSCP {d}" for d in p.wrong_dscps]
            )
        )
        print(f"  {p.job_id} {p.ps} <-> {p.worker}: {p.connections} flow(s), DSCP {list(p.dscps)}: {state}")
    return 0 if status.in_sync and not problems else 1


def unresolved_lines(job: Any) -> list[str]:
    """One line per flow of `job` (a JobStatus) that carried tensors the graph pass could not trace to a
    parameter; none when there were none, so a model the pass handles adds no noise."""
    names = {c.index: c.name for c in job.classes}
    out = []
    for f in job.unresolved:
        if f.bytes == 0:
            continue
        way = "received from" if f.direction == "received" else "sent to"
        cls = names.get(f.class_index, str(f.class_index))
        out.append(
            f"unresolved: {f.task} {way} {f.peer}, class {cls}: {f.bytes} bytes in {f.messages} tensor(s) "
            "the graph pass could not trace to a parameter"
        )
    return out


CAUSES = {
    "no_map_table": "no map_table installed",
    "unresolved_share": "edges the graph pass could not trace",
}


def fallback_lines(job: Any) -> list[str]:
    """One line per task of `job` (a JobStatus) whose data plane logged fallback warnings (issue 36):
    more than 1% of what it sent carried no parameter id; none for a job whose tensors all resolve."""
    out = []
    for w in job.fallback:
        if w.warnings == 0:
            continue
        cause = CAUSES.get(w.cause, w.cause)
        out.append(
            f"fallback: {w.task} logged {w.warnings} warning(s), last {100 * w.share:.1f}% of its bytes sent "
            f"on the default class ({cause}); see its log"
        )
    return out


def run_flows(args: argparse.Namespace) -> int:
    from geryon.agent.proto import agent_pb2

    reply = _call(args, "ListFlows", agent_pb2.ListFlowsRequest(job_id=args.job))
    if args.json:
        print(json.dumps(_to_dict(reply), indent=2))
        return 0
    header = (
        "job",
        "role",
        "peer",
        "class",
        "dscp",
        "local",
        "remote",
        "sent",
        "received",
        "rtt_ms",
        "retrans",
    )
    rows = [
        (
            f.job_id,
            f.role,
            f.peer,
            f.class_name,
            str(f.dscp),
            f.local,
            f.remote,
            str(f.bytes_sent),
            str(f.bytes_received),
            f"{f.rtt_us / 1000:.2f}",
            str(f.retransmits),
        )
        for f in reply.flows
    ]
    if not rows:
        print("no flows of registered jobs on this host", file=sys.stderr)
        return 0
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    return 0
