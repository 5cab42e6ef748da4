"""The switch's DCBX advertisement (the NIC's peer ETS/PFC/APP, through the fake kernel at the dcbnl
socket) against the agent config; and `geryon check-fabric --peer` reporting it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from agent.dcb_fake import SEL_DSCP, TSA_ETS, TSA_STRICT, FakeDcbKernel, FakeNic, ets_bytes, pfc_bytes

from geryon.agent.config import parse_config
from geryon.agent.dcbnl import DcbnlClient
from geryon.agent.peer import peer_mismatches
from geryon.cli import main
from geryon.fabric import cli_check

CFG = parse_config({"interfaces": ["eth0"]})  # urgent DSCP 46 -> 5 strict, bulk 26 -> 3 ets; both lossless


def switch_agrees() -> FakeNic:
    # A switch port as the default config wants it: priorities 3 and 5 lossless, 5 strict, 3 ets.
    tsa = [TSA_ETS] * 8
    tsa[5] = tsa[6] = TSA_STRICT
    return FakeNic(
        driver="bnxt",
        peer_ets=ets_bytes(
            tc_tsa=tuple(tsa), tc_tx_bw=(50, 0, 0, 50, 0, 0, 0, 0), prio_tc=(0, 0, 0, 3, 0, 5, 6, 0)
        ),
        peer_pfc=pfc_bytes(pfc_en=0b0010_1000),
        peer_apps=[(SEL_DSCP, 3, 26), (SEL_DSCP, 5, 46)],
    )


def state(nic: FakeNic):  # type: ignore[no-untyped-def]
    with DcbnlClient(sock_factory=FakeDcbKernel({"eth0": nic}).socket) as c:
        return c.get_ieee("eth0")


def test_a_switch_that_agrees_gives_no_mismatch() -> None:
    s = state(switch_agrees())
    assert s.peer_pfc is not None and s.peer_pfc.priorities == (3, 5)
    assert peer_mismatches(CFG, "eth0", s) == []


def test_each_disagreement_is_named() -> None:
    nic = switch_agrees()
    nic.peer_pfc = pfc_bytes(pfc_en=0b0010_0001)  # 3 lossy at the switch, 0 lossless
    nic.peer_ets = ets_bytes(
        tc_tsa=(TSA_ETS,) * 8, tc_tx_bw=(100,) + (0,) * 7, prio_tc=(0, 0, 0, 1, 0, 1, 6, 0)
    )  # 3 and 5 share TC 1, which is not strict
    nic.peer_apps = [(SEL_DSCP, 0, 26), (SEL_DSCP, 5, 46)]  # the switch maps DSCP 26 to priority 0
    lines = [m.line() for m in peer_mismatches(CFG, "eth0", state(nic))]
    assert lines == [
        "peer: eth0 priority 3: expected PFC on (class 'bulk'), found off",
        "peer: eth0 priority 0: expected PFC off (no lossless class), found on",
        "peer: eth0 priority 5: expected a strict TC (class 'urgent'), found TC 1, ets",
        "peer: eth0 priority 3: expected a TC of its own (class 'bulk'), found TC 1, shared with class "
        "'urgent'",
        "peer: eth0 DSCP 26: expected priority 3, found priority 0",
    ]


def test_a_driver_without_peer_ops_says_so() -> None:
    (m,) = peer_mismatches(CFG, "eth0", state(FakeNic(driver="mlx5")))
    assert m.where == "eth0" and "reports no peer state" in m.found


@pytest.fixture
def files(tmp_path: Path) -> list[str]:
    intent = {
        "name": "geryon-2class",
        "classes": [
            {"name": "urgent", "dscp": [46], "priority": 5, "lossless": True, "scheduler": "strict"},
            {
                "name": "bulk",
                "dscp": [26],
                "priority": 3,
                "lossless": True,
                "scheduler": "dwrr",
                "weight": 100,
            },
        ],
        "cnp": {"dscp": 48, "priority": 6},
    }
    (tmp_path / "intent.yaml").write_text(yaml.safe_dump(intent))
    (tmp_path / "agent.yaml").write_text("interfaces: [eth0]\n")
    return [
        "check-fabric",
        "--intent",
        str(tmp_path / "intent.yaml"),
        "--agent-config",
        str(tmp_path / "agent.yaml"),
    ]


def test_check_fabric_peer(
    files: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    kernel = FakeDcbKernel({"eth0": switch_agrees()})
    monkeypatch.setattr(cli_check, "_dcb_client", lambda netns: DcbnlClient(sock_factory=kernel.socket))
    assert main([*files, "--peer"]) == 0
    assert "the switch's DCBX on eth0" in capsys.readouterr().out
    kernel.nics["eth0"].peer_pfc = pfc_bytes(pfc_en=0b0010_0000)
    assert main([*files, "--peer"]) == 1
    out = capsys.readouterr().out
    assert "peer: eth0 priority 3: expected PFC on (class 'bulk'), found off" in out
    kernel.nics["eth0"].dcb = False  # a veth: no DCB ops at all
    assert main([*files, "--peer"]) == 1
    assert (
        "peer: eth0: expected the switch's DCBX advertisement, found no DCB operations"
        in capsys.readouterr().out
    )
    assert main([*files, "--netns", "x"]) == 2
    assert "--netns: only with --peer" in capsys.readouterr().err


def test_agent_verify_reports_the_switch_but_it_is_not_host_drift() -> None:
    from agent.ethtool_fake import FakeEthtool, FakeEthtoolNic

    from geryon.agent.commands import peer_lines
    from geryon.agent.dcb_driver import DcbDriver
    from geryon.agent.engine import Slot
    from geryon.agent.ethtool import Ethtool

    nic = switch_agrees()
    kernel = FakeDcbKernel({"eth0": nic})
    drv = DcbDriver(
        client_factory=lambda: DcbnlClient(sock_factory=kernel.socket),
        ethtool=Ethtool(FakeEthtool({"eth0": FakeEthtoolNic()})),
    )
    assert peer_lines(CFG, [Slot(drv)]) == []
    nic.peer_pfc = pfc_bytes(pfc_en=0b0010_0000)
    assert peer_lines(CFG, [Slot(drv)]) == [
        "peer: eth0 priority 3: expected PFC on (class 'bulk'), found off"
    ]
    # a NIC that reports no peer state says nothing here (check-fabric --peer says it)
    assert (
        peer_lines(
            CFG,
            [
                Slot(
                    DcbDriver(
                        client_factory=lambda: DcbnlClient(
                            sock_factory=FakeDcbKernel({"eth0": FakeNic()}).socket
                        )
                    )
                )
            ],
        )
        == []
    )


# --- the daemon's switch check: at its verify cadence, in its metrics and on its status page ---------


def _daemon_on(kernel: FakeDcbKernel, tmp_path: Path, log_stream: object):  # type: ignore[no-untyped-def]
    from agent.ethtool_fake import FakeEthtool, FakeEthtoolNic

    from geryon.agent.daemon import Agent, Log
    from geryon.agent.dcb_driver import DcbDriver
    from geryon.agent.engine import Slot
    from geryon.agent.ethtool import Ethtool
    from geryon.agent.journal import Journal

    def open_slots(cfg: object) -> tuple[list[Slot], object]:
        drv = DcbDriver(
            client_factory=lambda: DcbnlClient(sock_factory=kernel.socket),
            ethtool=Ethtool(FakeEthtool({"eth0": FakeEthtoolNic()})),
        )
        return [Slot(drv, "auto")], drv.close

    return Agent(
        str(tmp_path / "agent.yaml"),
        CFG,
        Journal.load(tmp_path / "journal.json"),
        open_slots,  # type: ignore[arg-type]
        Log(log_stream),  # type: ignore[arg-type]
    )


def test_the_daemon_checks_the_switch_at_each_verify_and_reports_it(tmp_path: Path) -> None:
    import io

    from prometheus_client import CollectorRegistry, generate_latest

    from geryon.agent.flows import FlowDiscovery
    from geryon.agent.http_server import StatusSource
    from geryon.agent.jobs import JobRegistry
    from geryon.agent.metrics import AgentCollector

    kernel = FakeDcbKernel({"eth0": switch_agrees()})
    logs = io.StringIO()
    agent = _daemon_on(kernel, tmp_path, logs)
    try:
        assert agent.peer() is None  # before the first verify: unknown, not "agrees"
        assert agent.reconcile("start")
        check = agent.peer()
        assert check is not None and check.interfaces == ("eth0",) and check.mismatches == ()

        disc = FlowDiscovery()
        collector = AgentCollector(agent, JobRegistry(), disc)
        registry = CollectorRegistry()
        registry.register(collector)
        try:
            text = generate_latest(registry).decode()
            for kind in ("pfc", "ets", "app"):
                assert f'geryon_peer_mismatch{{interface="eth0",kind="{kind}"}} 0.0' in text

            # The switch port loses PFC on priority 3 and maps DSCP 26 elsewhere: seen at the next verify
            # (the host is still in sync, so nothing is re-applied), counted per kind.
            nic = kernel.nics["eth0"]
            nic.peer_pfc = pfc_bytes(pfc_en=0b0010_0000)
            nic.peer_apps = [(SEL_DSCP, 0, 26), (SEL_DSCP, 5, 46)]
            text = generate_latest(registry).decode()
            assert 'geryon_peer_mismatch{interface="eth0",kind="pfc"} 0.0' in text  # cached until verify
            assert agent.reconcile("periodic")
            check = agent.peer()
            assert check is not None
            assert sorted((m.kind, m.where) for m in check.mismatches) == [
                ("app", "eth0 DSCP 26"),
                ("pfc", "eth0 priority 3"),
            ]
            assert agent.drift() == []  # the switch is not host drift
            text = generate_latest(registry).decode()
            assert 'geryon_peer_mismatch{interface="eth0",kind="pfc"} 1.0' in text
            assert 'geryon_peer_mismatch{interface="eth0",kind="app"} 1.0' in text
            assert 'geryon_peer_mismatch{interface="eth0",kind="ets"} 0.0' in text
            assert "geryon_peer_checked_timestamp_seconds" in text

            doc = StatusSource(collector).snapshot()
            assert doc["peer"]["interfaces"] == ["eth0"]
            assert {
                "interface": "eth0",
                "kind": "pfc",
                "where": "eth0 priority 3",
                "expected": "PFC on (class 'bulk')",
                "found": "off",
                "side": "peer",
            } in doc["peer"]["mismatches"]

            # Logged once when it changes, not at every verify; and once when the switch agrees again.
            assert agent.reconcile("periodic")
            assert logs.getvalue().count("event=peer_mismatch") == 2
            nic.peer_pfc, nic.peer_apps = switch_agrees().peer_pfc, switch_agrees().peer_apps
            assert agent.reconcile("periodic")
            assert "event=peer_agrees" in logs.getvalue()
            assert 'kind="pfc"} 0.0' in generate_latest(registry).decode()
        finally:
            collector.close()
            disc.close()
    finally:
        agent.close()


def test_a_nic_without_peer_state_gives_no_series(tmp_path: Path) -> None:
    import io

    kernel = FakeDcbKernel({"eth0": FakeNic(driver="mlx5")})  # mlx5's fake: no peer ops
    agent = _daemon_on(kernel, tmp_path, io.StringIO())
    try:
        assert agent.reconcile("start")
        check = agent.peer()
        assert check is not None and check.interfaces == () and check.mismatches == ()
    finally:
        agent.close()
