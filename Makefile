VENV  := .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install train test test-all bench results clean

$(STAMP): pyproject.toml scripts/install.sh
	bash scripts/install.sh
	touch $(STAMP)

install: $(STAMP)

train: $(STAMP)
	$(PY) train.py $(ARGS)

# a worker per core (pytest-xdist); tests that share a module's expensive runs name an xdist_group
XDIST := -n auto --dist loadgroup

test: $(STAMP)
	$(PY) -m pytest $(XDIST) -m "not slow" --durations=15 $(ARGS)

test-all: $(STAMP)
	$(PY) -m pytest $(XDIST) $(ARGS)

bench: $(STAMP)
	$(PY) -m benchmarks $(ARGS)

results: $(STAMP)
	$(PY) -m dpgen.report docs/results --out docs/

clean:
	rm -rf outputs multirun .pytest_cache
