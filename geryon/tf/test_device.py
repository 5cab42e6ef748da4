"""The GERYONTEST PluggableDevice (native/test_device): a non-CPU TF device for tests without a GPU.

Its memory is host memory, but to TensorFlow it is an accelerator like a GPU: tensors placed on it
live in its allocator's memory and every host<->device copy goes through its DeviceContext, so the
data plane's device path runs for real. Load it in every process that must have the device, before
that process creates its TF server or eager context.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

from geryon.tf.build import build_test_device

__all__ = ["DEVICE_TYPE", "counters", "load"]

DEVICE_TYPE = "GERYONTEST"
_lock = threading.Lock()
_cdll: ctypes.CDLL | None = None


def load(library: Path | None = None) -> Path:
    """Builds (if needed) and registers the device with TensorFlow, once per process."""
    global _cdll
    with _lock:
        path = Path(library) if library is not None else build_test_device()
        if _cdll is None:
            from geryon.tfenv import import_tensorflow

            import_tensorflow()
            # Not exported under tf.*; it is what tf.load_library's pluggable-device sibling calls.
            from tensorflow.python.framework.load_library import load_pluggable_device_library

            load_pluggable_device_library(str(path))
            _cdll = ctypes.CDLL(str(path))
            _cdll.geryon_test_device_counter_names.restype = ctypes.c_char_p
            _cdll.geryon_test_device_counters.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int]
        return path


def counters() -> dict[str, int]:
    """Copies the device made in this process: htod/dtoh (count and bytes), allocations, injected failures."""
    if _cdll is None:
        raise RuntimeError("the GERYONTEST device is not loaded in this process (geryon.tf.test_device.load)")
    names = _cdll.geryon_test_device_counter_names().decode().split(",")
    values = (ctypes.c_int64 * len(names))()
    _cdll.geryon_test_device_counters(values, len(names))
    return dict(zip(names, (int(v) for v in values), strict=True))
