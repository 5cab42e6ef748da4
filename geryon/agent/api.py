"""The agent's gRPC API: the servicer over the job registry and flow discovery, and its listeners.

By default it listens only on a unix socket with mode 0600 (root's training launcher, or whoever root
lets in by group or ACL); TCP is served only with TLS.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Sequence
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import grpc

from geryon import __version__
from geryon.agent.flows import FlowDiscovery
from geryon.agent.jobs import (
    JobClass,
    JobError,
    JobFlow,
    JobNotFound,
    JobRegistry,
    JobState,
    PairReport,
    TaskFallback,
    UnresolvedFlow,
    make_job,
    map_all_jobs,
)
from geryon.agent.proto import agent_pb2 as pb
from geryon.agent.proto import agent_pb2_grpc as pb_grpc
from geryon.errors import UsageError

if TYPE_CHECKING:
    from geryon.agent.view import AgentView, TlsFiles

UNIX_PATH_MAX = 107  # sun_path is 108 bytes with the terminating NUL


def class_policy(i: int, c: Any) -> pb.ClassPolicy:
    return pb.ClassPolicy(index=i, name=c.name, dscp=c.dscp, priority=c.priority, tos=c.dscp << 2)


def flow_policy(job_id: str, classes: Sequence[JobClass]) -> pb.FlowPolicy:
    return pb.FlowPolicy(job_id=job_id, classes=[class_policy(i, c) for i, c in enumerate(classes)])


def pair_status(p: PairReport) -> pb.PairStatus:
    return pb.PairStatus(
        job_id=p.job_id,
        ps=p.ps.name,
        worker=p.worker.name,
        connections=p.connections,
        dscps=list(p.dscps),
        missing_classes=list(p.missing),
        wrong_dscps=list(p.wrong),
        ok=p.ok,
    )


def flow_info(jf: JobFlow) -> pb.FlowInfo:
    f = jf.flow.as_dict()
    return pb.FlowInfo(
        job_id=jf.job_id,
        role=jf.role,
        peer=jf.peer_label,
        class_name=jf.class_name,
        local=f["local"],
        remote=f["peer"],
        dscp=jf.flow.dscp,
        bytes_sent=jf.flow.bytes_sent,
        bytes_acked=jf.flow.bytes_acked,
        bytes_received=jf.flow.bytes_received,
        rtt_us=jf.flow.rtt_us,
        retransmits=jf.flow.retransmits,
    )


def unresolved_flow(f: UnresolvedFlow) -> pb.UnresolvedFlow:
    return pb.UnresolvedFlow(
        task=f.task,
        peer=f.peer,
        class_index=f.class_index,
        direction=f.direction,
        bytes=f.bytes,
        messages=f.messages,
    )


def task_fallback(w: TaskFallback) -> pb.TaskFallback:
    return pb.TaskFallback(task=w.task, warnings=w.warnings, share=w.share, cause=w.cause)


def _cluster(spec_cluster: dict[str, list[str]]) -> dict[str, pb.TaskAddresses]:
    return {role: pb.TaskAddresses(addresses=addrs) for role, addrs in spec_cluster.items()}


def job_status(state: JobState) -> pb.JobStatus:
    msg = pb.JobStatus(
        job_id=state.spec.job_id,
        cluster=_cluster(state.spec.cluster()),
        classes=[class_policy(i, c) for i, c in enumerate(state.spec.classes)],
        thresholds=list(state.thresholds or ()),
        registered_at=state.registered_at,
        unresolved=[unresolved_flow(f) for f in state.unresolved],
        fallback=[task_fallback(w) for w in state.fallback],
    )
    if state.iteration_time_s is not None:
        msg.iteration_time_s = state.iteration_time_s
    if state.reported_at is not None:
        msg.reported_at = state.reported_at
    return msg


class AgentServicer(pb_grpc.AgentServicer):
    def __init__(self, agent: AgentView, jobs: JobRegistry, discovery: FlowDiscovery) -> None:
        self.agent = agent
        self.jobs = jobs
        self.discovery = discovery

    @staticmethod
    def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
        context.abort(code, message)
        raise AssertionError("unreachable")  # context.abort raises

    def _state(self, job_id: str, context: grpc.ServicerContext) -> JobState:
        try:
            return self.jobs.get(job_id)
        except JobNotFound as e:
            self._abort(context, grpc.StatusCode.NOT_FOUND, str(e))

    def RegisterJob(
        self, request: pb.RegisterJobRequest, context: grpc.ServicerContext
    ) -> pb.RegisterJobResponse:
        cluster = {role: list(tasks.addresses) for role, tasks in request.cluster.items()}
        try:
            spec = make_job(
                request.job_id,
                cluster,
                self.agent.config().classes,
                list(request.classes),
                list(request.ignore_dscp),
            )
        except JobError as e:
            self._abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(e))
        replaced = self.jobs.register(spec)
        return pb.RegisterJobResponse(replaced=replaced, policy=flow_policy(spec.job_id, spec.classes))

    def UnregisterJob(
        self, request: pb.UnregisterJobRequest, context: grpc.ServicerContext
    ) -> pb.UnregisterJobResponse:
        try:
            self.jobs.unregister(request.job_id)
        except JobNotFound as e:
            self._abort(context, grpc.StatusCode.NOT_FOUND, str(e))
        return pb.UnregisterJobResponse()

    def GetFlowPolicy(self, request: pb.GetFlowPolicyRequest, context: grpc.ServicerContext) -> pb.FlowPolicy:
        state = self._state(request.job_id, context)
        return flow_policy(state.spec.job_id, state.spec.classes)

    def ReportIteration(
        self, request: pb.ReportIterationRequest, context: grpc.ServicerContext
    ) -> pb.ReportIterationResponse:
        iteration = request.iteration_time_s if request.HasField("iteration_time_s") else None
        thresholds = list(request.thresholds) or None
        unresolved = [
            UnresolvedFlow(f.task, f.peer, f.class_index, f.direction, f.bytes, f.messages)
            for f in request.unresolved
        ]
        fallback = [TaskFallback(w.task, w.warnings, w.share, w.cause) for w in request.fallback]
        if iteration is None and thresholds is None and not unresolved and not fallback:
            self._abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "give iteration_time_s, thresholds, unresolved or fallback (or several of them)",
            )
        try:
            self.jobs.report(request.job_id, iteration, thresholds, unresolved, fallback)
        except JobNotFound as e:
            self._abort(context, grpc.StatusCode.NOT_FOUND, str(e))
        except JobError as e:
            self._abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return pb.ReportIterationResponse()

    def _observe(self, states: list[JobState]) -> tuple[list[JobFlow], list[PairReport]]:
        if not states:
            return [], []
        return map_all_jobs(states, self.discovery.flows(), self.discovery.listeners())

    def GetStatus(self, request: pb.GetStatusRequest, context: grpc.ServicerContext) -> pb.AgentStatus:
        config = self.agent.config()
        drift = list(self.agent.drift())
        states = self.jobs.states()
        _, pairs = self._observe(states)
        msg = pb.AgentStatus(
            version=__version__,
            interfaces=list(config.interfaces),
            classes=[class_policy(i, c) for i, c in enumerate(config.classes)],
            in_sync=not drift,
            drift=drift,
            jobs=[job_status(s) for s in states],
            pairs=[pair_status(p) for p in pairs],
        )
        last = self.agent.last_apply()
        if last is not None:
            msg.last_apply = last
        return msg

    def ListFlows(self, request: pb.ListFlowsRequest, context: grpc.ServicerContext) -> pb.ListFlowsResponse:
        states = [self._state(request.job_id, context)] if request.job_id else self.jobs.states()
        job_flows, pairs = self._observe(states)
        return pb.ListFlowsResponse(
            flows=[flow_info(jf) for jf in job_flows], pairs=[pair_status(p) for p in pairs]
        )


# --- listeners ---


def load_tls(tls: TlsFiles) -> grpc.ServerCredentials:
    def read(path: Path | None, flag: str) -> bytes | None:
        if path is None:
            return None
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise UsageError(f"{flag} {path}: cannot read ({e.strerror or e})") from None
        if b"-----BEGIN" not in data:
            raise UsageError(f"{flag} {path}: not a PEM file")
        return data

    cert = read(tls.cert, "--tls-cert")
    key = read(tls.key, "--tls-key")
    ca = read(tls.client_ca, "--tls-client-ca")
    assert cert is not None and key is not None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


def _prepare_unix_path(path: str) -> None:
    """Refuses a path that is not ours to take; removes a stale socket left by a dead agent."""
    if len(os.fsencode(path)) > UNIX_PATH_MAX:
        raise UsageError(
            f"--api-socket {path}: longer than {UNIX_PATH_MAX} bytes, the limit for a unix socket"
        )
    p = Path(path)
    if p.exists() or p.is_symlink():
        if not stat.S_ISSOCK(p.lstat().st_mode):
            raise UsageError(f"--api-socket {path}: exists and is not a socket; refusing to replace it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            p.unlink()  # nobody answers: a stale socket
        else:
            raise UsageError(f"--api-socket {path}: another process is listening there (another agent?)")
        finally:
            probe.close()
    if not p.parent.exists():
        # A directory the agent makes for its socket is root's alone; an existing one (e.g. /run) is
        # left as it is: the socket's own 0600 (see serve) is what keeps others out.
        p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)


def serve(
    servicer: AgentServicer,
    *,
    unix_path: str | None,
    tcp: tuple[str, int] | None,
    credentials: grpc.ServerCredentials | None,
    max_workers: int = 4,
) -> tuple[grpc.Server, list[str]]:
    """Starts a gRPC server; returns it and the addresses it bound ('unix:PATH', 'HOST:PORT')."""
    if tcp is not None and credentials is None:
        raise UsageError("the API serves TCP only with TLS credentials")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="geryon-api"))
    pb_grpc.add_AgentServicer_to_server(servicer, server)
    addresses = []
    try:
        if unix_path is not None:
            _prepare_unix_path(unix_path)
            addresses.append(f"unix:{unix_path}")
        if tcp is not None:
            host, port = tcp
            shown = f"[{host}]" if ":" in host else host
            try:
                bound = server.add_secure_port(f"{shown}:{port}", credentials)
            except RuntimeError as e:
                raise UsageError(f"--api-tcp {shown}:{port}: cannot listen ({e})") from None
            addresses.append(f"{shown}:{bound}")
        # The unix socket is created 0600 by bind itself (umask 077 around gRPC's bind and listen): a
        # chmod after start left a window in which, under umask 000, another user connected and was
        # answered. The umask is process-wide, so other threads' files are only made stricter meanwhile.
        old_umask = os.umask(0o077) if unix_path is not None else None
        try:
            if unix_path is not None:
                server.add_insecure_port(f"unix:{unix_path}")
            server.start()
        finally:
            if old_umask is not None:
                os.umask(old_umask)
        if unix_path is not None:
            os.chmod(unix_path, 0o600)  # belt and braces; already 0600
    except BaseException:
        server.stop(0)
        raise
    return server, addresses
