"""A real `ansible-playbook site.yml` run against a SONiC and a Cumulus switch played by the fake CLIs
in tests/deploy/fake_switch (config, sonic-cfggen, nv: their documented semantics): a failed apply is
rolled back (SONiC `config rollback` to the checkpoint, NVUE `nv config detach`) and the next run
applies it; a run after that changes nothing; drift on the switch is repaired."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deploy.rollout import failures, fake_switches, playbook, results, write_switch_inventory

from geryon.fabric.intent import load_intent
from geryon.fabric.render import sonic as sonic_render

SONIC_APPLY = "switch_qos : Apply the QoS rows (load)"
NV_APPLY = "switch_qos : Apply the staged revision (nv config apply --confirm)"


def _switch_changes(doc: dict[str, Any]) -> dict[str, int]:
    return {h: s["changed"] for h, s in doc["stats"].items()}


def _calls(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_failed_apply_is_rolled_back_and_the_next_run_applies_it(tmp_path: Path) -> None:
    inv = write_switch_inventory(tmp_path, None)
    env = fake_switches(tmp_path)
    state = tmp_path / "sonic-state"
    nv = tmp_path / "nv-state"
    default = json.loads((state / "running.json").read_text())

    # 1. Both fail: SONiC's `config load` half-writes; on Cumulus the apply goes through but the check
    #    after it fails (a command refused while the apply awaits confirmation).
    doc = playbook(
        tmp_path, inv, env={**env, "FAKE_SONIC_FAIL": "apply", "FAKE_NV_FAIL_APPLIED": "pfc-watchdog"}
    )
    assert doc["rc"] != 0
    bad = "\n".join(failures(doc))
    assert "rolled back to checkpoint geryon-qos; the next run applies again" in bad
    assert json.loads((state / "running.json").read_text()) == default  # the half-written load undone
    assert "config rollback geryon-qos" in _calls(state / "calls.log")
    nv_calls = _calls(nv / "calls.log")
    assert "config apply --confirm 300s -y" in nv_calls and nv_calls[-1] == "config apply --confirm-no"
    assert _calls(nv / "applied.txt") == [] and _calls(nv / "pending.txt") == []  # rolled back, none staged
    assert not (nv / "startup.txt").exists()

    # 2. The next run applies both (nothing keys on a file left from run 1).
    doc = playbook(tmp_path, inv, env=env)
    assert doc["rc"] == 0, failures(doc) or doc["stderr"]
    running = json.loads((state / "running.json").read_text())
    assert json.loads((state / "saved.json").read_text()) == running  # config save
    assert running["PORT_QOS_MAP"]["Ethernet0"]["pfc_enable"] == "3,5"
    assert running["QUEUE"]["Ethernet4|5"] == {"scheduler": "GERYON_urgent", "wred_profile": "GERYON_NO_WRED"}
    intent = load_intent(tmp_path / "intent.yaml")
    assert (
        sonic_render.document(intent, ["Ethernet0", "Ethernet4", "Ethernet8", "Ethernet12"], running)[
            "pending"
        ]
        == []
    )
    assert not (state / "checkpoints" / "geryon-qos.json").exists()
    applied = _calls(nv / "applied.txt")
    assert "set qos traffic-pool default-lossless switch-priority 3,5" in applied
    assert "set interface swp1-swp4 qos pfc-watchdog state enable" in applied
    assert _calls(nv / "startup.txt") == applied and not (nv / "rollback.txt").exists()  # confirmed, saved
    assert (tmp_path / "cumulus" / "etc-geryon" / "nvue-qos.sh").exists()  # the role made the folder

    # 3. Again: nothing to do.
    doc = playbook(tmp_path, inv, env=env)
    assert doc["rc"] == 0, failures(doc) or doc["stderr"]
    assert _switch_changes(doc) == {"leaf-sonic": 0, "leaf-cumulus": 0}, doc["stats"]

    # 4. Drift on the switch (someone reset queue 5's scheduler): the next run puts it back.
    running["QUEUE"]["Ethernet4|5"] = {"scheduler": "scheduler.0"}
    (state / "running.json").write_text(json.dumps(running))
    doc = playbook(tmp_path, inv, env=env)
    assert doc["rc"] == 0, failures(doc) or doc["stderr"]
    assert doc["stats"]["leaf-sonic"]["changed"] > 0
    fixed = json.loads((state / "running.json").read_text())
    assert fixed["QUEUE"]["Ethernet4|5"]["scheduler"] == "GERYON_urgent"


def test_an_old_cumulus_release_stops_before_staging(tmp_path: Path) -> None:
    inv = write_switch_inventory(tmp_path, None)
    env = fake_switches(tmp_path, cumulus_release='"5.5.0"')
    doc = playbook(tmp_path, inv, "--limit", "leaf-cumulus", env=env)
    assert doc["rc"] != 0
    stage = results(doc, "switch_qos : Stage the NVUE commands (the script checks the release first)")
    assert stage["leaf-cumulus"]["rc"] == 2
    want = "needs Cumulus Linux 5.6 or later (PFC watchdog); this switch runs 5.5; nothing staged"
    assert want in stage["leaf-cumulus"]["stderr"]
    assert not [c for c in _calls(tmp_path / "nv-state" / "calls.log") if c.startswith("set ")]
