"""The DCB driver via the real dcbnl client and the fake kernel at the socket, driven by the real engine."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from agent.dcb_fake import SEL_DSCP, FakeDcbKernel, FakeNic
from agent.ethtool_fake import FakeEthtool, FakeEthtoolNic

from geryon.agent.config import AgentConfig, ConfigError, parse_config
from geryon.agent.dcb_driver import DcbDriver, parse_target
from geryon.agent.dcbnl import DcbnlClient
from geryon.agent.driver import DriverError, Unsupported
from geryon.agent.engine import ApplyError, EngineError, Slot, apply_plan, make_plan, restore
from geryon.agent.ethtool import Ethtool
from geryon.agent.journal import Journal


def config(**extra: object) -> AgentConfig:
    return parse_config({"interfaces": ["eth0"], **extra})


def driver(kernel: FakeDcbKernel, ethtool: FakeEthtool | None = None) -> DcbDriver:
    """The driver on the fake kernel's dcbnl socket and a fake ethtool ioctl (a NIC per fake DCB NIC,
    with ethtool ops where the NIC has DCB ops)."""
    if ethtool is None:
        ethtool = FakeEthtool({name: FakeEthtoolNic(ops=nic.dcb) for name, nic in kernel.nics.items()})
    return DcbDriver(client_factory=lambda: DcbnlClient(sock_factory=kernel.socket), ethtool=Ethtool(ethtool))


@pytest.fixture
def kernel() -> FakeDcbKernel:
    nic = FakeNic(trust=[255])
    nic.apps = [(SEL_DSCP, 1, 46), (SEL_DSCP, 2, 10)]  # an old mapping of Geryon's DSCP, and an operator's
    return FakeDcbKernel({"eth0": nic})


def test_desired_from_the_default_config() -> None:
    want = DcbDriver(client_factory=lambda: DcbnlClient(sock_factory=FakeDcbKernel({}).socket)).desired(
        config()
    )
    assert want == {
        "eth0/dcb/ets": {
            "willing": False,
            "prio_tc": [0, 0, 0, 3, 0, 5, 6, 0],
            "tc_tsa": ["ets", "ets", "ets", "ets", "ets", "strict", "strict", "ets"],
            "tc_bw": [50, 0, 0, 50, 0, 0, 0, 0],
        },
        "eth0/dcb/pfc": {"pfc_en": [3, 5]},
        "eth0/dcb/pause": {"rx": False, "tx": False},  # global pause off where PFC is on
        "eth0/dcb/app/dscp/26": 3,
        "eth0/dcb/app/dscp/46": 5,
        "eth0/dcb/app/dscp/48": 6,
        "eth0/dcb/trust": ["dscp"],
    }


def test_plan_apply_verify_restore(kernel: FakeDcbKernel, tmp_path: Path) -> None:
    slots = [Slot(driver(kernel))]
    cfg = config()
    plan = make_plan(slots, cfg)
    assert {c.target for c in plan.changes} == set(slots[0].driver.desired(cfg))
    before = {c.target: c.before for c in plan.changes}
    assert before["eth0/dcb/app/dscp/46"] == 1 and before["eth0/dcb/app/dscp/26"] is None
    assert before["eth0/dcb/trust"] == ["pcp"]

    journal = Journal.load(tmp_path / "journal.json")
    apply_plan(plan, slots, journal)
    nic = kernel.nics["eth0"]
    assert nic.prio_tc == (0, 0, 0, 3, 0, 5, 6, 0)
    assert nic.tc_tsa == (2, 2, 2, 2, 2, 0, 0, 2)
    assert nic.tc_tx_bw == (50, 0, 0, 50, 0, 0, 0, 0)
    assert nic.pfc_en == 0b0010_1000
    assert nic.dscp_map() == {46: {5}, 26: {3}, 48: {6}, 10: {2}}  # the operator's DSCP 10 untouched
    assert nic.trust == [5]
    assert make_plan(slots, cfg).empty  # observe returns exactly the desired shape

    # a fresh driver (as after a restart) restores from the journal on disk
    restore([Slot(driver(kernel))], Journal.load(tmp_path / "journal.json"))
    assert nic.dscp_map() == {46: {1}, 10: {2}}
    assert nic.pfc_en == 0 and nic.trust == [255]
    assert nic.tc_tsa == (0,) * 8 and nic.prio_tc == (0,) * 8


def test_failed_write_rolls_everything_back(kernel: FakeDcbKernel) -> None:
    slots = [Slot(driver(kernel))]
    nic = kernel.nics["eth0"]
    ets, pfc, apps = nic.ets, nic.pfc, list(nic.apps)
    kernel.fail_next("eth0", "trust", errno.EIO)  # trust is written last
    with pytest.raises(ApplyError) as err:
        apply_plan(make_plan(slots, config()), slots, None)
    assert err.value.failed.target == "eth0/dcb/trust"
    assert not err.value.rollback_errors
    assert (nic.ets, nic.pfc, sorted(nic.apps), nic.trust) == (ets, pfc, sorted(apps), [255])


def test_veth_without_dcb_is_skipped_or_an_error_by_policy() -> None:
    kernel = FakeDcbKernel({"eth0": FakeNic(dcb=False)})
    plan = make_plan([Slot(driver(kernel), on_unsupported="auto")], config())
    assert plan.empty and len(plan.skipped) == 7
    assert "no DCB operations" in plan.skipped[0].reason
    with pytest.raises(EngineError, match="eth0/dcb/ets: eth0 has no DCB operations"):
        make_plan([Slot(driver(kernel), on_unsupported="required")], config())


def test_kernel_without_trust_table_skips_only_trust() -> None:
    kernel = FakeDcbKernel({"eth0": FakeNic(trust=None)})
    plan = make_plan([Slot(driver(kernel), on_unsupported="auto")], config())
    assert [s.target for s in plan.skipped] == ["eth0/dcb/trust"]
    assert "kernel >= 6.2" in plan.skipped[0].reason
    assert len(plan.changes) == 6


def test_more_lossless_priorities_than_the_nic_has_is_a_config_error() -> None:
    kernel = FakeDcbKernel({"eth0": FakeNic(pfc_cap=1)})
    with pytest.raises(ConfigError, match=r"classes: 2 lossless priorities \[3, 5\].*eth0 supports 1"):
        make_plan([Slot(driver(kernel))], config())
    drv = driver(kernel)
    with pytest.raises(DriverError, match="supports 1"):
        drv.write("eth0/dcb/pfc", {"pfc_en": [3, 5]})


def test_a_device_that_ignores_the_ets_write_is_caught_by_the_read_back() -> None:
    kernel = FakeDcbKernel({"eth0": FakeNic(ets_settable=False)})
    drv = driver(kernel)
    want = drv.desired(config())["eth0/dcb/ets"]
    with pytest.raises(DriverError, match=r"accepted .* but reports"):
        drv.write("eth0/dcb/ets", want)


def test_app_write_replaces_and_removes() -> None:
    kernel = FakeDcbKernel({"eth0": FakeNic()})
    kernel.nics["eth0"].apps = [(SEL_DSCP, 1, 46), (SEL_DSCP, 3, 46)]
    drv = driver(kernel)
    assert drv.observe(["eth0/dcb/app/dscp/46"]) == {"eth0/dcb/app/dscp/46": [1, 3]}
    drv.write("eth0/dcb/app/dscp/46", 5)
    assert kernel.nics["eth0"].dscp_map() == {46: {5}}
    drv.write("eth0/dcb/app/dscp/46", None)
    assert kernel.nics["eth0"].apps == []
    drv.write("eth0/dcb/app/dscp/46", [1, 3])  # a journaled multi-entry value comes back as it was
    assert kernel.nics["eth0"].dscp_map() == {46: {1, 3}}


def test_unsupported_write_and_bad_targets() -> None:
    kernel = FakeDcbKernel({"eth0": FakeNic(trust_choices=((255,),))})
    drv = driver(kernel)
    with pytest.raises(Unsupported, match="eth0/dcb/trust"):
        drv.write("eth0/dcb/trust", ["dscp"])
    with pytest.raises(DriverError, match="not a DCB target"):
        parse_target("eth0/dcb/app/dscp/64")
    with pytest.raises(DriverError, match="not a DCB target"):
        drv.observe(["eth0/qdisc"])
    assert parse_target("eth0/dcb/app/dscp/7") == ("eth0", "app", 7)


# --- real drivers' reply shapes (tests/agent/dcb_fake.py: mlx5, ice, bnxt) ------------------------


@pytest.mark.parametrize("drv_name", ["mlx5", "ice", "bnxt"])
def test_plan_apply_verify_restore_on_each_real_driver_shape(drv_name: str, tmp_path: Path) -> None:
    kernel = FakeDcbKernel({"eth0": FakeNic(driver=drv_name)})
    nic = kernel.nics["eth0"]
    fresh = nic.reported_ets()
    slots = [Slot(driver(kernel))]
    journal = Journal.load(tmp_path / "journal.json")
    apply_plan(make_plan(slots, config()), slots, journal)
    assert nic.prio_tc == (0, 0, 0, 3, 0, 5, 6, 0) and nic.pfc_en == 0b0010_1000
    plan = make_plan(slots, config())
    assert plan.empty, plan.changes  # verify: in sync although mlx5 reports its strict TCs at 100%
    restore([Slot(driver(kernel))], Journal.load(tmp_path / "journal.json"))
    assert nic.reported_ets()[19:35] == fresh[19:35]  # TSAs and prio->TC back as the driver reported them


def test_all_strict_config_applies_on_mlx5() -> None:
    cfg = config(classes=[{"name": "only", "dscp": 26, "priority": 0, "tsa": "strict", "lossless": True}])
    kernel = FakeDcbKernel({"eth0": FakeNic(driver="mlx5")})
    slots = [Slot(driver(kernel))]
    ets = slots[0].driver.desired(cfg)["eth0/dcb/ets"]
    assert set(ets["tc_tsa"]) == {"strict"} and sum(ets["tc_bw"]) == 0  # unused TCs strict, not ets 0%
    apply_plan(make_plan(slots, cfg), slots, None)
    assert make_plan(slots, cfg).empty
    assert kernel.nics["eth0"].tc_tsa == (0,) * 8


def test_all_strict_config_applies_on_ice_which_reports_100_on_strict_tc0() -> None:
    cfg = config(classes=[{"name": "only", "dscp": 26, "priority": 0, "tsa": "strict", "lossless": True}])
    kernel = FakeDcbKernel({"eth0": FakeNic(driver="ice")})
    slots = [Slot(driver(kernel))]
    apply_plan(make_plan(slots, cfg), slots, None)
    assert kernel.nics["eth0"].tc_tx_bw[0] == 100  # ice_dcb_bwchk
    assert make_plan(slots, cfg).empty


def test_a_tc_the_nic_lacks_is_a_config_error() -> None:
    kernel = FakeDcbKernel({"eth0": FakeNic(driver="bnxt", ets_cap=4)})
    with pytest.raises(ConfigError, match=r"traffic class 6 .*eth0 has 4 TCs \(ets_cap\)"):
        make_plan([Slot(driver(kernel))], config())


def test_ets_write_echoes_ets_cap_byte_for_byte_like_iproute2_dcb() -> None:
    # The same ETS iproute2's dcb sent in tests/agent/fixtures (captured with ets_cap 8 read back).
    from agent.test_dcbnl import captured, without_seq

    kernel = FakeDcbKernel({"vE0": FakeNic(ets_cap=8)})
    drv = driver(kernel)
    value = {
        "willing": False,
        "prio_tc": [1, 1, 1, 1, 1, 0, 0, 1],
        "tc_tsa": ["strict", "ets", "strict", "strict", "strict", "strict", "strict", "strict"],
        "tc_bw": [0, 100, 0, 0, 0, 0, 0, 0],
    }
    drv.write("vE0/dcb/ets", value)
    sets = [m for m in kernel.requests if m[4:6] == (79).to_bytes(2, "little")]
    assert without_seq(sets[-1]) == without_seq(captured()["ets-set"])
    drv.write("vE0/dcb/pfc", {"pfc_en": [3, 5]})
    sets = [m for m in kernel.requests if m[4:6] == (79).to_bytes(2, "little")]
    assert without_seq(sets[-1]) == without_seq(captured()["pfc-set"])


def test_trust_pcp_writes_no_dscp_app_entries() -> None:
    kernel = FakeDcbKernel({"eth0": FakeNic()})
    drv = driver(kernel)
    want = drv.desired(config(trust="pcp"))
    assert not [t for t in want if "/app/" in t] and want["eth0/dcb/trust"] == ["pcp"]


def test_per_tc_maxrate_plan_apply_verify_restore_on_mlx5(tmp_path: Path) -> None:
    classes = [
        {"name": "urgent", "dscp": 46, "priority": 5, "tsa": "strict", "lossless": True},
        {"name": "bulk", "dscp": 26, "priority": 3, "bandwidth": 50, "lossless": True, "maxrate": "25gbit"},
    ]
    cfg = config(classes=classes)
    kernel = FakeDcbKernel({"eth0": FakeNic(driver="mlx5")})
    slots = [Slot(driver(kernel))]
    assert slots[0].driver.desired(cfg)["eth0/dcb/maxrate"] == [0, 0, 0, 25_000_000, 0, 0, 0, 0]
    journal = Journal.load(tmp_path / "j.json")
    apply_plan(make_plan(slots, cfg, journal), slots, journal)
    assert kernel.nics["eth0"].maxrate == [0, 0, 0, 25_000_000, 0, 0, 0, 0]
    assert make_plan(slots, cfg, journal).empty
    # dropping the knob gives the NIC its pre-Geryon limits back
    plan = make_plan(slots, config(), journal)
    assert [c.target for c in plan.changes if c.release] == ["eth0/dcb/maxrate"]
    apply_plan(plan, slots, journal)
    assert kernel.nics["eth0"].maxrate == [0] * 8


def test_maxrate_is_skipped_where_the_driver_has_none() -> None:
    u = {"name": "u", "dscp": 46, "priority": 5, "tsa": "strict", "maxrate": "1gbit"}
    cfg = config(classes=[u], best_effort_bandwidth=100)
    kernel = FakeDcbKernel({"eth0": FakeNic(driver="ice")})
    plan = make_plan([Slot(driver(kernel), on_unsupported="auto")], cfg)
    assert [s.target for s in plan.skipped] == ["eth0/dcb/maxrate"]
    assert "ieee_getmaxrate" in plan.skipped[0].reason


@pytest.mark.parametrize(
    ("rate", "message"),
    [
        ("150mbit", r"classes\[0\]\.maxrate: 150 Mbit/s is not a NIC TC rate; allowed 100mbit"),
        ("30500mbit", r"classes\[0\]\.maxrate: .* steps of 1gbit"),
        ("300gbit", r"classes\[0\]\.maxrate: .* up to 255gbit"),
        ("10mbit", r"classes\[0\]\.maxrate"),
    ],
)
def test_maxrate_off_the_nic_grid_is_a_config_error(rate: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        u = {"name": "u", "dscp": 46, "priority": 5, "tsa": "strict", "maxrate": rate}
        config(classes=[u], best_effort_bandwidth=100)


@pytest.mark.parametrize("drv_name", ["mlx5", "ice", "bnxt"])
def test_dcbx_host_mode_first_then_the_rest_and_restore(drv_name: str, tmp_path: Path) -> None:
    kernel = FakeDcbKernel({"eth0": FakeNic(driver=drv_name)})
    nic = kernel.nics["eth0"]
    fresh = nic.dcbx
    slots = [Slot(driver(kernel))]
    cfg = config(dcbx="host")
    plan = make_plan(slots, cfg)
    targets = [c.target for c in plan.changes]
    if drv_name == "mlx5":
        assert targets[0] == "eth0/dcb/dcbx"  # the firmware agent is switched off before ETS is written
    else:
        assert "eth0/dcb/dcbx" in plan.in_sync  # ice and bnxt run DCBX on the host already
    journal = Journal.load(tmp_path / "j.json")
    apply_plan(plan, slots, journal)
    assert nic.dcbx == 0x09 and make_plan(slots, cfg).empty
    restore([Slot(driver(kernel))], Journal.load(tmp_path / "j.json"))
    assert nic.dcbx == fresh


def test_dcbx_lld_managed_is_verify_only_and_refuses_dcb_writes_in_the_config() -> None:
    assert config(dcbx="lld_managed").dcbx == "lld_managed"
    assert config().dcbx is None and config(dcbx=None).dcbx is None
    with pytest.raises(ConfigError, match=r"dcbx: expected one of host, lld_managed, got a string \('cee'\)"):
        config(dcbx="cee")
    with pytest.raises(ConfigError) as err:
        config(dcbx="lld_managed", cable_length=7, buffer_sizes=["64kb"])
    assert "dcbx: lld_managed leaves the NIC's DCB to the LLDP agent" in str(err.value)
    assert "cable_length, buffer_sizes, which only a write can do" in str(err.value)


def _lld_nic(agrees: bool) -> FakeNic:
    """An ice port whose firmware LLDP agent is in charge (ice_dcbnl_getdcbx: DCB_CAP_DCBX_LLD_MANAGED)
    and has taken the switch's ETS/PFC/APP, as the default classes want them or not."""
    tsa = [2] * 8
    tsa[5] = tsa[6] = 0
    nic = FakeNic(driver="ice", dcbx=0x02 | 0x08)
    from agent.dcb_fake import ets_bytes, pfc_bytes

    nic.ets = ets_bytes(
        willing=1, tc_tsa=tuple(tsa), tc_tx_bw=(50, 0, 0, 50, 0, 0, 0, 0), prio_tc=(0, 0, 0, 3, 0, 5, 6, 0)
    )
    nic.pfc = pfc_bytes(pfc_en=0b0010_1000 if agrees else 0b0010_0000)
    nic.apps = [(SEL_DSCP, 3, 26), (SEL_DSCP, 5, 46)]
    return nic


