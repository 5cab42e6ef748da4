"""Plan, apply (transactional), verify and restore over a set of drivers.

Pure orchestration: it knows targets and values, never netlink or sysfs. A plan is the diff of
desired vs observed values; apply writes the changes in order and, on any failure, writes the
observed "before" values back in reverse order, so the host ends as it was. Before Geryon first
writes a target, the journal saves that target's value for `restore`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from geryon.agent.config import AgentConfig
from geryon.agent.driver import Driver, DriverError, Unsupported
from geryon.agent.journal import Journal

UnsupportedPolicy = Literal["auto", "required"]


@dataclass(frozen=True)
class Slot:
    """A driver and what to do when it says a target is Unsupported: skip with a note, or fail."""

    driver: Driver
    on_unsupported: UnsupportedPolicy = "required"


@dataclass(frozen=True)
class Change:
    driver: str
    target: str
    before: Any
    after: Any
    # The config no longer wants this target: it goes back to its journaled pre-Geryon value.
    release: bool = False


@dataclass(frozen=True)
class Skip:
    driver: str
    target: str
    reason: str


@dataclass(frozen=True)
class Plan:
    changes: tuple[Change, ...]
    in_sync: tuple[str, ...] = ()
    skipped: tuple[Skip, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.changes


class EngineError(RuntimeError):
    """Planning or applying failed; the message says which target and why."""


@dataclass
class ApplyError(EngineError):
    failed: Change
    cause: BaseException
    rolled_back: list[str] = field(default_factory=list)
    rollback_errors: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        msg = f"apply failed at {_about(self.failed.target, self.cause)}"
        if self.rollback_errors:
            msg += "; ROLLBACK INCOMPLETE: " + "; ".join(self.rollback_errors)
        else:
            msg += f"; rolled back {len(self.rolled_back)} change(s), the host is as before"
        return msg


Progress = Callable[[str], None]


def _about(target: str, error: BaseException) -> str:
    # DriverErrors already start with their target.
    text = str(error)
    return text if text.startswith(f"{target}: ") else f"{target}: {text}"


def _observe(slot: Slot, targets: Sequence[str], skipped: list[Skip]) -> dict[str, Any]:
    """Observes targets; under policy auto, Unsupported targets are dropped with a note."""
    drv = slot.driver
    try:
        return drv.observe(targets)
    except Unsupported:
        if len(targets) == 1 and slot.on_unsupported == "required":
            raise
    # One target is unsupported: find which, one at a time.
    out: dict[str, Any] = {}
    for t in targets:
        try:
            out.update(drv.observe([t]))
        except Unsupported as e:
            if slot.on_unsupported == "required":
                raise EngineError(f"{e} (the config requires it)") from None
            skipped.append(Skip(drv.name, t, e.reason))
    return out


def make_plan(slots: Sequence[Slot], config: AgentConfig, journal: Journal | None = None) -> Plan:
    """What apply would change. Reads only. With a journal, targets Geryon changed earlier that the
    config no longer names (an interface or sysctl dropped from it) go back to their pre-Geryon value.
    Raises ConfigError for host-specific config errors (e.g. an unknown interface) and EngineError
    when a target cannot be read."""
    for slot in slots:
        check = getattr(slot.driver, "check", None)
        if check is not None:
            check(config)
    changes: list[Change] = []
    in_sync: list[str] = []
    skipped: list[Skip] = []
    for slot in slots:
        drv = slot.driver
        try:
            desired = drv.desired(config)
        except Unsupported as e:
            if slot.on_unsupported == "required":
                raise EngineError(f"{e} (the config requires it)") from None
            skipped.append(Skip(drv.name, e.target, e.reason))
            continue
        try:
            observed = _observe(slot, list(desired), skipped)
        except Unsupported as e:
            raise EngineError(f"{e} (the config requires it)") from None
        except DriverError as e:
            raise EngineError(str(e)) from None
        for target, want in desired.items():
            if target not in observed:
                continue  # skipped
            have = observed[target]
            if _same(drv, target, have, want):
                in_sync.append(target)
            else:
                changes.append(Change(drv.name, target, have, want))
        if journal is not None:
            changes += _releases(slot, set(desired), journal, skipped)
    return Plan(tuple(changes), tuple(in_sync), tuple(skipped))


def _releases(slot: Slot, desired: set[str], journal: Journal, skipped: list[Skip]) -> list[Change]:
    name = slot.driver.name
    dropped = [e for e in journal.entries.values() if e.driver == name and e.target not in desired]
    out = []
    for e in reversed(dropped):  # undo in reverse order of first write, as restore does
        try:
            current = _observe(slot, [e.target], skipped)
        except DriverError:
            continue  # e.g. the interface is gone, and with it what Geryon put there
        if e.target in current and not _same(slot.driver, e.target, current[e.target], e.before):
            out.append(Change(name, e.target, current[e.target], e.before, release=True))
    return out


def _canon(value: Any) -> str:
    # Values round-trip through the JSON journal: compare them as JSON (tuples == lists).
    return json.dumps(value, sort_keys=True)


def _same(driver: Driver, target: str, have: Any, want: Any) -> bool:
    """Whether a target is as wanted. A driver whose values can be encoded several ways for one meaning
    (DCB ETS: mlx5 reports strict TCs at 100%) says so with a `same` method; otherwise JSON equality."""
    same = getattr(driver, "same", None)
    if same is not None:
        return bool(same(target, have, want))
    return _canon(have) == _canon(want)


def apply_plan(
    plan: Plan, slots: Sequence[Slot], journal: Journal | None, progress: Progress | None = None
) -> list[Change]:
    """Writes the plan's changes in order. On any failure, writes every touched target's "before"
    back in reverse order and raises ApplyError. Journals each target's first-ever before."""
    by_name = {s.driver.name: s.driver for s in slots}
    done: list[Change] = []
    newly_journaled: list[str] = []
    for change in plan.changes:
        drv = by_name[change.driver]
        try:
            if journal is not None and journal.record(change.driver, change.target, change.before):
                newly_journaled.append(change.target)
            if progress:
                progress(f"write {change.target}")
            # Count the change as touched before writing: a write that fails half-way must be undone too.
            done.append(change)
            drv.write(change.target, change.after)
        except Exception as e:
            err = ApplyError(failed=change, cause=e)
            _rollback(done, by_name, err, progress)
            if journal is not None and not err.rollback_errors:
                for t in newly_journaled:
                    journal.forget(t)
            raise err from None
    if journal is not None:
        for change in done:
            if change.release:
                journal.forget(change.target)
        journal.mark_applied()
    return done


