"""Fuzzing the config loader's strict YAML layer (geryon.fields.load_yaml via load_config): whatever the
text, the loader answers with an AgentConfig or a ConfigError (never another exception), and each
construct YAML 1.1 would silently reinterpret is refused wherever it appears, naming line and column."""

from __future__ import annotations

import re
import tempfile

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from geryon.agent.config import AgentConfig, ConfigError, load_config

VALID = "interfaces: [eth0]\nclasses:\n"
VALID += "  - {name: u, dscp: 46, priority: 5}\n  - {name: b, dscp: 26, priority: 3}\n"


def load_text(text: str) -> AgentConfig:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", encoding="utf-8", errors="surrogatepass") as fh:
        fh.write(text)
        fh.flush()
        return load_config(fh.name)


_tokens = st.sampled_from(
    ["interfaces", "classes", "dscp", ":", " ", "\n", "  ", "- ", "[", "]", "{", "}", ",", "&a ", "*a",
     "<<", "046", "0x1f", "0b1", "1:20", "1_0", "!!int ", "!!python/object ", "'", '"', "#", "eth0", "5",
     "true", "off", "~", "---", "...", "? ", "|", ">"]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(_tokens, max_size=40).map("".join))
def test_token_soup_gives_a_config_or_a_config_error(text: str) -> None:
    try:
        cfg = load_text(text)
    except ConfigError as e:
        assert "Traceback" not in str(e)
        return
    assert isinstance(cfg, AgentConfig)


_surprises = st.sampled_from(["046", "0o17", "0x2e", "0b101110", "1:20", "1_000", "190:20:30.15"])


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["dscp", "priority", "tos", "max_lossless"]), _surprises, st.integers(0, 3))
def test_yaml11_numbers_are_refused_wherever_they_appear(field: str, number: str, where: int) -> None:
    texts = [
        f"interfaces: [eth0]\nclasses: [{{name: u, {field}: {number}, priority: 5, dscp: 1}}]\n",
        f"interfaces: [eth0]\ncnp: {{dscp: {number}, priority: 6}}\n",
        f"interfaces: [eth0]\nroce_tos: [{{device: mlx5_0, tos: {number}}}]\n",
        f"interfaces: [eth0]\n{field}: {number}\n",
    ]
    text = texts[where]
    try:
        load_text(text)
    except ConfigError as e:
        # 0o17 is a plain string in YAML 1.1 (no octal 0o form): then the field check refuses it instead
        assert "refused YAML (line" in str(e) or number == "0o17", str(e)
        return
    raise AssertionError(f"accepted {text!r}")


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(VALID.splitlines()[:2]), st.integers(0, 4))
def test_a_repeated_top_level_key_is_always_refused(line: str, extra_blank_lines: int) -> None:
    text = VALID + "\n" * extra_blank_lines + line + "\n"
    try:
        load_text(text)
    except ConfigError as e:
        key = line.split(":", 1)[0]
        assert re.search(rf"line \d+, column 1: duplicate key '{key}'", str(e)), str(e)
        return
    raise AssertionError("a duplicate key was accepted")


@settings(max_examples=60, deadline=None)
@given(
    st.recursive(
        st.integers(0, 9) | st.text("abc", max_size=3), lambda x: st.lists(x, max_size=2), max_leaves=8
    )
)
def test_aliases_anywhere_are_refused(value: object) -> None:
    # yaml.dump of a value that holds the same list twice writes an anchor and an alias
    shared = [value]
    text = "interfaces: [eth0]\n" + yaml.safe_dump({"x": [shared, shared]}, default_flow_style=False)
    try:
        load_text(text)
    except ConfigError as e:
        assert "anchors and aliases" in str(e) or "unknown key" in str(e)
        if "&" in text:
            assert "anchors and aliases" in str(e)
        return
    raise AssertionError("accepted")
