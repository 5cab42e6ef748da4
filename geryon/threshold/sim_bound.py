"""A lower bound on a cluster's iteration time that no schedule can beat (issue 38 item 4).

The simulator's `ideal` mode is a perfect global priority order, not an optimal schedule, so a real
mode can beat it (hybrid did, on VGG-19 8 x 8 at 10 Gbit/s). The bound here is a relaxation instead:

- compute alone: a worker runs its forward and backward passes one op after the other, and the
  next iteration's first layer needs this iteration's last gradient aggregated (its own push
  first), so one iteration takes at least C = forward + backward;
- every port busy from the first byte: each egress port (a host's NIC, the switch port towards a
  host) must carry its bytes of one iteration at its rate, so one iteration takes at least the
  busiest port's bytes over its rate, as if it were busy for the whole iteration, with pulls and
  pushes overlapping compute perfectly.

The bound is the larger of the two. Everything else the simulator models only adds time and is
left out of the relaxation: the order of transfers, PS costs, end-host gaps, TF's window, background
traffic and incast losses. It depends on the cluster's shape and the shard plan, not on the mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Bound:
    seconds: float
    # What sets it: "compute" or the busiest port ("ps0.nic", "switch->worker0", "host0.nic", ...).
    by: str
    compute_s: float
    port_s: float  # the busiest port's bytes of one iteration over its rate
    port: str  # the busiest port

    def to_dict(self) -> dict[str, float | str]:
        return {
            "seconds": self.seconds,
            "by": self.by,
            "compute_s": self.compute_s,
            "port_s": self.port_s,
            "port": self.port,
        }


def port_bytes(
    shard_bytes: Sequence[float], shard_ps: Sequence[int], workers: int, num_ps: int, colocate: bool
) -> dict[str, float]:
    """Bytes each egress port moves in one iteration: every worker pulls and pushes every shard once.

    Separate hosts: a worker's NIC carries its pushes (the whole model) and its switch port its
    pulls; PS k's NIC carries W pulls of its shards and its switch port W pushes. Co-hosted (PS i on
    host i): host i's NIC carries its PS's pulls to the W - 1 other workers and its worker's pushes
    to the other PSes; its switch port the same bytes the other way; a worker-only host carries the
    whole model each way. Bytes between a worker and its own host's PS stay home.
    """
    total = float(sum(shard_bytes))
    held = [0.0] * num_ps
    for b, ps in zip(shard_bytes, shard_ps, strict=True):
        held[ps] += b
    ports: dict[str, float] = {}
    if colocate:
        for h in range(workers):
            mine = held[h] if h < num_ps else 0.0
            ports[f"host{h}.nic"] = ports[f"switch->host{h}"] = (workers - 1) * mine + total - mine
    else:
        # Workers are alike: worker 0 stands for all of them.
        ports["worker0.nic"] = ports["switch->worker0"] = total
        for k in range(num_ps):
            ports[f"ps{k}.nic"] = ports[f"switch->ps{k}"] = workers * held[k]
    return ports


def lower_bound(
    shard_bytes: Sequence[float],
    shard_ps: Sequence[int],
    *,
    workers: int,
    num_ps: int,
    colocate: bool,
    bandwidth_bps: float,
    compute_s: float,
) -> Bound:
    """The iteration time no mode can beat on this cluster (see the module docstring)."""
    ports = port_bytes(shard_bytes, shard_ps, workers, num_ps, colocate)
    busiest = max(ports, key=lambda name: ports[name])
    port_s = ports[busiest] * 8.0 / bandwidth_bps
    if compute_s >= port_s:
        return Bound(compute_s, "compute", compute_s, port_s, busiest)
    return Bound(port_s, busiest, compute_s, port_s, busiest)
