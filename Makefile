# Thin wrappers around `python -m keras_course_recipes`; the first target that needs Python
# creates .venv and installs the pinned dependencies.
#   make recipe NAME=mnist_mlp ARGS="execution.mode=xla train.epochs=2"
#   make sweep NAME=densenet_cifar10 GRID="model.growth_rate=[12,24] train.lr=[0.05,0.1]"
#   make setup GPU=1        # TensorFlow's GPU build instead of the CPU one

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
# GPU=1 selects the GPU build; without GPU=, keep whichever build is installed.
ifeq ($(GPU),)
GPU := $(if $(wildcard $(VENV)/.installed-gpu),1,0)
endif
BUILD := $(if $(filter 1,$(GPU)),gpu,cpu)
OTHER_TF := $(if $(filter 1,$(GPU)),tensorflow-cpu,tensorflow)
INSTALLED := $(VENV)/.installed-$(BUILD)
export TF_CPP_MIN_LOG_LEVEL ?= 1

.PHONY: help setup list show recipe notebooks wheel copy anchor tfds-to-folder sweep compare compare-sizes benchmark benchmark-backends results benchmark-lessons preview benchmark-augment benchmark-data benchmark-distributed memory recipe-multiworker curves graph profile soak battery test test-fast test-slow test-benchmarks tensorboard clean

help:
	@echo "make recipe NAME=<recipe> [ARGS=\"key=value ...\"]  train a recipe (make list: which)"
	@echo "make notebooks                                     notebooks/<recipe>.ipynb, written from each recipe's file"
	@echo "make wheel                                         dist/*.whl: the kit, to pip install elsewhere (Colab)"
	@echo "make copy NAME=<recipe> DIR=<folder>               the recipe and the kit's files it imports, copied into a folder"
	@echo "make anchor SCRIPT=<airbench94*.py> DATA=<cifar10> [RUNS=3]  cifar10-airbench beside the recipe, this CPU"
	@echo "make tfds-to-folder DATASET=cifar10 DIR=<folder>   tfds' train and test splits as PNG folders (needs a network)"
	@echo "make recipe-multiworker NAME=<recipe> [WORKERS=2] [ARGS=...] train on N local worker processes"
	@echo "make sweep NAME=<recipe> GRID=\"k=[a,b] ...\" [ARGS=...] every combination, with a results table"
	@echo "    ... ONE_AT_A_TIME=1                             or each value alone, from the recipe's settings"
	@echo "make curves RUNS=\"runs/NAME/<timestamp> ...\"        PNG: validation accuracy against training time"
	@echo "make compare NAME=<recipe> [ARGS=\"modes=... steps=N repeats=N\"] time each execution mode"
	@echo "make compare-sizes NAME=<recipe> [ARGS=...]        the same at four model sizes, with a plot"
	@echo "make benchmark                                     fit's overhead and input wait, per recipe module"
	@echo "make results                                       the tables and the plot of measured figures, from results/*.csv"
	@echo "make benchmark-backends [SCRIPT=airbench94_muon.py] [ARGS=...]  densenet_cifar10_cpu's step on each backend"
	@echo "make benchmark-lessons                             the tf.function lessons' timings"
	@echo "make preview NAME=<recipe> [ARGS=...]              PNG of training images before/after augmentation"
	@echo "make benchmark-augment [NAME=<recipe>]             augmentation images/s; training on host vs device"
	@echo "make benchmark-data NAME=<recipe> [ARGS=...]       the input pipeline's images/s, without training"
	@echo "make memory NAME=revnet_cifar10 [ARGS=...]         peak memory of a training step per backprop and depth"
	@echo "make benchmark-distributed [NAME=...] [DEVICES=cpu:2] images/s without and with MirroredStrategy"
	@echo "make graph NAME=<recipe> [ARGS=...]                training-step graph for TensorBoard, no training"
	@echo "make profile NAME=<recipe> [ARGS=...]              where a training step's time goes, by kind of op"
	@echo "make soak [NAME=mnist_mlp] [KILLS=20] [ARGS=...]    kill -9 a training N times, resume each; what survived"
	@echo "make battery [ARGS=\"--only 1,5 --out FILE.md\"]     bad inputs and faults a user could hit: a table"
	@echo "make show NAME=<recipe> [ARGS=...]                 print its resolved config"
	@echo "make list                                          every recipe"
	@echo "make test                                          the offline test suite: test-fast, then test-slow (installs PyTorch's CPU build first)"
	@echo "make test-fast                                     its config, model and unit tests: no training"
	@echo "make test-slow                                     the tests that train or start processes"
	@echo "make test-benchmarks                               the record tools' runs (benchmarks/), on tiny inputs"
	@echo "make tensorboard                                   TensorBoard on runs/"
	@echo "make setup [GPU=1]                                 create .venv (GPU=1: CUDA build)"

