"""The agent config: defaults, every kind of bad input named by its field, and a fuzz of the loader
(arbitrary YAML and mappings raise only ConfigError; rejected configs apply nothing)."""

from __future__ import annotations

import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from agent.agent_netns import VethNs, read_sysctl, root_qdisc, veth_ns
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geryon.agent.config import AgentConfig, ClassSpec, CnpSpec, ConfigError, load_config, parse_config
from geryon.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent.yaml"


def test_defaults_are_the_two_class_geryon_setup() -> None:
    c = parse_config({"interfaces": ["eth0"]})
    assert c.classes == (
        ClassSpec("urgent", 46, 5, True, tsa="strict"),
        ClassSpec("bulk", 26, 3, True, tsa="ets", bandwidth=50),
    )
    assert c.cnp == CnpSpec(48, 6)
    assert c.trust == "dscp" and c.dcb == "auto" and c.max_lossless == 2
    assert dict(c.sysctls) == {"net.ipv4.tcp_reflect_tos": "1"}
    assert c.lossless_priorities == (3, 5) and c.pfc_enable_mask == 0b101000
    assert c.ecn_priorities == (3, 5)
    assert c.app_entries() == ((26, 3), (46, 5), (48, 6))
    ets = c.ets()
    assert ets.prio_tc == (0, 0, 0, 3, 0, 5, 6, 0)
    assert ets.tc_tsa[5] == "strict" and ets.tc_tsa[6] == "strict" and ets.tc_tsa[3] == "ets"
    assert ets.tc_bw[3] + ets.tc_bw[0] == 100
    assert [(r.device, r.port, r.tos) for r in c.roce_tos] == [("*", None, 26 << 2)]


def test_the_shipped_example_is_the_default_config() -> None:
    assert load_config(EXAMPLE) == parse_config({"interfaces": ["eth0"]})


def test_a_full_config() -> None:
    c = parse_config(
        {
            "interfaces": ["eth0", "eth1"],
            "trust": "pcp",
            "classes": [
                {"name": "hi", "dscp": 46, "priority": 5, "lossless": True, "extra_dscp": [40, 41]},
                {"name": "mid", "dscp": 34, "priority": 4, "bandwidth": 60, "buffer": "1mib"},
                {"name": "lo", "dscp": 26, "priority": 3, "lossless": True, "bandwidth": 20, "rate": "5gbit"},
            ],
            "best_effort_bandwidth": 20,
            "cnp": None,
            "sysctls": {"net.ipv4.tcp_reflect_tos": 1, "net.core.somaxconn": "4096"},
            "roce_tos": [{"device": "mlx5_0", "port": 1, "class": "hi"}, {"device": "mlx5_1", "tos": 106}],
            "egress": {"rate": "25gbit", "burst": "128kb", "buffer": "8mib"},
            "dcb": "required",
            "rdma": "off",
            "ecn_priorities": [3],
        }
    )
    assert c.cnp is None and c.trust == "pcp" and c.classes[0].dscps == (46, 40, 41)
    assert c.classes[1].buffer_bytes == 1 << 20 and c.classes[2].rate_bits == 5 * 10**9
    assert c.egress.rate_bits == 25 * 10**9 and c.egress.burst_bytes == 128_000
    assert dict(c.sysctls) == {"net.ipv4.tcp_reflect_tos": "1", "net.core.somaxconn": "4096"}
    assert [(r.device, r.port, r.tos) for r in c.roce_tos] == [("mlx5_0", 1, 184), ("mlx5_1", None, 106)]


@pytest.mark.parametrize(
    ("text", "policy"),
    [
        ("off", "off"),
        ("no", "off"),
        ("false", "off"),
        ("'off'", "off"),
        ("auto", "auto"),
        ("required", "required"),
    ],
)
def test_dcb_and_rdma_off_unquoted_in_yaml(tmp_path: Path, text: str, policy: str) -> None:
    # YAML 1.1 reads off/no/false as the boolean false; that can only mean "off".
    path = tmp_path / "agent.yaml"
    path.write_text(f"interfaces: [eth0]\ndcb: {text}\nrdma: {text}\n")
    c = load_config(path)
    assert (c.dcb, c.rdma) == (policy, policy)


@pytest.mark.parametrize("text", ["on", "yes", "true"])
@pytest.mark.parametrize("key", ["dcb", "rdma"])
def test_dcb_and_rdma_true_in_yaml_is_refused_naming_the_choices(tmp_path: Path, key: str, text: str) -> None:
    # true could mean auto or required: refused, not guessed.
    path = tmp_path / "agent.yaml"
    path.write_text(f"interfaces: [eth0]\n{key}: {text}\n")
    with pytest.raises(
        ConfigError, match=rf"^.*agent\.yaml: {key}: a boolean \(True\) is ambiguous.*auto.*required"
    ):
        load_config(path)