def test_lld_managed_writes_no_dcb_and_reports_where_the_lldp_agent_disagrees(tmp_path: Path) -> None:
    nic = _lld_nic(agrees=True)
    kernel = FakeDcbKernel({"eth0": nic})
    drv = driver(kernel)
    cfg = config(dcbx="lld_managed")
    assert set(drv.desired(cfg)) == {"eth0/dcb/pause"}  # ethtool, not DCB: still Geryon's
    ets, pfc, apps = nic.ets, nic.pfc, list(nic.apps)
    slots = [Slot(drv)]
    apply_plan(make_plan(slots, cfg), slots, Journal.load(tmp_path / "j.json"))
    assert (nic.ets, nic.pfc, nic.apps) == (ets, pfc, apps)  # nothing of DCB written
    assert drv.lld_report(cfg) == []
    assert drv.lld_report(config()) == [] and drv.lld_check(config()) is None  # other modes: no check

    nic.pfc = _lld_nic(agrees=False).pfc  # the LLDP agent took a switch config without PFC on 3
    nic.dcbx = 0x01 | 0x08  # and someone put the port back in host mode
    assert drv.lld_report(cfg) == [
        "lld: eth0: expected DCBX mode lld_managed, found host ieee",
        "lld: eth0 priority 3: expected PFC on (class 'bulk'), found off",
    ]
    assert make_plan(slots, cfg).empty  # verify-only: nothing to apply, so the daemon never fights lldpad


