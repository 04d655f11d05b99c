VENV  := .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install train test test-all bench results clean

$(STAMP): pyproject.toml scripts/install.sh
	bash scripts/install.sh
	touch $(STAMP)

install: $(STAMP)

# The best measured private generator within 10 minutes on 2 CPU cores (README): the comparison cell of DP-MERF with
# a guide on MNIST at eps = 1, its downstream CNN trained 4 epochs instead of 10 (in DP-MERF's kept MNIST runs the
# test accuracy no longer rose after epoch 4) and without IS / FID (they leave the accuracies as they are and would
# first train their own classifier). ARGS adds overrides, e.g. make train ARGS="privacy.epsilon=10".
TRAIN := experiment=dpmerf/mnist_eps1_guide eval.callbacks.downstream.max_epochs=4 eval.callbacks.image_quality=null

train: $(STAMP)
	$(PY) train.py $(TRAIN) $(ARGS)

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