BASE: dict[str, Any] = {"interfaces": ["eth0"]}
U = {"name": "u", "dscp": 46, "priority": 5}
B = {"name": "b", "dscp": 26, "priority": 3, "bandwidth": 50}
RX = r"roce_tos\[0\]"


def test_a_class_rate_up_to_the_egress_rate() -> None:
    c = parse_config({**BASE, "egress": {"rate": "1gbit"}, "classes": [U, {**B, "rate": "1gbit"}]})
    assert c.classes[1].rate_bits == c.egress.rate_bits == 10**9


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"classes": [{**U, "dscp": 64}]}, r"classes\[0\]\.dscp: 64 is out of range; allowed 0-63"),
        ({"classes": [{**U, "dscp": -1}]}, r"classes\[0\]\.dscp: -1 is out of range"),
        ({"classes": [{**U, "dscp": True}]}, r"classes\[0\]\.dscp: expected an integer"),
        ({"classes": [{**U, "priority": 8}]}, r"classes\[0\]\.priority: 8 is out of range; allowed 0-7"),
        ({"classes": [U, {**B, "dscp": 46}]}, r"classes\[1\]\.dscp: DSCP 46 is already used by class 'u'"),
        (
            {"classes": [{**U, "extra_dscp": [26]}, B]},
            r"classes\[1\]\.dscp: DSCP 26 is already used by class 'u'",
        ),
        (
            {"classes": [U, {**B, "priority": 5}]},
            r"classes\[1\]\.priority: priority 5 is already used by class 'u'",
        ),
        (
            {"classes": [U, {**B, "name": "u"}]},
            r"classes\[1\]\.name: 'u' is already the name of classes\[0\]",
        ),
        ({"cnp": {"dscp": 48, "priority": 3}}, r"cnp\.priority: 3 is the data priority of class 'bulk'"),
        ({"cnp": {"dscp": 46, "priority": 6}}, r"cnp\.dscp: DSCP 46 is already used by class 'urgent'"),
        ({"max_lossless": 1}, r"classes: 2 lossless classes \(urgent, bulk\) but the NIC supports 1 "),
        ({"trust": "vlan"}, r"trust: expected one of dscp, pcp"),
        ({"dcb": "maybe"}, r"dcb: expected one of auto, required, off"),
        ({"rdma": True}, r"rdma: a boolean \(True\) is ambiguous .* write auto .* or required"),
        (
            {"classes": [U, {**B, "rate": "20gbit"}]},
            r"classes\[1\]\.rate: 20 Gbit/s is above egress\.rate 10 Gbit/s; a class cannot send faster",
        ),
        ({"colour": "red"}, r"'colour': unknown key; allowed: interfaces, classes"),
        ({"classes": [{**U, "weight": 3}]}, r"classes\[0\]\.'weight': unknown key"),
        ({"egress": {"rate": "10g"}}, r"egress\.rate: '10g' is not a rate"),
        ({"egress": {"rate": "10GBps"}}, r"egress\.rate: .*bytes per second"),
        ({"egress": {"buffer": "12"}}, r"egress\.buffer: 12 is out of range"),
        ({"egress": {"limit": 3}}, r"egress\.'limit': unknown key"),
        ({"interfaces": []}, r"interfaces: must list at least one interface"),
        ({"interfaces": ["eth0", "eth0"]}, r"interfaces\[1\]: 'eth0' is listed twice"),
        ({"interfaces": ["a/b"]}, r"interfaces\[0\]: .* is not an interface name"),
        ({"interfaces": "eth0"}, r"interfaces: expected a list"),
        ({"interfaces": None}, r"interfaces: required"),
        ({"classes": []}, r"classes: 0 classes; allowed 1-8"),
        ({"classes": [{"name": "u", "priority": 5}]}, r"classes\[0\]\.dscp: required"),
        ({"classes": [{**U, "bandwidth": 10}]}, r"classes\[0\]\.bandwidth: only for tsa: ets"),
        ({"best_effort_bandwidth": 10}, r"bandwidth: the ETS shares must sum to 100 percent, got 60"),
        ({"sysctls": {"../etc/passwd": 1}}, r"sysctls\.\.\./etc/passwd: only network sysctls"),
        (
            {"sysctls": {"kernel.core_pattern": "|/tmp/x"}},
            r"sysctls\.kernel\.core_pattern: only network sysctls",
        ),
        (
            {"sysctls": {"net.ipv4/../../kernel.x": 1}},
            r"sysctls\.net\.ipv4/\.\./\.\./kernel\.x: not a sysctl name",
        ),
        ({"sysctls": {"net..ipv4": 1}}, r"sysctls\.net\.\.ipv4: not a sysctl name"),
        ({"roce_tos": [{"device": "..", "tos": 1}]}, RX + r"\.device: expected an RDMA device name"),
        ({"roce_tos": [{"device": ".", "tos": 1}]}, RX + r"\.device: expected an RDMA device name"),
        ({"roce_tos": [{"device": "a/b", "tos": 1}]}, RX + r"\.device: expected an RDMA device name"),
        ({"interfaces": [".."]}, r"interfaces\[0\]: .* is not an interface name"),
        ({"sysctls": {"net.core.somaxconn": "1\n2"}}, r"sysctls\.net\.core\.somaxconn: expected a number"),
        ({"roce_tos": [{"device": "mlx5_0", "tos": 300}]}, RX + r"\.tos: 300 is out of range; allowed 0-255"),
        (
            {"roce_tos": [{"device": "mlx5_0", "class": "x"}]},
            RX + r"\.class: .* is not a class; allowed: urgent, bulk",
        ),
        ({"roce_tos": [{"device": "mlx5_0"}]}, RX + r": give exactly one of tos"),
        ({"unmatched": "best"}, r"unmatched: a string \('best'\) is not a class; allowed: urgent, bulk"),
        ({"unmatched": 1}, r"unmatched: .* is not a class; allowed: urgent, bulk"),
        ({"ecn_priorities": [9]}, r"ecn_priorities\[0\]: 9 is out of range"),
    ],
)
def test_bad_input_names_the_field(patch: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({**BASE, **patch}, where="agent.yaml")
    with pytest.raises(ConfigError, match=r"^agent\.yaml: "):
        parse_config({**BASE, **patch}, where="agent.yaml")


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("interfaces: [eth0\nclasses: 3\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: malformed YAML \(line \d+, column \d+\)"):
        load_config(bad)
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match=r"\(top level\): expected a mapping, got a list"):
        load_config(bad)
    bad.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(bad)