def test_the_daemon_reports_lld_disagreement_as_drift_without_applying(tmp_path: Path) -> None:
    import io

    from geryon.agent.daemon import Agent, Log

    nic = _lld_nic(agrees=False)
    kernel = FakeDcbKernel({"eth0": nic})
    logs = io.StringIO()
    agent = Agent(
        str(tmp_path / "agent.yaml"),
        config(dcbx="lld_managed"),
        Journal.load(tmp_path / "j.json"),
        lambda cfg: ([Slot(driver(kernel))], lambda: None),
        Log(logs),
    )
    pfc = nic.pfc
    assert not agent.reconcile("start")
    assert agent.drift() == ["lld: eth0 priority 3: expected PFC on (class 'bulk'), found off"]
    applied = [line for line in logs.getvalue().splitlines() if "event=applied" in line]
    assert nic.pfc == pfc and all("targets=eth0/dcb/pause " in line for line in applied)  # pause only
    assert not agent.reconcile("periodic")
    assert logs.getvalue().count('repair="none (lld_managed)"') == 1  # logged once, not every verify
    nic.pfc = _lld_nic(agrees=True).pfc
    assert agent.reconcile("periodic") and agent.drift() == []


def test_cable_length_on_mlx5_and_a_clear_error_where_the_driver_ignores_it(tmp_path: Path) -> None:
    kernel = FakeDcbKernel({"eth0": FakeNic(driver="mlx5")})
    nic = kernel.nics["eth0"]
    slots = [Slot(driver(kernel))]
    cfg = config(cable_length=30)
    journal = Journal.load(tmp_path / "j.json")
    plan = make_plan(slots, cfg, journal)
    assert next(c for c in plan.changes if c.target == "eth0/dcb/cable_length").before == 7  # mlx5's default
    apply_plan(plan, slots, journal)
    assert nic.pfc[4] == 30 and nic.pfc_en == 0b0010_1000  # delay = 30 m, PFC kept
    assert make_plan(slots, cfg, journal).empty
    restore([Slot(driver(kernel))], Journal.load(tmp_path / "j.json"))
    assert nic.pfc[4] == 7

    ice = FakeDcbKernel({"eth0": FakeNic(driver="ice")})
    with pytest.raises(ApplyError, match=r"does not take ieee_pfc\.delay as the cable length"):
        apply_plan(make_plan([Slot(driver(ice))], cfg), [Slot(driver(ice))], None)