setup: $(INSTALLED)

# The pinned stack from the requirements files, then the kit itself (pyproject.toml),
# editable: its `recipes` command and every edit of the checkout are live in .venv.
$(INSTALLED): requirements.txt requirements-no-tf.txt requirements-jax.txt requirements-$(BUILD).txt constraints.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip uninstall --quiet --yes $(OTHER_TF) >/dev/null 2>&1 || true
	$(PY) -m pip install --quiet -r requirements-$(BUILD).txt -c constraints.txt
	$(PY) -m pip install --quiet --no-deps --editable .
	rm -f $(VENV)/.installed-*
	touch $@

list: $(INSTALLED)
	@$(PY) -m keras_course_recipes list

show: $(INSTALLED)
	@test -n "$(NAME)" || { echo "usage: make show NAME=<recipe>; recipes:"; $(PY) -m keras_course_recipes list; exit 2; }
	@$(PY) -m keras_course_recipes show $(NAME) $(ARGS)

recipe: $(INSTALLED)
	@test -n "$(NAME)" || { echo "usage: make recipe NAME=<recipe> [ARGS=\"key=value ...\"]; recipes:"; $(PY) -m keras_course_recipes list; exit 2; }
	@$(PY) -m keras_course_recipes run $(NAME) $(ARGS)

# Each recipe module's file as notebooks/<recipe>.ipynb (tests/test_notebooks.py
# checks that they are fresh).
notebooks: $(INSTALLED)
	@$(PY) -m keras_course_recipes notebooks

# dist/keras_course_recipes-*.whl: the kit as one file, to install where no clone is (Colab).
wheel: $(INSTALLED)
	@$(PY) -m pip wheel --quiet --no-deps . -w dist
	@ls dist/keras_course_recipes-*.whl

copy: $(INSTALLED)
	@test -n "$(NAME)" -a -n "$(DIR)" || { echo "usage: make copy NAME=<recipe> DIR=<folder>"; exit 2; }
	@$(PY) -m keras_course_recipes copy $(NAME) $(DIR)

# Your copy of cifar10-airbench's airbench94.py or airbench94_muon.py, patched
# for a CPU, beside configs/cifar10_record.yaml (or NAME) on the same images and
# split, RUNS times each; needs requirements-torch.txt. Not a test: it reports.
anchor: $(INSTALLED)
	@test -n "$(SCRIPT)" -a -n "$(DATA)" || { echo "usage: make anchor SCRIPT=airbench94_muon.py DATA=<folder with train/> [RUNS=3] [NAME=...] [ARGS=...]"; exit 2; }
	@$(PY) -m benchmarks anchor $(or $(NAME),cifar10_record) --script $(SCRIPT) \
	    runs=$(or $(RUNS),3) data.source=folder data.path=$(DATA) $(ARGS)

# densenet_cifar10_cpu's (or NAME's) training step on TensorFlow (with and
# without its own kernels), JAX and torch (channels-last and -first), and with
# SCRIPT=airbench94_muon.py PyTorch's own step beside them. Not a test: it reports.
benchmark-backends: $(INSTALLED)
	@$(PY) -m benchmarks backends $(or $(NAME),densenet_cifar10_cpu) $(if $(SCRIPT),--script $(SCRIPT)) $(ARGS)

# The README's and the docs' tables of measured figures, and the plot of CIFAR-10
# accuracy against wall time, generated from the results store (results/*.csv).
results: $(INSTALLED)
	@$(PY) -m benchmarks.results