def _rollback(
    done: list[Change], by_name: dict[str, Driver], err: ApplyError, progress: Progress | None
) -> None:
    for change in reversed(done):
        if progress:
            progress(f"roll back {change.target}")
        try:
            by_name[change.driver].write(change.target, change.before)
            err.rolled_back.append(change.target)
        except Exception as e:
            err.rollback_errors.append(_about(change.target, e))


def drift(plan: Plan) -> list[str]:
    """Human-readable drifted targets: one line per target that is not as the config says."""
    return [f"{c.target}: {summarize(c.before)} (want {summarize(c.after)})" for c in plan.changes]


def restore_plan(slots: Sequence[Slot], journal: Journal) -> Plan:
    """The changes that bring every journaled target back to its value from before Geryon."""
    by_name = {s.driver.name: s for s in slots}
    missing = sorted({e.driver for e in journal.entries.values()} - set(by_name))
    if missing:
        raise EngineError(
            f"the journal has targets of driver(s) {', '.join(missing)}, which this run does not load; "
            "run restore with the same options (--netns, --root, dcb/rdma settings) as apply"
        )
    entries = list(reversed(journal.entries.values()))  # undo in reverse order of first write
    changes: list[Change] = []
    in_sync: list[str] = []
    skipped: list[Skip] = []
    for e in entries:
        slot = by_name[e.driver]
        try:
            current = _observe(slot, [e.target], skipped)
        except DriverError as err:
            # e.g. its interface is gone: restore the rest; the entry stays for a later restore.
            skipped.append(Skip(e.driver, e.target, f"cannot read it now: {err.reason}"))
            continue
        if e.target not in current:
            continue
        if _same(slot.driver, e.target, current[e.target], e.before):
            in_sync.append(e.target)
        else:
            changes.append(Change(e.driver, e.target, current[e.target], e.before))
    return Plan(tuple(changes), tuple(in_sync), tuple(skipped))