def test_cable_length_range() -> None:
    with pytest.raises(ConfigError, match=r"cable_length: 1000 is out of range; allowed 1-999"):
        config(cable_length=1000)


def test_prio_to_buffer_map_and_sizes_on_mlx5(tmp_path: Path) -> None:
    classes = [
        {"name": "urgent", "dscp": 46, "priority": 5, "tsa": "strict", "lossless": True, "nic_buffer": 1},
        {"name": "bulk", "dscp": 26, "priority": 3, "bandwidth": 50, "lossless": True, "nic_buffer": 1},
    ]
    cfg = config(classes=classes, buffer_sizes=["64kib", "100000"])  # 100000 is not a whole 128 B cell
    kernel = FakeDcbKernel({"eth0": FakeNic(driver="mlx5")})
    nic = kernel.nics["eth0"]
    fresh = nic.buffer
    slots = [Slot(driver(kernel))]
    want = slots[0].driver.desired(cfg)["eth0/dcb/buffer"]
    assert want == {"prio2buffer": [0, 0, 0, 1, 0, 1, 0, 0], "buffer_size": [65536, 100000, 0, 0, 0, 0, 0, 0]}
    journal = Journal.load(tmp_path / "j.json")
    apply_plan(make_plan(slots, cfg, journal), slots, journal)
    assert nic.buffer == ([0, 0, 0, 1, 0, 1, 0, 0], [65536, 99968, 0, 0, 0, 0, 0, 0], fresh[2])
    assert make_plan(slots, cfg, journal).empty  # 99968 is 100000 rounded down to a cell: in sync
    restore([Slot(driver(kernel))], Journal.load(tmp_path / "j.json"))
    assert nic.buffer == fresh


