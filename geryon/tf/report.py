"""Which class this process's tensors went out on, and which edges fell back (issue 36).

    import geryon.tf
    print(geryon.tf.classification_report())          # this process
    reports = geryon.tf.task_reports(g.devices)       # every task, through an op run on each

Per class: the bytes and messages this process's producer flows sent (frame heads included, as the flow
counters count them), of which unresolved (the edge carried no parameter id, so the tensor took the
map_table's default class). Then the unresolved edges by name with their bytes, most first, and the
fallback warnings the data plane logged (native/rendezvous/README.md, "No silent fallback").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ClassBytes",
    "ClassificationReport",
    "UnresolvedEdge",
    "classification_report",
    "parse_report",
    "task_reports",
]


@dataclass(frozen=True)
class ClassBytes:
    klass: int
    bytes: int
    messages: int
    unresolved_bytes: int
    unresolved_messages: int


@dataclass(frozen=True)
class UnresolvedEdge:
    edge: str  # the rendezvous key's edge name, e.g. "edge_16_sequential/dense/Cast/ReadVariableOp"
    bytes: int
    messages: int


@dataclass(frozen=True)
class ClassificationReport:
    map_table_version: int  # 0: no map_table installed in this process
    default_class: int
    classes: tuple[ClassBytes, ...]  # classes that sent something, by class
    edges: tuple[UnresolvedEdge, ...]  # unresolved edges, most bytes first
    other_edges_bytes: int  # unresolved bytes of edges past the tally's 1024 names
    other_edges_messages: int
    warnings: int  # fallback lines this process logged
    warnings_no_map_table: int
    warnings_unresolved_share: int
    last_cause: str  # "no_map_table" | "unresolved_share" | "" (none logged)
    last_share: float  # unresolved share of the window the last line was about
    last_warning: str

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.classes)

    @property
    def unresolved_bytes(self) -> int:
        return sum(c.unresolved_bytes for c in self.classes)

    @property
    def unresolved_share(self) -> float:
        """Unresolved share of every byte this process sent (0 when it sent nothing)."""
        return self.unresolved_bytes / self.bytes if self.bytes else 0.0

    def __str__(self) -> str:
        table = "none" if self.map_table_version == 0 else f"version {self.map_table_version}"
        lines = [f"map_table: {table}, default class {self.default_class}"]
        rows = [("class", "bytes sent", "messages", "unresolved bytes", "unresolved msgs")]
        rows += [
            (str(c.klass), str(c.bytes), str(c.messages), str(c.unresolved_bytes), str(c.unresolved_messages))
            for c in self.classes
        ]
        rows.append(
            (
                "all",
                str(self.bytes),
                str(sum(c.messages for c in self.classes)),
                str(self.unresolved_bytes),
                str(sum(c.unresolved_messages for c in self.classes)),
            )
        )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            cells = [v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True))]
            lines.append("  ".join(cells))
        lines.append(f"unresolved share: {100 * self.unresolved_share:.2f}% of the bytes sent")
        if self.edges or self.other_edges_bytes:
            lines.append("top unresolved edges (bytes, messages):")
            for e in self.edges[:10]:
                lines.append(f"  {e.bytes:>12}  {e.messages:>8}  {e.edge}")
            if len(self.edges) > 10:
                rest = self.edges[10:]
                lines.append(
                    f"  {sum(e.bytes for e in rest):>12}  {sum(e.messages for e in rest):>8}  "
                    f"({len(rest)} more edges)"
                )
            if self.other_edges_bytes:
                b, m = self.other_edges_bytes, self.other_edges_messages
                lines.append(f"  {b:>12}  {m:>8}  (edges past the tally's limit)")
        if self.warnings:
            lines.append(f"fallback warnings logged: {self.warnings} (last: {self.last_cause})")
        return "\n".join(lines)


def parse_report(text: str | bytes) -> ClassificationReport:
    """A report from the native JSON (geryon_classification_report / GeryonClassificationReport)."""
    raw: dict[str, Any] = json.loads(text)
    fb = raw["fallback"]
    return ClassificationReport(
        map_table_version=int(raw["map_table_version"]),
        default_class=int(raw["default_class"]),
        classes=tuple(
            ClassBytes(c["class"], c["bytes"], c["messages"], c["unresolved_bytes"], c["unresolved_messages"])
            for c in raw["classes"]
        ),
        edges=tuple(UnresolvedEdge(e["edge"], e["bytes"], e["messages"]) for e in fb["edges"]),
        other_edges_bytes=int(fb["other_edges_bytes"]),
        other_edges_messages=int(fb["other_edges_messages"]),
        warnings=int(fb["warnings"]),
        warnings_no_map_table=int(fb["warnings_no_map_table"]),
        warnings_unresolved_share=int(fb["warnings_unresolved_share"]),
        last_cause=str(fb["last_cause"]),
        last_share=float(fb["last_share"]),
        last_warning=str(fb["last_warning"]),
    )


def report_json() -> str:
    """This process's report as the native library writes it (C function via ctypes)."""
    from geryon.tf.library import c_text, load

    return c_text(load().cdll.geryon_classification_report)


def classification_report() -> ClassificationReport:
    """Bytes and messages per class this process sent, and its unresolved edges by name."""
    return parse_report(report_json())


def task_reports(devices: Mapping[str, str]) -> dict[str, ClassificationReport]:
    """Every task's report (task name -> report), read by the GeryonClassificationReport op placed on
    each task's device, as map_tables are installed (geryon.tf.strategy.task_devices gives `devices`;
    "" is this process). InstallError names the tasks that cannot be read."""
    from geryon.tf.strategy import _on_every_task, native_ops

    ops = native_ops()
    return _on_every_task(
        "reading the classification report",
        dict(devices),
        lambda: parse_report(ops.geryon_classification_report().numpy()),
    )
