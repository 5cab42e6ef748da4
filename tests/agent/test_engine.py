"""Plan, transactional apply, verify and restore: on real kernel queues where the kernel has them,
and with a small in-memory driver for what no device here does (a device without DCB ops)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent.agent_netns import VethNs, ns_exec, read_sysctl, root_qdisc, veth_ns

from geryon.agent.config import AgentConfig, ConfigError, parse_config
from geryon.agent.driver import DriverError, Unsupported
from geryon.agent.engine import (
    ApplyError,
    EngineError,
    Slot,
    apply_plan,
    drift,
    make_plan,
    render_plan,
    restore,
    restore_plan,
)
from geryon.agent.journal import Journal
from geryon.agent.linux_driver import LinuxDriver


@pytest.fixture
def ns() -> Iterator[VethNs]:
    with veth_ns(2, prefix="gen") as v:
        yield v


@pytest.fixture
def linux(ns: VethNs) -> Iterator[LinuxDriver]:
    with LinuxDriver(ns.name) as d:
        yield d


def cfg(*ifnames: str) -> AgentConfig:
    return parse_config({"interfaces": list(ifnames), "egress": {"rate": "1gbit"}})


def test_plan_changes_nothing_and_apply_then_verify_is_clean(
    ns: VethNs, linux: LinuxDriver, tmp_path: Path
) -> None:
    slots = [Slot(linux)]
    plan = make_plan(slots, cfg("ga0", "ga1"))
    assert [c.target for c in plan.changes] == ["ga0/qdisc", "ga1/qdisc", "sysctl/net.ipv4.tcp_reflect_tos"]
    assert root_qdisc(ns.name, "ga0")["kind"] == "noqueue"  # planning wrote nothing
    text = render_plan(plan)
    assert "+ ga0/qdisc" in text and "filters[ip dscp 46]: -> 1:10" in text and '+ value: "1"' in text

    journal = Journal(tmp_path / "j.json")
    apply_plan(plan, slots, journal)
    assert root_qdisc(ns.name, "ga1")["kind"] == "htb"
    again = make_plan(slots, cfg("ga0", "ga1"))
    assert again.empty and drift(again) == []
    assert len(again.in_sync) == 3


def test_failure_mid_apply_rolls_back_what_was_applied(
    ns: VethNs, linux: LinuxDriver, tmp_path: Path
) -> None:
    slots = [Slot(linux)]
    plan = make_plan(slots, cfg("ga0", "ga1"))
    # The second interface disappears between plan and apply: its write fails at write time.
    ns_exec(ns.name, "ip", "link", "del", "ga1")
    journal = Journal(tmp_path / "j.json")
    with pytest.raises(ApplyError) as info:
        apply_plan(plan, slots, journal)
    assert info.value.failed.target == "ga1/qdisc"
    assert "no interface 'ga1'" in str(info.value) and "rolled back" in str(info.value)
    assert root_qdisc(ns.name, "ga0")["kind"] == "noqueue"  # the first interface is as before
    assert read_sysctl(ns.name, "net.ipv4.tcp_reflect_tos") == "0"
    assert not (tmp_path / "j.json").exists() or Journal.load(tmp_path / "j.json").entries == {}


def test_restore_returns_the_first_before_even_after_two_applies(
    ns: VethNs, linux: LinuxDriver, tmp_path: Path
) -> None:
    ns_exec(ns.name, "tc", "qdisc", "add", "dev", "ga0", "root", "handle", "9:", "pfifo", "limit", "77")
    slots = [Slot(linux)]
    path = tmp_path / "j.json"
    apply_plan(make_plan(slots, cfg("ga0")), slots, Journal.load(path))
    # A second apply with another config must not overwrite the journal's original state.
    other = parse_config({"interfaces": ["ga0"], "egress": {"rate": "300mbit"}})
    apply_plan(make_plan(slots, other), slots, Journal.load(path))
    reloaded = Journal.load(path)  # as after an agent restart
    assert reloaded.entries["ga0/qdisc"].before == {"kind": "pfifo", "handle": "9:", "limit": 77}
    plan = restore(slots, reloaded)
    assert {c.target for c in plan.changes} == {"ga0/qdisc", "sysctl/net.ipv4.tcp_reflect_tos"}
    root = root_qdisc(ns.name, "ga0")
    assert (root["kind"], root["handle"], root["options"]["limit"]) == ("pfifo", "9:", 77)
    assert read_sysctl(ns.name, "net.ipv4.tcp_reflect_tos") == "0"
    assert not path.exists()
    assert restore_plan(slots, Journal.load(path)).empty


def test_what_the_config_no_longer_names_goes_back_to_its_pre_geryon_value(
    ns: VethNs, linux: LinuxDriver, tmp_path: Path
) -> None:
    slots = [Slot(linux)]
    journal = Journal(tmp_path / "j.json")
    apply_plan(make_plan(slots, cfg("ga0", "ga1"), journal), slots, journal)
    smaller = parse_config({"interfaces": ["ga0"], "egress": {"rate": "1gbit"}, "sysctls": {}})
    plan = make_plan(slots, smaller, journal)
    assert [(c.target, c.release) for c in plan.changes] == [
        ("sysctl/net.ipv4.tcp_reflect_tos", True),
        ("ga1/qdisc", True),
    ]
    assert "< ga1/qdisc  (linux: no longer in the config" in render_plan(plan)
    apply_plan(plan, slots, journal)
    assert root_qdisc(ns.name, "ga1")["kind"] == "noqueue" and root_qdisc(ns.name, "ga0")["kind"] == "htb"
    assert read_sysctl(ns.name, "net.ipv4.tcp_reflect_tos") == "0"
    assert list(Journal.load(tmp_path / "j.json").entries) == ["ga0/qdisc"]
    assert make_plan(slots, smaller, journal).empty


def test_restore_skips_what_it_cannot_read_and_keeps_it_journaled(
    ns: VethNs, linux: LinuxDriver, tmp_path: Path
) -> None:
    slots = [Slot(linux)]
    journal = Journal(tmp_path / "j.json")
    apply_plan(make_plan(slots, cfg("ga0", "ga1"), journal), slots, journal)
    ns_exec(ns.name, "ip", "link", "del", "ga1")
    plan = restore(slots, journal)
    assert [s.target for s in plan.skipped] == ["ga1/qdisc"]
    assert root_qdisc(ns.name, "ga0")["kind"] == "noqueue"
    assert list(Journal.load(tmp_path / "j.json").entries) == ["ga1/qdisc"]


def test_unknown_interface_fails_the_plan_before_any_write(ns: VethNs, linux: LinuxDriver) -> None:
    with pytest.raises(ConfigError, match=r"interfaces\[1\]"):
        make_plan([Slot(linux)], cfg("ga0", "eth9"))
    assert root_qdisc(ns.name, "ga0")["kind"] == "noqueue"


class MemoryDriver:
    """Targets in a dict; some targets the "device" lacks, some writes fail. Stands in for NIC
    features no device here has (DCB), to exercise the engine's policies."""

    def __init__(
        self, name: str, state: dict[str, Any], unsupported: Iterable[str] = (), fail: Iterable[str] = ()
    ):
        self.name = name
        self.state = state
        self.unsupported = set(unsupported)
        self.fail = set(fail)
        self.writes: list[tuple[str, Any]] = []

    def desired(self, config: AgentConfig) -> dict[str, Any]:
        # a target of the shape its driver makes (the journal refuses others, geryon/agent/names.py)
        suffix = "ecn/cnp_prio" if self.name == "sysfs" else "dcb/pfc"
        return {f"{i}/{suffix}": config.pfc_enable_mask for i in config.interfaces}

    def observe(self, targets: Iterable[str]) -> dict[str, Any]:
        out = {}
        for t in targets:
            if t in self.unsupported:
                raise Unsupported(t, "the device has no DCB ops")
            out[t] = self.state.get(t)
        return out

    def write(self, target: str, value: Any) -> None:
        self.writes.append((target, value))
        if target in self.fail and value not in (None, 0):
            raise DriverError(target, "the NIC refused it")
        self.state[target] = value


