# The two commands of the README: `make demo` (the main job) and `make test` (the whole suite);
# `make check` is the fast inner loop.
# Both create or update .venv first; a second run skips the install because the stamp is fresh.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.geryon-installed

.PHONY: demo test check lint native cpp-test venv clean tf-ps-tests tf-ps-tests-fast sanitize sanitize-long

venv: $(STAMP)

$(STAMP): pyproject.toml scripts/bootstrap.sh
	VENV=$(VENV) scripts/bootstrap.sh
	@touch $@

demo: $(STAMP)
	$(VENV)/bin/geryon demo

lint: $(STAMP)
	$(VENV)/bin/ruff check geryon tests bench
	$(VENV)/bin/ruff format --check geryon tests bench
	$(VENV)/bin/mypy geryon

# The native build first, on every core, with its progress on the terminal: the tests that need the
# library then find it in the cache instead of each waiting for it inside its own timeout.
native: $(STAMP)
	$(VENV)/bin/geryon native build

# The C++ unit tests of the rendezvous' pure parts (native/rendezvous/README.md, "C++ unit tests"):
# built without TensorFlow against Debian's libgtest-dev, cached by source hash. `make test` runs
# them too (tests/tf/test_cpp_unit.py).
cpp-test: $(STAMP)
	$(PY) -m geryon.tf.cpp_tests $(GTEST_ARGS)

# The whole suite on TEST_WORKERS pytest-xdist workers (tests/conftest.py: each module runs whole on
# one worker, so its module fixtures are set up once; the longest modules start first).
# TEST_WORKERS=0: one process. The default is one more worker than cores (at most 8): the TF tests
# wait on their processes' start, sockets and timeouts, so with one worker a core the 2-core machine
# was busy 1.4 cores on average; with 3 workers 1.8 (bench/results/2026-12-04-make-test-workers.md).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 7 ] && n=7; echo $$((n + 1)))
test: lint native
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS)

# The inner loop while editing: lint, types and the unit tier (tests/conftest.py, tests/README.md),
# under 3 minutes. A tier alone: make test PYTEST_ARGS="-m tf" (unit, tf, netns, external, sanitizer).
check: lint
	$(PY) -m pytest -q -m "unit and not slow" $(PYTEST_ARGS)

# TensorFlow's own PS tests (../shared/vendor/tf-ps-tests) on grpc and grpc+geryon, test by test:
# table on stdout, JSON in out/bench/tf_ps_tests.json. The fast subset also runs in `make test`
# (tests/tf/test_tf_ps_tests.py); the whole set takes over an hour here, so it is nightly-style.
tf-ps-tests: $(STAMP)
	PYTHONPATH=$(CURDIR) $(PY) bench/tf_ps_tests.py

tf-ps-tests-fast: $(STAMP)
	PYTHONPATH=$(CURDIR) $(PY) bench/tf_ps_tests.py --subset fast

# The native extension under AddressSanitizer and ThreadSanitizer (native/rendezvous/README.md,
# "Sanitizers"). `sanitize` is the representative subset; `make test` (CI) runs its core four;
# `sanitize-long` runs all of tests/tf under each sanitizer (about an hour on two cores).
sanitize: $(STAMP)
	GERYON_SANITIZE_FULL=1 $(PY) -m pytest -q tests/tf/test_sanitizers.py

sanitize-long: $(STAMP)
	$(PY) -m geryon.tf.sanitizers thread tests/tf
	$(PY) -m geryon.tf.sanitizers address tests/tf

clean:
	rm -rf $(VENV) build *.egg-info
