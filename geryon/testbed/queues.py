"""The queue configurations of a testbed, from its spec: pure, no kernel.

- Switch ports, `priority`: the Linux software-switch rendering of the QoS intent
  (geryon.fabric.render.linux.port_trees), the same trees `geryon render-switch --os linux` prints.
- Switch ports, `fifo`: one queue at the link rate (fifo_tree with the rate: the "no network
  priority" baseline, with the same bottleneck as the priority mode).
- Hosts, `host_queues=True`: the host agent's config (AgentConfig), applied by the agent's engine.
- Hosts, `host_queues=False`: one queue at the link rate (the same fifo_tree), so a host still sends
  no faster than its link and the switch port stays the shared bottleneck.

Every tree has the shape of geryon.agent.linux_driver.desired_tree(), so the agent's LinuxDriver
writes, observes and verifies all of them.
"""

from __future__ import annotations

from typing import Any

from geryon.agent.config import AgentConfig, ClassSpec, CnpSpec, EgressSpec
from geryon.fabric.intent import QosIntent, default_intent
from geryon.fabric.render.linux import PortTrees, fifo_tree, port_trees
from geryon.testbed.spec import TestbedSpec

HOST_IFNAME = "eth0"
SYSCTLS = {"net.ipv4.tcp_reflect_tos": "1"}


def intent_of(spec: TestbedSpec) -> QosIntent:
    return spec.intent if spec.intent is not None else default_intent()


def host_classes(intent: QosIntent) -> tuple[ClassSpec, ...]:
    """The intent's classes as the host agent's classes: same order (most urgent first), DSCPs,
    priorities, losslessness and scheduling, so host and switch queues agree."""
    out = []
    for c in intent.classes:
        strict = c.scheduler == "strict"
        out.append(
            ClassSpec(
                name=c.name,
                dscp=c.dscp[0],
                extra_dscp=tuple(c.dscp[1:]),
                priority=c.priority,
                lossless=c.lossless,
                tsa="strict" if strict else "ets",
                bandwidth=0 if strict else int(c.weight or 0),
            )
        )
    return tuple(out)


def host_config(spec: TestbedSpec) -> AgentConfig:
    """What `geryon agent apply` would be given on each host: eth0 shaped at the link rate with the
    intent's classes; no DCB or RoCE (veth has neither)."""
    intent = intent_of(spec)
    cnp = intent.cnp
    return AgentConfig(
        interfaces=(HOST_IFNAME,),
        classes=host_classes(intent),
        cnp=CnpSpec(dscp=cnp.dscp, priority=cnp.priority) if cnp is not None else None,
        sysctls=dict(SYSCTLS),
        egress=EgressSpec(
            enabled=True, rate_bits=spec.rate_bits, burst_bytes=spec.burst, buffer_bytes=spec.buffer_bytes
        ),
        dcb="off",
        rdma="off",
        # the switch's rendering sends unmatched DSCPs to the intent's `unmatched` class: so do hosts
        unmatched=intent.unmatched,
    )


def host_fifo_tree(spec: TestbedSpec) -> dict[str, Any]:
    """A host's egress without host queues: one FIFO at the link rate."""
    return fifo_tree(spec.buffer_bytes, rate_bits=spec.rate_bits)


def switch_port(host: str) -> str:
    return f"p-{host}"


def switch_trees(spec: TestbedSpec, mode: str) -> PortTrees:
    """{switch port: tree} for every port (the port toward host h is p-h), with the spec's burst."""
    ports = [switch_port(h) for h in spec.hosts]
    if mode == "fifo":
        out = PortTrees({p: fifo_tree(spec.buffer_bytes, rate_bits=spec.rate_bits) for p in ports})
        out.burst_bytes = spec.burst
        return out
    return port_trees(
        intent_of(spec),
        ports=ports,
        rate_bits=spec.rate_bits,
        buffer_bytes=spec.buffer_bytes,
        burst_bytes=spec.burst,
    )