# -- fuzz -----------------------------------------------------------------------------------------

_keys = st.sampled_from(
    ["interfaces", "classes", "name", "dscp", "priority", "lossless", "cnp", "trust", "egress", "rate",
     "buffer", "sysctls", "roce_tos", "tos", "device", "port", "extra_dscp", "max_lossless", "bandwidth",
     "tsa", "ecn_priorities", "best_effort_bandwidth", "dcb", "rdma", "enabled", "class", "x"]
) | st.text(max_size=8)  # fmt: skip
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(string.printable, max_size=12)
    | st.sampled_from(["eth0", "lo", "10gbit", "1mib", "strict", "ets", "dscp", "*", "urgent"])
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=5),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=6))
def test_fuzz_mappings_raise_only_config_error(data: dict[Any, Any]) -> None:
    try:
        parse_config(data)
    except ConfigError as e:
        assert str(e).startswith("config: ")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200) | _values.map(lambda v: yaml.safe_dump(v, default_flow_style=True)))
def test_fuzz_yaml_text_raises_only_config_error(text: str) -> None:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", encoding="utf-8", errors="surrogatepass") as fh:
        fh.write(text)
        fh.flush()
        try:
            config = load_config(fh.name)
        except ConfigError:
            return
    assert isinstance(config, AgentConfig)


@pytest.fixture(scope="module")
def ns() -> Iterator[VethNs]:
    with veth_ns(1, prefix="gcf") as v:
        yield v


_near_valid = st.fixed_dictionaries(
    {"interfaces": st.sampled_from([["ga0"], ["ga0", "ga0"], ["nosuch9"], "ga0", [], ["ga0", 3]])},
    optional={
        "classes": st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["u", "b", "u"]), "dscp": st.integers(-2, 66)},
                optional={
                    "priority": st.integers(-1, 9),
                    "lossless": st.booleans(),
                    "bandwidth": st.integers(0, 120),
                },
            ),
            max_size=3,
        ),
        "cnp": st.none() | st.fixed_dictionaries({"dscp": st.integers(0, 64), "priority": st.integers(0, 8)}),
        "max_lossless": st.integers(-1, 9),
        "egress": st.fixed_dictionaries({}, optional={"rate": st.sampled_from(["1gbit", "10g", 0, "x"])}),
        "bogus": st.integers(),
    },
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_near_valid)
def test_fuzz_rejected_configs_apply_nothing(
    ns: VethNs, tmp_path_factory: pytest.TempPathFactory, data: dict
) -> None:
    """`geryon agent apply` on each config: a rejected one exits 2 and leaves the namespace untouched."""
    d = tmp_path_factory.mktemp("fz")
    path = d / "agent.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        parse_config(yaml.safe_load(path.read_text()))
        valid = True
    except ConfigError:
        valid = False
    if valid and data.get("interfaces") == ["ga0"]:
        return  # a valid config would apply; this test is about rejections
    rc = main(
        [
            "agent",
            "apply",
            "--config",
            str(path),
            "--netns",
            ns.name,
            "--journal",
            str(d / "j.json"),
            "--quiet",
        ]
    )
    assert rc == 2
    assert root_qdisc(ns.name, "ga0")["kind"] == "noqueue"
    assert read_sysctl(ns.name, "net.ipv4.tcp_reflect_tos") == "0"
    assert not (d / "j.json").exists()
