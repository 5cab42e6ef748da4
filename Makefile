# The two commands of the README: `make demo` (the main job) and `make test` (the whole suite).
# Both create or update .venv first; a second run skips the install because the stamp is fresh.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.geryon-installed

.PHONY: demo test lint venv clean

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

test: lint
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
