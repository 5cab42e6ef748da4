"""What the agent's presenters (the gRPC servicer, the metrics collector, the status page) see of the
daemon: the AgentView protocol, and the TLS files of the API's TCP listener. A leaf: the daemon
implements the view, geryon.agent.service wires the presenters to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from geryon.agent.config import AgentConfig
    from geryon.agent.peer import PeerCheck


class AgentView(Protocol):
    """What the services need of the daemon."""

    def config(self) -> AgentConfig: ...
    def drift(self) -> list[str]: ...  # human-readable drifted targets, [] when in sync
    def last_apply(self) -> float | None: ...  # unix time of the last successful apply
    def peer(self) -> PeerCheck | None: ...  # the last switch (DCBX peer) check; None = none made


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for the TCP listener. With client_ca, clients must present a certificate it signed."""

    cert: Path
    key: Path
    client_ca: Path | None = None
