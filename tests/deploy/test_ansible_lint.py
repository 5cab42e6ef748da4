"""deploy/ansible is ansible-lint clean under the production profile, and site.yml parses."""

from __future__ import annotations

import os
import subprocess

from deploy.rollout import ANSIBLE_DIR, BIN


def test_ansible_lint_production_profile(tmp_path):
    path = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "ANSIBLE_HOME": str(tmp_path), "NO_COLOR": "1"}
    r = subprocess.run(
        [str(BIN / "ansible-lint"), "--profile", "production", "--offline", "--nocolor"],
        cwd=ANSIBLE_DIR, capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Profile 'production' was required, and it passed" in r.stderr + r.stdout
