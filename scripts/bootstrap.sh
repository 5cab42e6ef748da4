#!/usr/bin/env bash
# Creates or updates the project's virtual environment (.venv) with everything the demo and the
# tests need. Idempotent: the Makefile only calls it when pyproject.toml or this script changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "bootstrap: Geryon needs Python >= 3.11; '$PYTHON' is $("$PYTHON" --version 2>&1 || echo missing)." >&2
  echo "bootstrap: set PYTHON=/path/to/python3.11 and run again." >&2
  exit 2
fi

# Debian's system Python ships venv separately; install it only when it is missing.
if ! "$PYTHON" -m venv --help >/dev/null 2>&1; then
  echo "bootstrap: installing python3-venv (apt)" >&2
  apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
fi

# Debian packages: g++ builds the native rendezvous against TF; Prometheus (server and promtool)
# scrapes the agent and checks the alert rules in the tests; headless Chromium and its driver load the
# agent's status page in the tests; yanglint (libyang 2) validates rendered SONiC configs against
# SONiC's YANG models in the tests; GoogleTest (libgtest-dev: headers and prebuilt static libraries)
# builds the native rendezvous' C++ unit tests (make cpp-test); etcd (etcd-server, 3.4) holds the cluster
# view of jobs and their bands (geryon.jobs), started by the tests and the demo.
missing=()
command -v "${CXX:-g++}" >/dev/null 2>&1 || missing+=(g++)
{ [ -f /usr/include/gtest/gtest.h ] && ls /usr/lib/*/libgtest.a >/dev/null 2>&1; } || missing+=(libgtest-dev)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v yanglint >/dev/null 2>&1 || missing+=(libyang2-tools)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing ${missing[*]} (apt)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "bootstrap: warning: ${missing[*]} missing and cannot apt-get install as non-root; tests that need it skip" >&2
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi

echo "bootstrap: installing geryon[tf,agent,demo,deploy,dev,dashboard,plan] into $VENV (TensorFlow is about 1.6 GB the first time)" >&2
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[tf,agent,demo,deploy,dev,dashboard,plan]"
# Keras 2 (TF's PS tutorial's model.fit with TF_USE_LEGACY_KERAS): the tests train through it. Without
# its dependencies: it requires `tensorflow`, and pip would put the full package over tensorflow-cpu.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "tf-keras==2.21.0"
echo "bootstrap: ready" >&2