def test_buffers_too_big_for_the_port_fail_and_roll_back() -> None:
    kernel = FakeDcbKernel({"eth0": FakeNic(driver="mlx5")})
    before = kernel.nics["eth0"].buffer
    cfg = config(buffer_sizes=["1gib"])
    with pytest.raises(ApplyError, match="eth0/dcb/buffer"):
        apply_plan(make_plan([Slot(driver(kernel))], cfg), [Slot(driver(kernel))], None)
    assert kernel.nics["eth0"].buffer == before


def test_buffer_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"classes\[0\]\.nic_buffer: 8 is out of range; allowed 0-7"):
        config(classes=[{"name": "u", "dscp": 46, "priority": 5, "tsa": "strict", "nic_buffer": 8}])
    with pytest.raises(ConfigError, match=r"buffer_sizes: 9 sizes; give 1-8"):
        config(buffer_sizes=[0] * 9)
    with pytest.raises(ConfigError, match=r"buffer_sizes\[1\]: 12 is out of range"):
        config(buffer_sizes=[0, 12])


def test_global_pause_goes_off_where_pfc_is_on_and_comes_back_on_restore(tmp_path: Path) -> None:
    kernel = FakeDcbKernel({"eth0": FakeNic(driver="mlx5")})
    eth = FakeEthtool({"eth0": FakeEthtoolNic()})  # mlx5 ports come up with rx/tx pause on
    slots = [Slot(driver(kernel, eth))]
    journal = Journal.load(tmp_path / "j.json")
    plan = make_plan(slots, config(), journal)
    pause = next(c for c in plan.changes if c.target == "eth0/dcb/pause")
    assert pause.before == {"autoneg": False, "rx": True, "tx": True}
    apply_plan(plan, slots, journal)
    assert (eth.nics["eth0"].rx_pause, eth.nics["eth0"].tx_pause) == (False, False)
    assert make_plan(slots, config(), journal).empty
    restore([Slot(driver(kernel, eth))], Journal.load(tmp_path / "j.json"))
    assert (eth.nics["eth0"].rx_pause, eth.nics["eth0"].tx_pause) == (True, True)
    # no lossless class: Geryon leaves pause alone
    lossy = config(
        classes=[{"name": "u", "dscp": 46, "priority": 5, "tsa": "strict"}], best_effort_bandwidth=100
    )
    assert "eth0/dcb/pause" not in slots[0].driver.desired(lossy)


