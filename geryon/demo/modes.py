"""What each demo mode runs: protocol, partitioning, switch, threshold search (pure, no TF).

| mode | protocol | variables | switch | thresholds |
|---|---|---|---|---|
| vanilla | grpc | whole, round-robin over PSes (TF's default placement) | fifo | - |
| ps | grpc | partitioned over every PS + sliced (GeryonPartitioner) | fifo | - |
| geryon | grpc+geryon | partitioned + sliced | priority | adaptive search |
| endhost | grpc+geryon | partitioned + sliced | fifo (host queues stay on) | what geryon chose |
| single | grpc | partitioned + sliced, ONE worker | fifo | - |

`vanilla`, `ps` and `single` send unmarked traffic; they run on the FIFO switch so that no mode but
`geryon` gets network priority (unmarked traffic would take one queue of the priority switch anyway).
`single` is the partition+slicing setup with one worker: the best single-worker throughput, so the
scaling efficiency (images/s per worker against it) shows what communication costs each mode.
`endhost` keeps Geryon's flows and their DSCP marks and the hosts' priority queues, but the switch
mixes every class in one FIFO: priority only where each sender can enforce it, as TicTac/P3 do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise

from geryon.errors import UsageError

MODES = ("vanilla", "ps", "geryon", "endhost", "single")
SEARCHES = ("sweep", "guided", "bayes")


@dataclass(frozen=True)
class Mode:
    name: str
    protocol: str  # "grpc" or "grpc+geryon"
    partitioned: bool  # GeryonPartitioner(num_ps, slice_bytes), else TF's whole-variable placement
    switch: str  # testbed switch mode: "priority" or "fifo"
    classes: bool  # tensors travel on Geryon's per-class flows
    search: bool  # the adaptive threshold search runs in this mode
    single_worker: bool


_TABLE = {
    "vanilla": Mode("vanilla", "grpc", False, "fifo", False, False, False),
    "ps": Mode("ps", "grpc", True, "fifo", False, False, False),
    "geryon": Mode("geryon", "grpc+geryon", True, "priority", True, True, False),
    "endhost": Mode("endhost", "grpc+geryon", True, "fifo", True, False, False),
    "single": Mode("single", "grpc", True, "fifo", False, False, True),
}


def mode(name: str) -> Mode:
    if name not in _TABLE:
        raise UsageError(f"--modes: unknown mode {name!r}; allowed: {', '.join(MODES)}")
    return _TABLE[name]


def parse_modes(text: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Mode names from "a,b" or a list; unknown or repeated names are a UsageError.

    Returned in the order they run: `endhost` uses the threshold the `geryon` run chose, so geryon
    runs first; the rest keep MODES' order (baselines first, so a long run shows them early).
    """
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text)]
    if not names or any(not n for n in names):
        raise UsageError(f"--modes {text!r}: give a comma-separated list of {', '.join(MODES)}")
    for n in names:
        mode(n)
    if len(set(names)) != len(names):
        raise UsageError(f"--modes {text!r}: a mode is named twice")
    return tuple(m for m in MODES if m in names)


@dataclass(frozen=True)
class Search:
    """How the geryon mode picks its thresholds: an adaptive strategy, or fixed thresholds."""

    strategy: str  # "sweep" | "guided" | "bayes" | "fixed"
    thresholds: tuple[float, ...] | None = None  # for "fixed"

    def label(self) -> str:
        if self.strategy == "fixed":
            return "fixed:" + ",".join(f"{t:g}" for t in self.thresholds or ())
        return self.strategy


_FIXED = re.compile(r"^fixed:(.+)$")


def parse_search(text: str, classes: int) -> Search:
    """`sweep|guided|bayes|fixed:T[,T2...]` (k-1 strictly increasing thresholds in (0, 1) for k classes)."""
    text = text.strip()
    if text in SEARCHES:
        return Search(text)
    match = _FIXED.match(text)
    if not match:
        raise UsageError(f"--search {text!r}: expected one of {', '.join(SEARCHES)} or fixed:T[,T2...]")
    try:
        values = tuple(float(v) for v in match.group(1).split(","))
    except ValueError:
        raise UsageError(f"--search {text!r}: thresholds must be numbers, e.g. fixed:0.5") from None
    if len(values) != classes - 1:
        raise UsageError(f"--search {text!r}: {classes} classes need {classes - 1} threshold(s)")
    if any(not 0 < v < 1 for v in values) or any(b <= a for a, b in pairwise(values)):
        raise UsageError(f"--search {text!r}: thresholds must be strictly increasing, each in (0, 1)")
    return Search("fixed", values)


def initial_thresholds(classes: int) -> tuple[float, ...]:
    """Evenly spaced k-1 thresholds: where a run starts (and what endhost uses if geryon chose none)."""
    return tuple(round(i / classes, 6) for i in range(1, classes))
