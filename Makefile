# make run   create .venv, install, and run the main job (a search on the default problem)
# make test  create .venv, install the test extras, and run the CPU test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
ARGS   ?=

# litellm otherwise fetches its model-cost map from the network at import.
export LITELLM_LOCAL_MODEL_COST_MAP := True
export CUDA_HOME ?= /usr/local/cuda

.PHONY: run test clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

run: $(VENV)/.installed
	$(BIN)/evokernel run softmax $(ARGS)

# On a machine without a GPU, kernels are still compiled (for sm_90) by the build tests.
test: $(VENV)/.installed
	TORCH_CUDA_ARCH_LIST=$${TORCH_CUDA_ARCH_LIST:-9.0} $(BIN)/python -m pytest -q $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