def test_pfc_storm_timeout(tmp_path: Path) -> None:
    kernel = FakeDcbKernel({"eth0": FakeNic(driver="mlx5")})
    eth = FakeEthtool({"eth0": FakeEthtoolNic()})
    slots = [Slot(driver(kernel, eth))]
    apply_plan(make_plan(slots, config(pfc_storm_timeout=500)), slots, None)
    assert eth.nics["eth0"].pfc_storm_ms == 500
    assert make_plan(slots, config(pfc_storm_timeout=500)).empty
    for bad, message in (
        (50, r"pfc_storm_timeout: 50 ms; allowed 0 \(off\) or 80-8000"),
        (9000, "out of range"),
    ):
        with pytest.raises(ConfigError, match=message):
            config(pfc_storm_timeout=bad)
    # a veth has neither op: skipped under auto
    veth = FakeDcbKernel({"eth0": FakeNic(dcb=False)})
    plan = make_plan([Slot(driver(veth), on_unsupported="auto")], config(pfc_storm_timeout=500))
    assert "eth0/dcb/pfc_storm_timeout" in [s.target for s in plan.skipped]


def test_a_nic_without_dcb_keeps_its_link_level_pause() -> None:
    # e.g. a plain NIC with pause but no dcbnl ops: PFC cannot replace its flow control, so pause stays
    kernel = FakeDcbKernel({"eth0": FakeNic(dcb=False)})
    eth = FakeEthtool({"eth0": FakeEthtoolNic(ops=True)})
    plan = make_plan([Slot(driver(kernel, eth), on_unsupported="auto")], config())
    skip = next(s for s in plan.skipped if s.target == "eth0/dcb/pause")
    assert "no DCB operations" in skip.reason or "link-level pause is left" in skip.reason
    assert (eth.nics["eth0"].rx_pause, eth.nics["eth0"].tx_pause) == (True, True)
