"""configfs/sysfs writers under a temporary root laid out like the kernel's, driven by the real engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent.kernel_tree import add_plain_netdev, create_rdma_cm_group, mlx5_host

from geryon.agent.config import ConfigError, parse_config
from geryon.agent.driver import DriverError, Unsupported
from geryon.agent.engine import ApplyError, EngineError, Slot, apply_plan, make_plan, restore
from geryon.agent.journal import Journal
from geryon.agent.sysfs import SysfsTree, ecn_enable_path
from geryon.agent.sysfs_driver import SysfsDriver, parse_target

CONFIG = parse_config({"interfaces": ["eth0"]})  # defaults: ECN on priorities 3 and 5, CNP 48/6, ToS 104


def text(root: Path, rel: str) -> str:
    return (root / rel).read_text()


def test_tree_reads_and_writes_like_echo(tmp_path: Path) -> None:
    mlx5_host(tmp_path)
    tree = SysfsTree(tmp_path)
    rel = ecn_enable_path("eth0", "roce_rp", 3)
    assert tree.read_int(rel) == 0
    tree.write(rel, "1")
    assert text(tmp_path, rel) == "1\n"
    assert tree.read("sys/class/net/eth0/nothing") is None
    with pytest.raises(FileNotFoundError):
        tree.write("sys/class/net/eth0/nothing", "1")  # never creates a file
    assert not (tmp_path / "sys/class/net/eth0/nothing").exists()
    with pytest.raises(ValueError, match="roce_xx"):
        ecn_enable_path("eth0", "roce_xx", 1)


def test_desired_expands_every_rdma_port(tmp_path: Path) -> None:
    mlx5_host(tmp_path, ports=2)
    want = SysfsDriver(tmp_path).desired(CONFIG)
    assert want == {
        "rdma/mlx5_0/1/roce_tos": 104,  # bulk class DSCP 26 << 2
        "rdma/mlx5_0/2/roce_tos": 104,
        "eth0/ecn/roce_rp/3": 1,
        "eth0/ecn/roce_np/3": 1,
        "eth0/ecn/roce_rp/5": 1,
        "eth0/ecn/roce_np/5": 1,
        "eth0/ecn/cnp_dscp": 48,
        "eth0/ecn/cnp_prio": 6,
    }


def test_plan_apply_restore_on_a_mlx5_tree(tmp_path: Path) -> None:
    mlx5_host(tmp_path)
    create_rdma_cm_group(tmp_path, "mlx5_0")  # as configfs would after the driver's mkdir
    cfg = parse_config({"interfaces": ["eth0"], "cnp": {"dscp": 56, "priority": 7}})
    slots = [Slot(SysfsDriver(tmp_path))]
    plan = make_plan(slots, cfg)
    assert {c.target: (c.before, c.after) for c in plan.changes} == {
        "rdma/mlx5_0/1/roce_tos": (0, 104),
        "eth0/ecn/roce_rp/3": (0, 1),
        "eth0/ecn/roce_np/3": (0, 1),
        "eth0/ecn/roce_rp/5": (0, 1),
        "eth0/ecn/roce_np/5": (0, 1),
        "eth0/ecn/cnp_dscp": (48, 56),
        "eth0/ecn/cnp_prio": (6, 7),
    }
    journal = Journal.load(tmp_path / "journal.json")
    apply_plan(plan, slots, journal)
    assert text(tmp_path, "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos") == "104\n"
    assert text(tmp_path, "sys/class/net/eth0/ecn/roce_np/enable/5") == "1\n"
    assert text(tmp_path, "sys/class/net/eth0/ecn/roce_rp/enable/4") == "0\n"  # not Geryon's priority
    assert text(tmp_path, "sys/class/net/eth0/ecn/roce_np/cnp_dscp") == "56\n"
    assert make_plan(slots, cfg).empty

    restore([Slot(SysfsDriver(tmp_path))], Journal.load(tmp_path / "journal.json"))
    assert text(tmp_path, "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos") == "0\n"
    assert text(tmp_path, "sys/class/net/eth0/ecn/roce_np/enable/5") == "0\n"
    assert text(tmp_path, "sys/class/net/eth0/ecn/roce_np/cnp_802p_prio") == "6\n"


def test_roce_tos_write_creates_the_configfs_group_first(tmp_path: Path) -> None:
    mlx5_host(tmp_path)
    drv = SysfsDriver(tmp_path)
    assert drv.observe(["rdma/mlx5_0/1/roce_tos"]) == {"rdma/mlx5_0/1/roce_tos": 0}  # no group: default
    # A plain directory does not grow ports/ on mkdir the way configfs does, so the write then finds no file.
    with pytest.raises(Unsupported, match=r"ports/1/default_roce_tos is missing"):
        drv.write("rdma/mlx5_0/1/roce_tos", 104)
    assert (tmp_path / "sys/kernel/config/rdma_cm/mlx5_0").is_dir()


def test_host_without_roce_skips_or_fails_by_policy(tmp_path: Path) -> None:
    add_plain_netdev(tmp_path, "eth0")
    plan = make_plan([Slot(SysfsDriver(tmp_path), on_unsupported="auto")], CONFIG)
    assert plan.empty and {s.target for s in plan.skipped} == {
        "eth0/ecn/roce_rp/3",
        "eth0/ecn/roce_np/3",
        "eth0/ecn/roce_rp/5",
        "eth0/ecn/roce_np/5",
        "eth0/ecn/cnp_dscp",
        "eth0/ecn/cnp_prio",
    }
    assert "not a RoCE NIC" in plan.skipped[0].reason
    with pytest.raises(EngineError, match="eth0/ecn/roce_rp/3"):
        make_plan([Slot(SysfsDriver(tmp_path), on_unsupported="required")], CONFIG)


def test_named_rdma_device_missing_and_rdma_cm_not_loaded(tmp_path: Path) -> None:
    mlx5_host(tmp_path)
    cfg = parse_config({"interfaces": ["eth0"], "roce_tos": [{"device": "mlx5_9", "port": 1, "tos": 184}]})
    drv = SysfsDriver(tmp_path)
    assert drv.desired(cfg)["rdma/mlx5_9/1/roce_tos"] == 184
    with pytest.raises(Unsupported, match="no RDMA device mlx5_9"):
        drv.observe(["rdma/mlx5_9/1/roce_tos"])
    (tmp_path / "sys/kernel/config/rdma_cm").rmdir()
    with pytest.raises(Unsupported, match=r"modprobe rdma_cm"):
        drv.observe(["rdma/mlx5_0/1/roce_tos"])


def test_failed_write_rolls_back_the_files_already_written(tmp_path: Path) -> None:
    mlx5_host(tmp_path)
    create_rdma_cm_group(tmp_path, "mlx5_0")
    slots = [Slot(SysfsDriver(tmp_path))]
    plan = make_plan(slots, parse_config({"interfaces": ["eth0"], "cnp": {"dscp": 56, "priority": 7}}))
    assert plan.changes[-1].target == "eth0/ecn/cnp_prio"
    # The last file turns into a directory after planning: its write fails (EISDIR; root ignores modes).
    prio = tmp_path / "sys/class/net/eth0/ecn/roce_np/cnp_802p_prio"
    prio.unlink()
    prio.mkdir()
    with pytest.raises(ApplyError, match="eth0/ecn/cnp_prio") as err:
        apply_plan(plan, slots, None)
    assert "Is a directory" in str(err.value.cause)
    # the broken file cannot be rolled back either; every other file is as before
    assert [e.split(":")[0] for e in err.value.rollback_errors] == ["eth0/ecn/cnp_prio"]
    assert len(err.value.rolled_back) == len(plan.changes) - 1
    assert text(tmp_path, "sys/class/net/eth0/ecn/roce_rp/enable/3") == "0\n"
    assert text(tmp_path, "sys/class/net/eth0/ecn/roce_np/cnp_dscp") == "48\n"
    assert text(tmp_path, "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos") == "0\n"


def test_bad_values_and_targets(tmp_path: Path) -> None:
    mlx5_host(tmp_path)
    drv = SysfsDriver(tmp_path)
    with pytest.raises(DriverError, match=r"not an integer 0\.\.63"):
        drv.write("eth0/ecn/cnp_dscp", 64)
    with pytest.raises(DriverError, match=r"not an integer 0\.\.1"):
        drv.write("eth0/ecn/roce_rp/3", 2)
    with pytest.raises(DriverError, match="not a sysfs target"):
        parse_target("eth0/ecn/roce_rp/8")
    (tmp_path / "sys/class/net/eth0/ecn/roce_np/cnp_dscp").write_text("garbage\n")
    with pytest.raises(DriverError, match="expected a number"):
        drv.observe(["eth0/ecn/cnp_dscp"])


def test_dcqcn_parameters_plan_apply_restore(tmp_path: Path) -> None:
    root = mlx5_host(tmp_path)
    create_rdma_cm_group(root, "mlx5_0")  # what configfs makes on mkdir (a plain directory cannot)
    rp = root / "sys/class/net/eth0/ecn/roce_rp"
    (rp / "rpg_ai_rate").write_text("5\n")  # the mlx5 sysfs files exist with the NIC's values
    (rp / "rate_reduce_monitor_period").write_text("4\n")
    (root / "sys/class/net/eth0/ecn/roce_np/min_time_between_cnps").write_text("4\n")
    cfg = parse_config(
        {
            "interfaces": ["eth0"],
            "dcqcn": {
                "roce_rp": {"rpg_ai_rate": 50, "rate_reduce_monitor_period": 2},
                "roce_np": {"min_time_between_cnps": 0},
            },
        }
    )
    drv = SysfsDriver(root)
    journal = Journal.load(tmp_path / "j.json")
    apply_plan(make_plan([Slot(drv)], cfg, journal), [Slot(drv)], journal)
    assert (rp / "rpg_ai_rate").read_text().strip() == "50"
    assert (root / "sys/class/net/eth0/ecn/roce_np/min_time_between_cnps").read_text().strip() == "0"
    assert make_plan([Slot(drv)], cfg, journal).empty
    restore([Slot(SysfsDriver(root))], Journal.load(tmp_path / "j.json"))
    assert (rp / "rpg_ai_rate").read_text().strip() == "5"


def test_dcqcn_config_errors() -> None:
    with pytest.raises(
        ConfigError, match=r"dcqcn\.roce_rp\.'rpg_speed': unknown key; allowed: clamp_tgt_rate"
    ):
        parse_config({"interfaces": ["eth0"], "dcqcn": {"roce_rp": {"rpg_speed": 1}}})
    with pytest.raises(ConfigError, match=r"dcqcn\.'roce_xx': unknown key; allowed: roce_rp, roce_np"):
        parse_config({"interfaces": ["eth0"], "dcqcn": {"roce_xx": {}}})
    with pytest.raises(ConfigError, match=r"dcqcn\.roce_rp\.rpg_gd: -1 is out of range"):
        parse_config({"interfaces": ["eth0"], "dcqcn": {"roce_rp": {"rpg_gd": -1}}})