def test_unsupported_is_skipped_with_a_note_under_auto_and_an_error_under_required() -> None:
    config = parse_config({"interfaces": ["a", "b"]})
    drv = MemoryDriver("dcb", {}, unsupported=["b/dcb/pfc"])
    plan = make_plan([Slot(drv, "auto")], config)
    assert [c.target for c in plan.changes] == ["a/dcb/pfc"]
    assert [(s.target, s.reason) for s in plan.skipped] == [("b/dcb/pfc", "the device has no DCB ops")]
    assert "! skipped (dcb): b/dcb/pfc: the device has no DCB ops" in render_plan(plan)
    with pytest.raises(EngineError, match="b/dcb/pfc: the device has no DCB ops"):
        make_plan([Slot(drv, "required")], config)


def test_rollback_crosses_drivers_in_reverse_order(tmp_path: Path) -> None:
    config = parse_config({"interfaces": ["a", "b"]})
    first = MemoryDriver("dcb", {"a/dcb/pfc": 0, "b/dcb/pfc": 0})
    second = MemoryDriver("sysfs", {"a/ecn/cnp_prio": 0, "b/ecn/cnp_prio": 0}, fail=["b/ecn/cnp_prio"])
    slots = [Slot(first), Slot(second)]
    plan = make_plan(slots, config)
    journal = Journal(tmp_path / "j.json")
    with pytest.raises(ApplyError) as info:
        apply_plan(plan, slots, journal)
    assert info.value.rolled_back == ["b/ecn/cnp_prio", "a/ecn/cnp_prio", "b/dcb/pfc", "a/dcb/pfc"]
    assert first.state == {"a/dcb/pfc": 0, "b/dcb/pfc": 0} and second.state == {
        "a/ecn/cnp_prio": 0,
        "b/ecn/cnp_prio": 0,
    }
    assert journal.entries == {}  # nothing is left to restore


def test_a_failed_rollback_is_reported_and_keeps_the_journal(tmp_path: Path) -> None:
    config = parse_config({"interfaces": ["a", "b"]})
    drv = MemoryDriver("dcb", {"a/dcb/pfc": 0, "b/dcb/pfc": 0}, fail=["b/dcb/pfc"])
    real_write = drv.write

    def write(target: str, value: Any) -> None:
        if target == "a/dcb/pfc" and value == 0:
            raise DriverError(target, "stuck")
        real_write(target, value)

    drv.write = write  # type: ignore[method-assign]
    journal = Journal(tmp_path / "j.json")
    with pytest.raises(ApplyError, match="ROLLBACK INCOMPLETE: a/dcb/pfc: stuck"):
        apply_plan(make_plan([Slot(drv)], config), [Slot(drv)], journal)
    assert Journal.load(tmp_path / "j.json").entries["a/dcb/pfc"].before == 0
