from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskAddresses(_message.Message):
    __slots__ = ("addresses",)
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    addresses: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, addresses: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterJobRequest(_message.Message):
    __slots__ = ("job_id", "cluster", "classes", "ignore_dscp")
    class ClusterEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TaskAddresses
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TaskAddresses, _Mapping]] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    IGNORE_DSCP_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    cluster: _containers.MessageMap[str, TaskAddresses]
    classes: _containers.RepeatedScalarFieldContainer[str]
    ignore_dscp: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, job_id: _Optional[str] = ..., cluster: _Optional[_Mapping[str, TaskAddresses]] = ..., classes: _Optional[_Iterable[str]] = ..., ignore_dscp: _Optional[_Iterable[int]] = ...) -> None: ...

class RegisterJobResponse(_message.Message):
    __slots__ = ("replaced", "policy")
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    replaced: bool
    policy: FlowPolicy
    def __init__(self, replaced: _Optional[bool] = ..., policy: _Optional[_Union[FlowPolicy, _Mapping]] = ...) -> None: ...

class UnregisterJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class UnregisterJobResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetFlowPolicyRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ClassPolicy(_message.Message):
    __slots__ = ("index", "name", "dscp", "priority", "tos")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DSCP_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TOS_FIELD_NUMBER: _ClassVar[int]
    index: int
    name: str
    dscp: int
    priority: int
    tos: int
    def __init__(self, index: _Optional[int] = ..., name: _Optional[str] = ..., dscp: _Optional[int] = ..., priority: _Optional[int] = ..., tos: _Optional[int] = ...) -> None: ...

class FlowPolicy(_message.Message):
    __slots__ = ("job_id", "classes")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    classes: _containers.RepeatedCompositeFieldContainer[ClassPolicy]
    def __init__(self, job_id: _Optional[str] = ..., classes: _Optional[_Iterable[_Union[ClassPolicy, _Mapping]]] = ...) -> None: ...

class UnresolvedFlow(_message.Message):
    __slots__ = ("task", "peer", "class_index", "direction", "bytes", "messages")
    TASK_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    CLASS_INDEX_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    task: str
    peer: str
    class_index: int
    direction: str
    bytes: int
    messages: int
    def __init__(self, task: _Optional[str] = ..., peer: _Optional[str] = ..., class_index: _Optional[int] = ..., direction: _Optional[str] = ..., bytes: _Optional[int] = ..., messages: _Optional[int] = ...) -> None: ...

class TaskFallback(_message.Message):
    __slots__ = ("task", "warnings", "share", "cause")
    TASK_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    task: str
    warnings: int
    share: float
    cause: str
    def __init__(self, task: _Optional[str] = ..., warnings: _Optional[int] = ..., share: _Optional[float] = ..., cause: _Optional[str] = ...) -> None: ...

class ReportIterationRequest(_message.Message):
    __slots__ = ("job_id", "iteration_time_s", "thresholds", "unresolved", "fallback")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ITERATION_TIME_S_FIELD_NUMBER: _ClassVar[int]
    THRESHOLDS_FIELD_NUMBER: _ClassVar[int]
    UNRESOLVED_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    iteration_time_s: float
    thresholds: _containers.RepeatedScalarFieldContainer[float]
    unresolved: _containers.RepeatedCompositeFieldContainer[UnresolvedFlow]
    fallback: _containers.RepeatedCompositeFieldContainer[TaskFallback]
    def __init__(self, job_id: _Optional[str] = ..., iteration_time_s: _Optional[float] = ..., thresholds: _Optional[_Iterable[float]] = ..., unresolved: _Optional[_Iterable[_Union[UnresolvedFlow, _Mapping]]] = ..., fallback: _Optional[_Iterable[_Union[TaskFallback, _Mapping]]] = ...) -> None: ...

class ReportIterationResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PairStatus(_message.Message):
    __slots__ = ("job_id", "ps", "worker", "connections", "dscps", "missing_classes", "wrong_dscps", "ok")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PS_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    DSCPS_FIELD_NUMBER: _ClassVar[int]
    MISSING_CLASSES_FIELD_NUMBER: _ClassVar[int]
    WRONG_DSCPS_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    ps: str
    worker: str
    connections: int
    dscps: _containers.RepeatedScalarFieldContainer[int]
    missing_classes: _containers.RepeatedScalarFieldContainer[str]
    wrong_dscps: _containers.RepeatedScalarFieldContainer[int]
    ok: bool
    def __init__(self, job_id: _Optional[str] = ..., ps: _Optional[str] = ..., worker: _Optional[str] = ..., connections: _Optional[int] = ..., dscps: _Optional[_Iterable[int]] = ..., missing_classes: _Optional[_Iterable[str]] = ..., wrong_dscps: _Optional[_Iterable[int]] = ..., ok: _Optional[bool] = ...) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("job_id", "cluster", "classes", "iteration_time_s", "thresholds", "registered_at", "reported_at", "unresolved", "fallback")
    class ClusterEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TaskAddresses
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TaskAddresses, _Mapping]] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    ITERATION_TIME_S_FIELD_NUMBER: _ClassVar[int]
    THRESHOLDS_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    REPORTED_AT_FIELD_NUMBER: _ClassVar[int]
    UNRESOLVED_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    cluster: _containers.MessageMap[str, TaskAddresses]
    classes: _containers.RepeatedCompositeFieldContainer[ClassPolicy]
    iteration_time_s: float
    thresholds: _containers.RepeatedScalarFieldContainer[float]
    registered_at: float
    reported_at: float
    unresolved: _containers.RepeatedCompositeFieldContainer[UnresolvedFlow]
    fallback: _containers.RepeatedCompositeFieldContainer[TaskFallback]
    def __init__(self, job_id: _Optional[str] = ..., cluster: _Optional[_Mapping[str, TaskAddresses]] = ..., classes: _Optional[_Iterable[_Union[ClassPolicy, _Mapping]]] = ..., iteration_time_s: _Optional[float] = ..., thresholds: _Optional[_Iterable[float]] = ..., registered_at: _Optional[float] = ..., reported_at: _Optional[float] = ..., unresolved: _Optional[_Iterable[_Union[UnresolvedFlow, _Mapping]]] = ..., fallback: _Optional[_Iterable[_Union[TaskFallback, _Mapping]]] = ...) -> None: ...

class AgentStatus(_message.Message):
    __slots__ = ("version", "interfaces", "classes", "in_sync", "drift", "last_apply", "jobs", "pairs")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    INTERFACES_FIELD_NUMBER: _ClassVar[int]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    DRIFT_FIELD_NUMBER: _ClassVar[int]
    LAST_APPLY_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    version: str
    interfaces: _containers.RepeatedScalarFieldContainer[str]
    classes: _containers.RepeatedCompositeFieldContainer[ClassPolicy]
    in_sync: bool
    drift: _containers.RepeatedScalarFieldContainer[str]
    last_apply: float
    jobs: _containers.RepeatedCompositeFieldContainer[JobStatus]
    pairs: _containers.RepeatedCompositeFieldContainer[PairStatus]
    def __init__(self, version: _Optional[str] = ..., interfaces: _Optional[_Iterable[str]] = ..., classes: _Optional[_Iterable[_Union[ClassPolicy, _Mapping]]] = ..., in_sync: _Optional[bool] = ..., drift: _Optional[_Iterable[str]] = ..., last_apply: _Optional[float] = ..., jobs: _Optional[_Iterable[_Union[JobStatus, _Mapping]]] = ..., pairs: _Optional[_Iterable[_Union[PairStatus, _Mapping]]] = ...) -> None: ...

class ListFlowsRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class FlowInfo(_message.Message):
    __slots__ = ("job_id", "role", "peer", "class_name", "local", "remote", "dscp", "bytes_sent", "bytes_acked", "bytes_received", "rtt_us", "retransmits")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAME_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    REMOTE_FIELD_NUMBER: _ClassVar[int]
    DSCP_FIELD_NUMBER: _ClassVar[int]
    BYTES_SENT_FIELD_NUMBER: _ClassVar[int]
    BYTES_ACKED_FIELD_NUMBER: _ClassVar[int]
    BYTES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    RTT_US_FIELD_NUMBER: _ClassVar[int]
    RETRANSMITS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    role: str
    peer: str
    class_name: str
    local: str
    remote: str
    dscp: int
    bytes_sent: int
    bytes_acked: int
    bytes_received: int
    rtt_us: int
    retransmits: int
    def __init__(self, job_id: _Optional[str] = ..., role: _Optional[str] = ..., peer: _Optional[str] = ..., class_name: _Optional[str] = ..., local: _Optional[str] = ..., remote: _Optional[str] = ..., dscp: _Optional[int] = ..., bytes_sent: _Optional[int] = ..., bytes_acked: _Optional[int] = ..., bytes_received: _Optional[int] = ..., rtt_us: _Optional[int] = ..., retransmits: _Optional[int] = ...) -> None: ...

class ListFlowsResponse(_message.Message):
    __slots__ = ("flows", "pairs")
    FLOWS_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    flows: _containers.RepeatedCompositeFieldContainer[FlowInfo]
    pairs: _containers.RepeatedCompositeFieldContainer[PairStatus]
    def __init__(self, flows: _Optional[_Iterable[_Union[FlowInfo, _Mapping]]] = ..., pairs: _Optional[_Iterable[_Union[PairStatus, _Mapping]]] = ...) -> None: ...