# tensorflow-datasets' DATASET (cifar10, ...) as DIR/train/ and DIR/test/ of
# lossless PNGs, for data.source=folder; run once where a network is.
tfds-to-folder: $(INSTALLED)
	@test -n "$(DATASET)" -a -n "$(DIR)" || { echo "usage: make tfds-to-folder DATASET=cifar10 DIR=<folder>"; exit 2; }
	@$(PY) -m keras_course_recipes tfds-to-folder $(DATASET) $(DIR)

# MultiWorkerMirroredStrategy on WORKERS local processes (docs/distributed.md).
WORKERS ?= 2
recipe-multiworker: $(INSTALLED)
	@test -n "$(NAME)" || { echo "usage: make recipe-multiworker NAME=<recipe> [WORKERS=2] [ARGS=\"key=value ...\"]"; exit 2; }
	@$(PY) -m keras_course_recipes multiworker $(NAME) workers=$(WORKERS) $(ARGS)

# Each word of GRID is one --grid: no spaces inside a list.
sweep: $(INSTALLED)
	@test -n "$(NAME)" -a -n "$(GRID)" || { echo 'usage: make sweep NAME=<recipe> GRID="model.growth_rate=[12,24] train.lr=[0.05,0.1]" [ARGS="key=value ..."]'; exit 2; }
	@$(PY) -m keras_course_recipes sweep $(NAME) $(foreach item,$(GRID),--grid '$(item)') \
	    $(if $(ONE_AT_A_TIME),--one-at-a-time) $(ARGS)

curves: $(INSTALLED)
	@test -n "$(RUNS)" || { echo 'usage: make curves RUNS="runs/NAME/<timestamp> ..."'; exit 2; }
	@$(PY) -m keras_course_recipes curves $(RUNS)

compare compare-sizes: $(INSTALLED)
	@test -n "$(NAME)" || { echo "usage: make $@ NAME=<recipe> [ARGS=\"modes=eager,graph steps=30 key=value ...\"]"; exit 2; }
	@$(PY) -m keras_course_recipes $@ $(NAME) $(ARGS)

# Performance bars: fit (graph) against the hand-written tf.function step and
# against itself on an always-ready input (graph_ready), and with
# steps_per_execution (graph_spe), on every recipe module's default model.
# Not a test: it reports.
# Three turns per mode, so that a slow spell of a shared machine hits all modes.
BENCHMARK_STEPS ?= 30
BENCHMARK_REPEATS ?= 3
benchmark: $(INSTALLED)
	@for name in mnist_mlp cifar10_cnn densenet_cifar100; do \
	  $(PY) -m keras_course_recipes compare $$name modes=graph,graph_ready,graph_spe,loop_function \
	    steps=$(BENCHMARK_STEPS) repeats=$(BENCHMARK_REPEATS) $(ARGS) || exit $$?; \
	done

# The tf.function lessons' numbers: the LSTM stepped in Python, eager against
# graph; a whole epoch in one tf.function against a tf.function per step and
# against steps_per_execution. Not a test: it reports.
benchmark-lessons: $(INSTALLED)
	@$(PY) -m keras_course_recipes compare graph_lessons modes=eager,graph,xla,loop_eager,loop_function \
	    steps=$(BENCHMARK_STEPS) repeats=$(BENCHMARK_REPEATS) $(ARGS) || exit $$?
	@for name in mnist_mlp cifar10_cnn; do \
	  $(PY) -m keras_course_recipes compare $$name modes=graph,graph_spe,loop_function,loop_epoch \
	    steps=$(BENCHMARK_STEPS) repeats=$(BENCHMARK_REPEATS) $(ARGS) || exit $$?; \
	done

preview: $(INSTALLED)
	@test -n "$(NAME)" || { echo "usage: make preview NAME=<recipe> [ARGS=\"data.augment=[pad_crop,flip,cutmix]\"]"; exit 2; }
	@$(PY) -m keras_course_recipes preview $(NAME) $(ARGS)

# Each operation alone in both engines, then training with the recipe's
# pipeline on host and on device. Not a test: it reports.
benchmark-augment: $(INSTALLED)
	@$(PY) -m keras_course_recipes augment-benchmark $(or $(NAME),densenet_cifar100_modern) steps=$(BENCHMARK_STEPS) $(ARGS)

