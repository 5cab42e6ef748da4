"""The `geryon` command on a host without TensorFlow (a switch-rollout host installs plain `geryon`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# Makes `import tensorflow` (and keras) fail in the child, as on a host where they are not installed.
_NO_TF = "import sys; sys.modules['tensorflow'] = None; sys.modules['keras'] = None; "


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _NO_TF + code], capture_output=True, text=True, timeout=60)


def test_core_modules_import_without_tensorflow() -> None:
    r = _python(
        "import geryon.cli, geryon.tagger, geryon.tagger.partition, geryon.tagger.map_table; "
        "import geryon.tagger.dag; print('ok')"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_tag_without_tensorflow_says_what_to_install() -> None:
    r = _python(
        "from geryon.cli import main; raise SystemExit(main(['tag', '--model', 'alexnet', '--quiet']))"
    )
    assert r.returncode == 2
    assert "pip install 'geryon[tf]'" in r.stderr
    assert "Traceback" not in r.stderr


def test_bootstrap_is_skipped_when_the_venv_is_up_to_date() -> None:
    # The suite runs after `make test` bootstrapped .venv, so its stamp must be fresh: a second
    # `make demo` or `make test` installs nothing.
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run(["make", "-q", "venv"], cwd=root, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, "make would re-run scripts/bootstrap.sh: the .venv stamp is stale"
