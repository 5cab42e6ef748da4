"""The simulator's network modes as policies: what each mode's connections and ports do.

`geryon.threshold.simulator`'s module docstring describes the modes; this module says the same per
mode as data, so the replay engine asks a policy (`policy.per_class`) instead of testing the mode's
name. `mode_policy` turns the public `mode` string into its policy, once, at `simulate`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# What a port orders its transfers by: nothing (fair sharing), the priority class, or the global
# urgency rank (the shard's place in the urgency order).
Priority = Literal["class", "rank", None]
# When the allocation memo (replay's _settle_memo) may run; see ModePolicy.memo.
MemoUse = Literal["always", "colocated", "never"]


@dataclass(frozen=True)
class ModePolicy:
    """One network mode. Fields say what the mode does; the knobs that only some modes take
    (chunk_bytes, push_order, sender_order, endhost_gap_s, endhost_scope, inflight) apply where
    the matching `takes_*` field (or `interleaves`) is set, and are ignored elsewhere."""

    name: str
    # Connections may serve all their transfers at once (the streams of a gRPC channel) when
    # interleave=True, else one at a time in ready order; TF's window (`inflight`) applies to those.
    # False: a connection sends one transfer, its head, at a time.
    interleaves: bool
    # One connection per sender, receiver and class (else one per sender and receiver).
    per_class: bool
    # A one-at-a-time connection picks its most urgent pending transfer (else the first ready).
    by_urgency: bool
    # A more urgent transfer takes the connection from the head, which keeps the bytes it has left.
    preempts: bool
    # Preemption waits for the head's next boundary of `chunk_bytes`; `push_order` and
    # `sender_order` rank pushes and order chunks across connections (issue 14's hybrid).
    takes_chunk: bool
    # Every transfer first waits `endhost_gap_s`; `endhost_scope` says what a stop-and-wait serializes.
    takes_gap: bool
    # What orders a sender's NIC and a switch port (before `sender_order`'s variants).
    nic_priority: Priority
    switch_priority: Priority
    # Where background traffic waits: below every class ("class": or in the least urgent one, by its
    # `queue`), below every rank ("rank"), or nowhere in particular (None: it shares fairly).
    background_priority: Priority
    # The allocation memo: its states recur for end-host (the gaps) and for co-hosted hybrid (chunk
    # switches); separate-host hybrid stays off it, since its rounding can move a chunk switch
    # (see the replay's memo set-up).
    memo: MemoUse

    def shares(self, interleave: bool) -> bool:
        """Whether connections serve their transfers at once (see `interleaves`)."""
        return interleave and self.interleaves

    def uses_memo(self, colocate: bool) -> bool:
        return self.memo == "always" or (self.memo == "colocated" and colocate)


FIFO = ModePolicy(
    name="fifo",
    interleaves=True,
    per_class=False,
    by_urgency=False,
    preempts=False,
    takes_chunk=False,
    takes_gap=False,
    nic_priority=None,
    switch_priority=None,
    background_priority=None,
    memo="never",
)
# TicTac/P3: only the sender orders by urgency; switch ports share fairly.
END_HOST = ModePolicy(
    name="end-host",
    interleaves=False,
    per_class=False,
    by_urgency=True,
    preempts=False,
    takes_chunk=False,
    takes_gap=True,
    nic_priority="rank",
    switch_priority=None,
    background_priority=None,
    memo="always",
)
# The paper's Geryon: strict-priority classes at every port, fifo (or interleaved) inside a class.
NETWORK = ModePolicy(
    name="network",
    interleaves=True,
    per_class=True,
    by_urgency=False,
    preempts=False,
    takes_chunk=False,
    takes_gap=False,
    nic_priority="class",
    switch_priority="class",
    background_priority="class",
    memo="never",
)
# Issue 14's Geryon: classes at every port, urgency order inside a connection, chunked preemption.
HYBRID = ModePolicy(
    name="hybrid",
    interleaves=False,
    per_class=True,
    by_urgency=True,
    preempts=True,
    takes_chunk=True,
    takes_gap=False,
    nic_priority="class",
    switch_priority="class",
    background_priority="class",
    memo="colocated",
)
# A perfect global priority order: every port serves the most urgent transfer first.
IDEAL = ModePolicy(
    name="ideal",
    interleaves=False,
    per_class=False,
    by_urgency=True,
    preempts=True,
    takes_chunk=False,
    takes_gap=False,
    nic_priority="rank",
    switch_priority="rank",
    background_priority="rank",
    memo="never",
)

POLICIES: dict[str, ModePolicy] = {p.name: p for p in (FIFO, END_HOST, NETWORK, HYBRID, IDEAL)}
MODES = tuple(POLICIES)


def mode_policy(mode: str) -> ModePolicy:
    """The policy of the mode named `mode`; ValueError naming the allowed modes for any other value."""
    # `in MODES` before the lookup: an unhashable value gets the same error as any unknown one.
    if mode not in MODES:
        raise ValueError(f"mode: unknown mode {mode!r}; allowed: {', '.join(MODES)}")
    return POLICIES[mode]
