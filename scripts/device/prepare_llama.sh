#!/bin/bash
# Here, once: the llama.cpp source from the llama-cpp-python 0.3.36 sdist, trimmed to what the
# CUDA `llama-bench` target builds from (so it travels small), packed into DEST/llama.cpp.tar.xz
# beside a copy of build_llama_bench.sh. The issue-14 figures were measured with this version.
#   scripts/device/prepare_llama.sh [DEST]        (default: /work/main/.llama, git-ignored)
set -euo pipefail
dest=${1:-/work/main/.llama}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$work"
tar -xzf "$work"/llama_cpp_python-0.3.36.tar.gz -C "$work"
src=$work/llama_cpp_python-0.3.36/vendor/llama.cpp
# Everything the llama-bench target does not compile: docs, models, tests, other tools and
# every ggml backend but the CPU (always built) and CUDA ones.
(cd "$src" && rm -rf docs models tests examples pocs app benches media gguf-py conversion \
    scripts skills grammars requirements .github .devops ./*.py)
find "$src/tools" -mindepth 1 -maxdepth 1 ! -name llama-bench -exec rm -rf {} +
echo 'add_subdirectory(llama-bench)' > "$src/tools/CMakeLists.txt"
find "$src/ggml/src" -mindepth 1 -maxdepth 1 -type d -name 'ggml-*' \
    ! -name ggml-cpu ! -name ggml-cuda -exec rm -rf {} +
mkdir -p "$dest"
tar -C "$work/llama_cpp_python-0.3.36/vendor" -cJf "$dest/llama.cpp.tar.xz" llama.cpp
cp "$here/build_llama_bench.sh" "$dest/"
ls -l "$dest"