def restore(slots: Sequence[Slot], journal: Journal, progress: Progress | None = None) -> Plan:
    """Brings every journaled target back (transactionally) and forgets it; the journal file goes
    away once nothing is left to restore."""
    plan = restore_plan(slots, journal)
    apply_plan(plan, slots, None, progress)
    remaining = {s.target for s in plan.skipped}
    if remaining:
        for target in [*plan.in_sync, *(c.target for c in plan.changes)]:
            journal.forget(target)
    else:
        journal.clear()
    return plan


# -- rendering -----------------------------------------------------------------------------------


def summarize(value: Any) -> str:
    if value is None:
        return "absent (kernel default)"
    if isinstance(value, dict) and value.get("kind") == "htb":
        # Count the classes traffic lands in (those with a leaf queue), not the 1:1 parent they borrow from.
        classes = value.get("classes", [])
        n = sum(1 for c in classes if not isinstance(c, dict) or c.get("leaf") is not None)
        return f"htb with {n} classes, {len(value.get('filters', []))} filters"
    if isinstance(value, dict) and "kind" in value:
        return f"{value['kind']} qdisc"
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def _label(item: Any, index: int) -> str:
    if isinstance(item, dict):
        if "dscp" in item and "protocol" in item:
            return f"{item['protocol']} dscp {item['dscp']}"
        for key in ("classid", "name", "target"):
            if key in item:
                return str(item[key])
    return str(index)


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """{"a.b[label]": "scalar"}: a JSON value as lines a person can diff."""
    out: dict[str, str] = {}
    if isinstance(value, dict):
        if "dscp" in value and "protocol" in value and "classid" in value and prefix:
            out[prefix] = f"-> {value['classid']}"  # a DSCP filter: its label says the rest
            return out
        for k in sorted(value):
            if k == "classid" and prefix.endswith(f"[{value[k]}]"):
                continue  # already the label
            out.update(flatten(value[k], f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, list | tuple) and value and all(isinstance(v, dict) for v in value):
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{_label(v, i)}]"))
    else:
        out[prefix or "value"] = json.dumps(value)
    return out


def render_plan(plan: Plan, title: str = "changes") -> str:
    lines: list[str] = []
    for c in plan.changes:
        if c.release:
            lines.append(f"< {c.target}  ({c.driver}: no longer in the config, back to its pre-Geryon value)")
        elif c.before is None:
            lines.append(f"+ {c.target}  ({c.driver}: create)")
        elif c.after is None:
            lines.append(f"- {c.target}  ({c.driver}: remove, back to the kernel default)")
        else:
            lines.append(f"~ {c.target}  ({c.driver})")
        old, new = (
            flatten(c.before) if c.before is not None else {},
            flatten(c.after) if c.after is not None else {},
        )
        for key in sorted(set(old) | set(new)):
            if old.get(key) == new.get(key):
                continue
            if key in old:
                lines.append(f"    - {key}: {old[key]}")
            if key in new:
                lines.append(f"    + {key}: {new[key]}")
    for (driver, reason), targets in _group_skips(plan.skipped).items():
        shown = ", ".join(targets[:4]) + (f" and {len(targets) - 4} more" if len(targets) > 4 else "")
        lines.append(f"! skipped ({driver}): {shown}: {reason}")
    n = len(plan.changes)
    summary = f"{n} {title[:-1] if n == 1 else title}, {len(plan.in_sync)} in sync"
    if plan.skipped:
        summary += f", {len(plan.skipped)} skipped"
    lines.append(summary)
    return "\n".join(lines)


def _group_skips(skips: Sequence[Skip]) -> dict[tuple[str, str], list[str]]:
    """Skips with the same driver and reason on one line: a veth lacks every DCB target alike."""
    groups: dict[tuple[str, str], list[str]] = {}
    for s in skips:
        groups.setdefault((s.driver, _generic(s.target, s.reason)), []).append(s.target)
    return groups


def _generic(target: str, reason: str) -> str:
    return reason.replace(target, "<target>")


def plan_json(plan: Plan) -> dict[str, Any]:
    return {
        "changes": [
            {"driver": c.driver, "target": c.target, "before": c.before, "after": c.after}
            for c in plan.changes
        ],
        "in_sync": list(plan.in_sync),
        "skipped": [{"driver": s.driver, "target": s.target, "reason": s.reason} for s in plan.skipped],
    }
