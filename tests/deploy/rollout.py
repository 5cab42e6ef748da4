"""Runs the deploy/ansible playbook against an emulated testbed (local connection, commands entered in
the testbed's namespaces) and reads the results (ansible.posix.json callback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "deploy" / "ansible"
BIN = Path(sys.executable).parent
GERYON = str(BIN / "geryon")
RATE, BUFFER = "100mbit", "256kib"
INTENT = {
    "name": "geryon-2class",
    "classes": [
        {"name": "urgent", "dscp": [46], "priority": 5, "lossless": True, "scheduler": "strict"},
        {"name": "bulk", "dscp": [26], "priority": 3, "lossless": True, "scheduler": "dwrr", "weight": 100},
    ],
    "cnp": {"dscp": 48, "priority": 6},
}


def switch_ports(netns: str) -> list[str]:
    """The software switch's ports: the veth ends in its namespace (the bridge is not one)."""
    out = subprocess.run(
        ["ip", "-n", netns, "-j", "link", "show", "type", "veth"], capture_output=True, text=True, check=True
    ).stdout
    return sorted(link["ifname"] for link in json.loads(out))


def agent_config(ifname: str) -> dict[str, Any]:
    return {"interfaces": [ifname], "egress": {"rate": RATE, "burst": "64kib", "buffer": BUFFER}}


def write_inventory(tmp: Path, tb: Any) -> Path:
    """One switch (the testbed's switch namespace) and one gpu host per testbed host, all local."""
    intent = tmp / "intent.yaml"
    intent.write_text(yaml.safe_dump(INTENT))
    gpu: dict[str, Any] = {}
    for name, h in tb.hosts.items():
        (tmp / name).mkdir(exist_ok=True)
        gpu[name] = {
            "netns": h.netns,
            "geryon_agent_config_path": str(tmp / name / "agent.yaml"),
            "geryon_agent_config": agent_config(h.ifname),
            "nic_qos_config_path": str(tmp / name / "agent.yaml"),
            "nic_qos_journal": str(tmp / name / "journal.json"),
        }
    inv = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "switch_qos_intent": str(intent),
            },
            "children": {
                "switches": {
                    "hosts": {
                        "sw": {
                            "switch_os": "linux",
                            "netns": tb.switch_netns,
                            "switch_qos_ports": switch_ports(tb.switch_netns),
                            "switch_qos_rate": RATE,
                            "switch_qos_buffer": BUFFER,
                            "switch_qos_geryon": GERYON,
                            "switch_qos_python": sys.executable,
                        }
                    }
                },
                "gpu_hosts": {
                    "vars": {
                        "geryon_agent_install": False,
                        "geryon_agent_manage_service": False,
                        "geryon_agent_python": sys.executable,
                        "nic_qos_geryon": GERYON,
                    },
                    "hosts": gpu,
                },
            },
        }
    }
    path = tmp / "inventory.yml"
    path.write_text(yaml.safe_dump(inv, sort_keys=False))
    return path


def playbook(
    tmp: Path,
    inventory: Path,
    *args: str,
    timeout: float = 120,
    env: dict[str, str] | None = None,
    site: Path = ANSIBLE_DIR / "site.yml",
) -> dict[str, Any]:
    """ansible-playbook site.yml (or `site`, a playbook of the roles in deploy/ansible/roles); returns
    the json callback's document (plays, stats) plus rc. `env` adds to the environment (the local
    "switches" read it: fake switch CLIs, their state)."""
    env = {
        **os.environ,
        **(env or {}),
        "PATH": f"{BIN}{os.pathsep}{(env or {}).get('PATH', os.environ.get('PATH', ''))}",
        "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_HOME": str(tmp / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(tmp / ".ansible" / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }
    r = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(site), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=tmp,
    )
    try:
        doc = json.loads(r.stdout[r.stdout.index("{") :])
    except ValueError:
        raise AssertionError(
            f"ansible-playbook printed no JSON (exit {r.returncode}): {r.stdout}{r.stderr}"
        ) from None
    doc["rc"] = r.returncode
    doc["stderr"] = r.stderr
    return doc


def results(doc: dict[str, Any], task: str) -> dict[str, dict[str, Any]]:
    """{host: result} of the task with this name (over all plays)."""
    out: dict[str, dict[str, Any]] = {}
    for play in doc["plays"]:
        for t in play["tasks"]:
            if t["task"]["name"] == task:
                out.update(t["hosts"])
    return out


def failures(doc: dict[str, Any]) -> list[str]:
    bad = []
    for play in doc["plays"]:
        for t in play["tasks"]:
            for host, res in t["hosts"].items():
                if res.get("failed") or res.get("unreachable"):
                    bad.append(f"{host}: {t['task']['name']}: {res.get('msg') or res.get('stderr')}")
    return bad


FAKE_SWITCH = REPO / "tests" / "deploy" / "fake_switch"
SONIC_DEFAULT = REPO / "tests" / "fabric" / "fixtures" / "sonic_default_config_db.json"


def fake_switches(tmp: Path, cumulus_release: str = "5.6.0") -> dict[str, str]:
    """The environment for a SONiC and a Cumulus switch played by the fake CLIs in
    tests/deploy/fake_switch (config, sonic-cfggen, nv), each with its own state folder; the SONiC
    switch starts from SONiC's default QoS config (tests/fabric/fixtures), the Cumulus switch from an
    empty NVUE config on the given release."""
    sonic = tmp / "sonic-state"
    if not (sonic / "running.json").exists():
        sonic.mkdir(parents=True, exist_ok=True)
        (sonic / "running.json").write_text(SONIC_DEFAULT.read_text())
    release = tmp / "os-release"
    release.write_text(f'NAME="Cumulus Linux"\nVERSION_ID={cumulus_release}\n')
    return {
        "PATH": f"{FAKE_SWITCH}{os.pathsep}{os.environ.get('PATH', '')}",
        "FAKE_SONIC_STATE": str(sonic),
        "FAKE_NV_STATE": str(tmp / "nv-state"),
        "GERYON_OS_RELEASE": str(release),
    }


def write_switch_inventory(tmp: Path, agent_config: Path | None) -> Path:
    """A SONiC and a Cumulus switch, both the local machine; their CLIs are the fakes of
    fake_switches() (pass its environment to playbook())."""
    intent = tmp / "intent.yaml"
    intent.write_text(yaml.safe_dump(INTENT))
    for d in ("sonic", "cumulus"):  # cumulus/etc-geryon is not made: the role creates it
        (tmp / d).mkdir(exist_ok=True)
    inv = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "ansible_become": False,
                "switch_qos_intent": str(intent),
                "switch_qos_controller_geryon": GERYON,
            },
            "children": {
                "switches": {
                    "hosts": {
                        "leaf-sonic": {
                            "switch_os": "sonic",
                            "switch_qos_ports": "Ethernet0-12:4",
                            "switch_qos_agent_config": str(agent_config) if agent_config else "",
                            "switch_qos_sonic_file": str(tmp / "sonic" / "geryon-qos.json"),
                            "switch_qos_sonic_patch_file": str(tmp / "sonic" / "geryon-qos.patch.json"),
                        },
                        "leaf-cumulus": {
                            "switch_os": "cumulus",
                            "switch_qos_ports": "swp1-4",
                            "switch_qos_cumulus_file": str(tmp / "cumulus" / "etc-geryon" / "nvue-qos.sh"),
                        },
                    }
                },
                "gpu_hosts": {"hosts": {}},
            },
        }
    }
    path = tmp / "switches.yml"
    path.write_text(yaml.safe_dump(inv, sort_keys=False))
    return path
