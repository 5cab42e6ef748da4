"""The geryon_agent role installs a wheel built from the checkout (geryon_agent_wheel), as on a
training host: the wheel copied to the host, pip-installed into the venv with its extras, then
`geryon native build`; a second run changes nothing, and a rebuilt wheel of the same version is
installed again.

The host is this machine (local connection), every path in a temporary folder. The venv is made here
first with a `.pth` line naming the site-packages of this environment's TensorFlow and agent
dependencies, as tests/tf/test_wheel_install.py does and says why: pip then finds the extras'
requirements satisfied (no index, no 1.6 GB install), and `geryon native build` finds the library the
checkout's tests built (the same TF, byte-identical sources: the same cache key).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import time
import zipfile
from pathlib import Path

import pytest
import yaml
from deploy.rollout import ANSIBLE_DIR, failures, playbook, results
from wheel_build import build_wheel
from wheel_build import run as _run

ROLE = "geryon_agent : "
COPY = ROLE + "Copy the geryon wheel to the host"
INSTALL = ROLE + "Install the geryon package into its virtual environment"
REINSTALL = ROLE + "Reinstall geryon from a changed wheel"
NATIVE = ROLE + "Build the native extension against the installed TensorFlow (geryon native build)"


@pytest.mark.slow
def test_the_role_installs_a_built_wheel_and_builds_the_native_extension(tmp_path: Path) -> None:
    from geryon.tf.build import plan

    venv, wheels = tmp_path / "venv", tmp_path / "host-wheels"
    started = time.monotonic()
    wheel = build_wheel(tmp_path)
    print(f"wheel: {time.monotonic() - started:.0f} s")
    # The host's venv, with the deps of this environment on its path (see the module docstring).
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    show_site = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(_run([str(python), "-c", show_site], cwd=tmp_path).strip())
    tf = importlib.util.find_spec("tensorflow")
    assert tf is not None and tf.origin is not None
    print(f"venv: {time.monotonic() - started:.0f} s")
    (site / "zz_test_environment.pth").write_text(f"{Path(tf.origin).parents[1]}\n")

    variables = {
        "geryon_agent_wheel": str(wheel),
        "geryon_agent_wheel_dir": str(wheels),
        "geryon_agent_wheel_extras": ["agent", "tf"],
        "geryon_agent_venv": str(venv),
        "geryon_agent_bin_link": "",
        "geryon_agent_native_build": True,
        "geryon_agent_manage_service": False,
        "geryon_agent_config_path": str(tmp_path / "etc" / "agent.yaml"),
        "geryon_agent_config": {"interfaces": ["eth0"]},
    }
    inventory = tmp_path / "inventory.yml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **variables}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"host": host}}}))
    site_yml = tmp_path / "agent.yml"
    play = {"name": "agent", "hosts": "all", "gather_facts": False, "roles": [{"role": "geryon_agent"}]}
    site_yml.write_text(yaml.safe_dump([play]))
    env = {"ANSIBLE_ROLES_PATH": str(ANSIBLE_DIR / "roles")}

    def run(*args: str) -> dict:
        started = time.monotonic()
        doc = playbook(tmp_path, inventory, *args, timeout=600, env=env, site=site_yml)
        print(f"playbook run: {time.monotonic() - started:.0f} s")
        assert doc["rc"] == 0, failures(doc) or doc["stderr"]
        return doc

    # Check mode first: the plan shows, nothing is copied or installed, nothing is built.
    doc = run("--check", "--diff")
    assert results(doc, COPY)["host"]["changed"] and results(doc, REINSTALL)["host"]["changed"]
    assert results(doc, NATIVE)["host"].get("skipped") and not wheels.exists()
    assert not list(site.glob("geryon*"))

    doc = run()
    assert results(doc, COPY)["host"]["changed"] and (wheels / wheel.name).read_bytes() == wheel.read_bytes()
    # Here the checkout's own geryon 0.1.0 (its editable install beside TF) is on the venv's path, so the
    # install task finds "geryon 0.1.0 already installed", as on a host with an older build of the same
    # version: the reinstall of the new copy puts the wheel's geryon into the venv.
    assert results(doc, REINSTALL)["host"]["changed"]
    where = _run([str(python), "-c", "import geryon; print(geryon.__file__)"], cwd=tmp_path).strip()
    assert Path(where).is_relative_to(venv)
    native = results(doc, NATIVE)["host"]
    assert native["stdout"].strip() == str(plan().output)  # the checkout's key: same TF, same sources
    assert native["changed"] == ("building" in native["stderr"])
    # The config was validated by the venv's own geryon and written.
    assert yaml.safe_load((tmp_path / "etc" / "agent.yaml").read_text()) == {"interfaces": ["eth0"]}

    # Again: nothing to do (the library is cached, the wheel is the same).
    doc = run()
    assert not results(doc, COPY)["host"]["changed"] and not results(doc, INSTALL)["host"]["changed"]
    assert results(doc, REINSTALL)["host"].get("skipped")
    assert not results(doc, NATIVE)["host"]["changed"]

    # A rebuilt wheel of the same version: pip alone would keep the installed one.
    rebuilt = tmp_path / "rebuilt" / wheel.name
    rebuilt.parent.mkdir()
    shutil.copy(wheel, rebuilt)
    with zipfile.ZipFile(rebuilt, "a") as z:
        z.writestr("geryon/_rebuilt.json", json.dumps({"rebuilt": True}))
    host.update(geryon_agent_wheel=str(rebuilt), geryon_agent_native_build=False)  # built above already
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"host": host}}}))
    doc = run()
    assert results(doc, COPY)["host"]["changed"] and results(doc, REINSTALL)["host"]["changed"]
    assert (Path(where).parent / "_rebuilt.json").exists()
