"""What each demo mode runs: protocol, partitioning, switch, classes, order, search (pure, no TF).

| mode | protocol | variables | switch | tensors | order inside a class | thresholds |
|---|---|---|---|---|---|---|
| vanilla | grpc | whole, round-robin over PSes (TF's default placement) | fifo | unmarked | - | - |
| ps | grpc | partitioned over every PS + sliced (GeryonPartitioner) | fifo | unmarked | - | - |
| geryon | grpc+geryon | partitioned + sliced | priority | k classes | urgency | adaptive search |
| paper | grpc+geryon | partitioned + sliced | priority | k classes | arrival (FIFO) | what geryon chose |
| endhost | grpc+geryon | partitioned + sliced | fifo | one class (one DSCP) | urgency | - |
| single | grpc | partitioned + sliced, ONE worker | fifo | unmarked | - | - |

- `geryon` is the hybrid the issue asks for (issue 14): strict priority between classes on every
  port, and inside a class each connection serves its most urgent response first.
- `paper` is the paper's Geryon: the same classes and switch, but inside a class transfers share the
  connection in the order they became ready (the data plane's per-connection FIFO of responses).
- `endhost` is the best an end-host scheduler (TicTac, P3) can do: every tensor in ONE class (one
  DSCP, one connection per pair), sent most urgent first, host queues on, a FIFO switch that mixes
  everything. Before, `endhost` was Geryon's two classes on a FIFO switch: Geryon compared with itself.
- `vanilla`, `ps` and `single` send unmarked traffic on the FIFO switch, so no mode but the
  priority ones gets network priority. `single` is the partition+slicing setup with one worker: the
  best single-worker throughput, so the scaling efficiency shows what communication costs each mode.

The order inside a class is the data plane's per-connection ordering (issue 14 item 1), set on every
task before each paired round (geryon.demo.schedule: `g.set_order`, each task's answer recorded as
`order_in_force`). A data plane without it records `ordering_available: false` and the report says so.

Modes that share a protocol and partitioning (geryon, paper, endhost: `paired`) run in ONE cluster
and alternate round by round (geryon.demo.runner.PairedRun); the others run one cluster each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise

from geryon.errors import UsageError

MODES = ("vanilla", "ps", "geryon", "paper", "endhost", "single")
ORDERS = ("arrival", "urgency")  # the order a connection serves its pending responses in
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
    order: str | None = None  # inside a class: "urgency" or "arrival" (ORDERS); None without classes
    single_class: bool = False  # every tensor in one class (one DSCP): the end-host baseline

    @property
    def paired(self) -> bool:
        """Runs in the shared grpc+geryon cluster, alternating round by round with the others."""
        return self.classes and not self.single_worker


_TABLE = {
    "vanilla": Mode("vanilla", "grpc", False, "fifo", False, False, False),
    "ps": Mode("ps", "grpc", True, "fifo", False, False, False),
    "geryon": Mode("geryon", "grpc+geryon", True, "priority", True, True, False, "urgency"),
    "paper": Mode("paper", "grpc+geryon", True, "priority", True, False, False, "arrival"),
    "endhost": Mode("endhost", "grpc+geryon", True, "fifo", True, False, False, "urgency", True),
    "single": Mode("single", "grpc", True, "fifo", False, False, True),
}


def mode(name: str) -> Mode:
    if name not in _TABLE:
        raise UsageError(f"--modes: unknown mode {name!r}; allowed: {', '.join(MODES)}")
    return _TABLE[name]


def parse_modes(text: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Mode names from "a,b" or a list; unknown or repeated names are a UsageError.

    Returned in MODES' order (baselines first, so a long run shows them early): `paper` uses the
    threshold the `geryon` search chose, so geryon comes before it.
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
    """Evenly spaced k-1 thresholds: where a run starts (and what paper uses if geryon chose none)."""
    return tuple(round(i / classes, 6) for i in range(1, classes))


# The tagger's urgencies lie in [0, 1 - 1/L] (layer: 1 - l/L for layers 1..L; tic: 1 - M/N with
# M >= 1), so thresholds at 1 leave every parameter below them: the least urgent class. k > 2 classes
# need k-1 strictly increasing thresholds, spaced by ONE_CLASS_STEP just under 1 (still above any
# urgency of a model with fewer than 1e8 layers). geryon.demo.schedule checks the installed table.
ONE_CLASS_STEP = 1e-9


def one_class_thresholds(classes: int) -> tuple[float, ...]:
    """k-1 thresholds that put every parameter in the last class (class_of: urgency at or below
    every threshold), so one DSCP carries every parameter's tensors, as in the end-host mode.
    Tensors without a parameter (step counters, a few bytes) keep the map_table's default class, 0."""
    return tuple(1.0 - (classes - 2 - i) * ONE_CLASS_STEP for i in range(classes - 1))
