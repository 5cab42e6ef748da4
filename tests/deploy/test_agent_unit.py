"""The geryon_agent role's systemd unit, rendered as Ansible's template module renders it (Jinja2 with
trim_blocks), and its ExecStart parsed by `geryon agent run`'s own parser and cluster checks: without
geryon_agent_etcd no cluster flag appears; with it, the host registers under the cluster-host name and
the TLS files are passed as the agent's --etcd-* flags."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from geryon.agent.daemon import check_cluster_args
from geryon.cli import build_parser
from geryon.errors import UsageError

ROLE = Path(__file__).resolve().parents[2] / "deploy/ansible/roles/geryon_agent"


def render(**overrides: Any) -> list[str]:
    """The unit's ExecStart as argv, with the role's defaults (their own templates resolved by hand)."""
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    venv = defaults["geryon_agent_venv"]
    values = {
        **defaults,
        "ansible_managed": "managed",
        "geryon_agent_bin": f"{venv}/bin/geryon",
        "geryon_agent_cluster_host": "trainer-7",  # the role's default: the inventory name
        **overrides,
    }
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)  # Ansible's defaults
    unit = env.from_string((ROLE / "templates/geryon-agent.service.j2").read_text()).render(**values)
    lines = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert len(lines) == 1, unit
    assert "\n\n\n" not in unit  # the template's logic leaves no blank lines behind
    return shlex.split(lines[0][len("ExecStart=") :])


def test_without_etcd_no_cluster_flag() -> None:
    argv = render()
    args = build_parser().parse_args(argv[1:])
    assert args.etcd is None and check_cluster_args(args) is None
    assert not [a for a in argv if a.startswith("--etcd") or a == "--cluster-host"]


def test_with_etcd_the_host_registers_under_its_inventory_name(tmp_path: Path) -> None:
    from geryon.testbed.pki import Authority

    ca = Authority(tmp_path)
    client = ca.issue("agent", server=False)
    argv = render(
        geryon_agent_etcd="https://10.0.0.5:2379,https://10.0.0.6:2379",
        geryon_agent_etcd_cacert=ca.pem.cert,
        geryon_agent_etcd_cert=client.cert,
        geryon_agent_etcd_key=client.key,
        geryon_agent_run_args="--interval 10",
    )
    args = build_parser().parse_args(argv[1:])
    assert args.etcd == "https://10.0.0.5:2379,https://10.0.0.6:2379" and args.cluster_host == "trainer-7"
    assert (args.etcd_cacert, args.etcd_cert, args.etcd_key) == (ca.pem.cert, client.cert, client.key)
    assert args.interval == 10.0  # the extra arguments still come last
    make_view = check_cluster_args(args)  # the agent's own checks, the TLS files loaded
    assert make_view is not None


def test_a_plain_http_endpoint_off_loopback_is_refused_by_the_agent() -> None:
    args = build_parser().parse_args(render(geryon_agent_etcd="http://10.0.0.5:2379")[1:])
    with pytest.raises(UsageError, match="plain http is allowed only to a loopback"):
        check_cluster_args(args)
