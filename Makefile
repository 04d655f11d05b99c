VENV  := .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install train test test-all bench clean

$(STAMP): pyproject.toml scripts/install.sh
	bash scripts/install.sh
	touch $(STAMP)

install: $(STAMP)

train: $(STAMP)
	$(PY) train.py $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -m "not slow" $(ARGS)

test-all: $(STAMP)
	$(PY) -m pytest $(ARGS)

bench: $(STAMP)
	$(PY) -m benchmarks $(ARGS)

clean:
	rm -rf outputs multirun .pytest_cache