benchmark-data: $(INSTALLED)
	@test -n "$(NAME)" || { echo "usage: make benchmark-data NAME=<recipe> [ARGS=\"data.source=folder data.path=DIR\"]"; exit 2; }
	@$(PY) -m keras_course_recipes data-benchmark $(NAME) $(ARGS)

# Images/s of graph-mode fit with no strategy and with MirroredStrategy, and
# the scaling efficiency. DEVICES=cpu:2 splits the CPU in two logical devices;
# DEVICES= uses every GPU. Not a test: it reports.
DEVICES ?= cpu:2
benchmark-distributed: $(INSTALLED)
	@$(PY) -m keras_course_recipes scaling $(or $(NAME),cifar10_cnn) steps=$(BENCHMARK_STEPS) \
	    repeats=$(BENCHMARK_REPEATS) execution.devices=$(or $(DEVICES),null) $(ARGS)

# Peak memory and time of a RevNet training step, for each model.backprop and
# variant (fresh processes). Not a test: it reports.
memory: $(INSTALLED)
	@$(PY) -m keras_course_recipes memory $(or $(NAME),revnet_cifar10) $(ARGS)

# SIGKILLs a short training KILLS times, some during a checkpoint write, and
# resumes it each time; a table of what survived. Not a test: it reports.
KILLS ?= 20
SOAK_ARGS ?= data.source=synthetic train.epochs=60 train.steps_per_epoch=20
soak: $(INSTALLED)
	@$(PY) -m keras_course_recipes soak $(or $(NAME),mnist_mlp) kills=$(KILLS) $(SOAK_ARGS) $(ARGS)

# Each bad input or fault a new user could hit, run as a user would, against
# what a correct outcome is (refused, trains, stops then resumes); a table of
# what happened (tests/fault_battery.py). Not a test: it reports.
battery: $(INSTALLED)
	@$(PY) tests/fault_battery.py $(ARGS)

# A few training steps under the profiler, and where their time goes by
# kind of op (convolution, batch norm, ...). Not a test: it reports.
profile: $(INSTALLED)
	@test -n "$(NAME)" || { echo "usage: make profile NAME=<recipe> [ARGS=\"data.source=synthetic\"]"; exit 2; }
	@$(PY) -m keras_course_recipes profile $(NAME) $(ARGS)

graph: $(INSTALLED)
	@test -n "$(NAME)" || { echo "usage: make graph NAME=<recipe> [ARGS=\"execution.mode=xla\"]"; exit 2; }
	@$(PY) -m keras_course_recipes graph $(NAME) $(ARGS)

# Two test processes: most tests use one core at a time (Python, tracing,
# process start-up), so the second core would idle; worksteal evens out
# the long tests.
PYTEST = $(PY) -m pytest -q -n 2 --dist worksteal --durations=20
# The whole suite, the fast set first: a red fast set stops it in minutes.
test: test-fast test-slow

# What the suite needs beside the stack: PyTorch's CPU build, for the tests of Keras'
# torch backend and of the anchor (optional for users, so not part of make setup).
TEST_EXTRAS := $(VENV)/.installed-test
$(TEST_EXTRAS): $(INSTALLED) requirements-torch.txt
	$(PY) -m pip install --quiet -r requirements-torch.txt -c constraints.txt
	touch $@

# The tests that train nothing and start no process (not marked slow);
# tests/conftest.py fails one that calls fit, a PyTorch backward or a process.
test-fast: $(TEST_EXTRAS)
	$(PYTEST) -m "not slow" tests

# The tests that train or start processes (marked slow), but the record tools' runs.
test-slow: $(TEST_EXTRAS)
	$(PYTEST) -m "slow and not benchmark" tests

# The record tools' runs (benchmarks/: the airbench ablation's PyTorch step, the
# backends table): measurements, checked on tiny inputs; not part of make test.
test-benchmarks: $(TEST_EXTRAS)
	$(PYTEST) -m benchmark tests

tensorboard: $(INSTALLED)
	@mkdir -p runs
	@echo "TensorBoard on runs/: open http://localhost:6006 (Ctrl-C stops it)"
	@$(PY) -m tensorboard.main --logdir runs --host localhost --port 6006

clean:
	rm -rf $(VENV) .pytest_cache
