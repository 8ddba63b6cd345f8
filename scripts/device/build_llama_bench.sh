#!/bin/bash
# Build llama.cpp's `llama-bench` for CUDA on Hopper (sm_90) from the trimmed source that
# prepare.sh packed: the build issue 14's llama.cpp figures came from.
#   build_llama_bench.sh SRC.tar.gz BUILD_DIR [JOBS] [extra cmake -D flags...]
# Leaves BUILD_DIR/bin/llama-bench (ggml linked in statically; it needs libcudart.so.13 and
# libcublas(Lt).so.13 at run time) and BUILD_DIR/build.log; prints the build's wall time.
set -euo pipefail
tarball=$1 build=$2 jobs=${3:-$(nproc)}
shift $(( $# < 3 ? $# : 3 ))
start=$(date +%s)
mkdir -p "$build"
rm -rf "$build/llama.cpp"
tar -xzf "$tarball" -C "$build"
{
    cmake -S "$build/llama.cpp" -B "$build/cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_COMMIT=llama-cpp-python-0.3.36 "$@"  # the sdist has no git history
    cmake --build "$build/cmake" --target llama-bench -j "$jobs"
} >"$build/build.log" 2>&1 || { tail -30 "$build/build.log"; exit 1; }
mkdir -p "$build/bin"
cp "$build/cmake/bin/llama-bench" "$build/bin/"
echo "llama-bench built in $(( $(date +%s) - start )) s: $build/bin/llama-bench"
