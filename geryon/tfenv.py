"""Importing TensorFlow for the CLI without its start-up chatter.

TF 2.21 prints its oneDNN and CPU-feature notices from C++ before absl logging is initialised, so
TF_CPP_MIN_LOG_LEVEL does not silence them. The CLI captures file descriptor 2 during the import and
replays every line that is not one of those known notices, so real warnings and errors still show.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from types import ModuleType

from geryon.errors import UsageError

_NOISE = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called"
    r"|oneDNN custom operations are on"
    r"|This TensorFlow binary is optimized to use available CPU instructions"
    r"|To enable the following instructions:.*rebuild TensorFlow"
    r"|Unable to register cu(DNN|FFT|BLAS) factory"
    r"|computation placer already registered"
)


def import_tensorflow() -> ModuleType:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    loaded = sys.modules.get("tensorflow")
    if loaded is not None:
        return loaded
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            import keras  # noqa: F401  (Keras 3 prints its own notices on first import)
            import tensorflow as tf
        except ImportError as e:
            raise UsageError(f"this command needs TensorFlow ({e}): pip install 'geryon[tf]'") from None
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            for line in capture.read().decode(errors="replace").splitlines():
                if line.strip() and not _NOISE.search(line):
                    print(line, file=sys.stderr)
    return tf
