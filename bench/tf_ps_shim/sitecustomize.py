"""Loaded by every Python process that has this folder on PYTHONPATH (Python imports `sitecustomize`
at start-up), so also by the servers TensorFlow's multi_process_runner spawns. Used by
bench/tf_ps_tests.py to run TensorFlow's own PS tests unchanged on another rpc layer.

GERYON_TF_RPC_LAYER=grpc+geryon: TF's tests ask for rpc_layer "grpc" explicitly, so every ServerDef
that says "grpc" (servers: server_lib._make_server_def; the coordinator's eager context:
Context.set_server_def / update_server_def, which remote.connect_to_cluster calls) is switched to
"grpc+geryon", after geryon.tf.load() registered that protocol in this process.

GERYON_TF_PS_RESULTS=path: every test's start and outcome is appended to that file as one JSON line
(unittest.TestResult is patched), so the runner knows which test was running when it had to kill a
hung process, and the outcomes do not depend on parsing TF's interleaved log output.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import time
from typing import Any

_LAYER = os.environ.get("GERYON_TF_RPC_LAYER", "")
_RESULTS = os.environ.get("GERYON_TF_PS_RESULTS", "")


_flows_recorded = False


def _record_flows() -> None:
    """At exit: how many tensors this process moved on Geryon's flows, so the runner can show that
    the data plane carried the tests' tensors (not TF's gRPC). Processes killed by SIGKILL (the
    servers multi_process_runner terminates) do not get here."""
    import geryon.tf

    flows = geryon.tf.flow_counters()
    consumer = [f for f in flows if f.role == "consumer"]
    _write(
        {
            "event": "flows",
            "pid": os.getpid(),
            "t": time.time(),
            "messages_received": sum(f.messages_received for f in consumer),
            "bytes_received": sum(f.bytes_received for f in consumer),
            "errors": sum(f.errors for f in flows),
        }
    )


def _switch(server_def: Any) -> Any:
    global _flows_recorded
    if _LAYER and server_def is not None and server_def.protocol == "grpc":
        import geryon.tf

        geryon.tf.load()
        server_def.protocol = _LAYER
        if _RESULTS and not _flows_recorded:
            import atexit

            atexit.register(_record_flows)
            _flows_recorded = True
    return server_def


def _patch_server_lib(module: Any) -> None:
    original = module._make_server_def

    def make_server_def(*args: Any, **kwargs: Any) -> Any:
        return _switch(original(*args, **kwargs))

    module._make_server_def = make_server_def


def _patch_context(module: Any) -> None:
    for name in ("set_server_def", "update_server_def"):
        original = getattr(module.Context, name)

        def patched(self: Any, server_def: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            return _original(self, _switch(server_def), *args, **kwargs)

        setattr(module.Context, name, patched)


_PATCHES = {
    "tensorflow.python.training.server_lib": _patch_server_lib,
    "tensorflow.python.eager.context": _patch_context,
}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any, patch: Any) -> None:
        self._inner, self._patch = inner, patch

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        self._patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, patch)
        return spec


def _write(record: dict[str, Any]) -> None:
    # One short write per line in append mode: lines of concurrent processes do not interleave.
    with open(_RESULTS, "a") as f:
        f.write(json.dumps(record) + "\n")


def _record(event: str, test: Any, detail: str = "") -> None:
    _write({"event": event, "test": test.id(), "t": time.time(), "pid": os.getpid(), "detail": detail})


def _patch_unittest() -> None:
    import unittest

    result = unittest.TestResult
    start, success, failure, error, skip = (
        result.startTest,
        result.addSuccess,
        result.addFailure,
        result.addError,
        result.addSkip,
    )
    xfail, xpass = result.addExpectedFailure, result.addUnexpectedSuccess

    def start_test(self: Any, test: Any) -> None:
        _record("start", test)
        start(self, test)

    def add_success(self: Any, test: Any) -> None:
        _record("pass", test)
        success(self, test)

    def add_failure(self: Any, test: Any, err: Any) -> None:
        _record("fail", test, str(err[1])[:2000])
        failure(self, test, err)

    def add_error(self: Any, test: Any, err: Any) -> None:
        # setUpClass errors come as a _ErrorHolder whose id() names the class.
        _record("error", test, f"{err[0].__name__}: {str(err[1])[:2000]}")
        error(self, test, err)

    def add_skip(self: Any, test: Any, reason: str) -> None:
        _record("skip", test, reason)
        skip(self, test, reason)

    def add_xfail(self: Any, test: Any, err: Any) -> None:
        _record("pass", test, "expected failure")
        xfail(self, test, err)

    def add_xpass(self: Any, test: Any) -> None:
        _record("fail", test, "unexpected success")
        xpass(self, test)

    result.startTest = start_test  # type: ignore[method-assign]
    result.addSuccess = add_success  # type: ignore[method-assign]
    result.addFailure = add_failure  # type: ignore[method-assign]
    result.addError = add_error  # type: ignore[method-assign]
    result.addSkip = add_skip  # type: ignore[method-assign]
    result.addExpectedFailure = add_xfail  # type: ignore[method-assign]
    result.addUnexpectedSuccess = add_xpass  # type: ignore[method-assign]


if _LAYER:
    sys.meta_path.insert(0, _Finder())
if _RESULTS:
    _patch_unittest()
