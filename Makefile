# make run   create .venv, install, and run the main job (replay the recorded frontier-LLM softmax
#            search on this GPU; ARGS="--model provider/name": a live search)
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

# Without --model in ARGS: replay the committed frontier-LLM softmax search on this GPU (every
# kernel re-built, re-gated and re-timed here; no LLM is asked). With --model: a live search.
REPLAY ?= results/h200-2026-12-02/frontier/softmax
run: $(VENV)/.installed
	@case " $(ARGS) " in \
	  *" --model"*) $(BIN)/evokernel run softmax $(ARGS) ;; \
	  *) $(BIN)/evokernel replay $(REPLAY) $(ARGS) ;; \
	esac

# On a machine without a GPU, kernels are still compiled (for sm_90) by the build tests.
test: $(VENV)/.installed
	TORCH_CUDA_ARCH_LIST=$${TORCH_CUDA_ARCH_LIST:-9.0} $(BIN)/python -m pytest -q $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
