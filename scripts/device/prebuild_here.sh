#!/bin/bash
# Build llama-bench HERE, on a machine with nvcc 13 but no GPU, driver or cuBLAS, so that the
# device spends no time building it. cuBLAS headers and libraries come from the nvidia-cublas
# 13.0 wheel (the oldest 13.x: the device's torch ships a newer one, same soname); libcuda is
# a stub exporting cuda.h's function names, only for linking (the device's driver provides the
# real one). No rpath: the device run sets LD_LIBRARY_PATH to its own cuBLAS (run_llama_bench.sh).
#   nice -n 19 scripts/device/prebuild_here.sh [DEST] [JOBS]   (default /work/main/.llama, 2)
set -euo pipefail
dest=${1:-/work/main/.llama} jobs=${2:-2}
here=$(cd "$(dirname "$0")" && pwd)
deps=/tmp/llama-deps build=/tmp/llama-build
mkdir -p "$deps"
if [ ! -f "$deps/nvidia/cu13/lib/libcublas.so.13" ]; then
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux_2_27_x86_64 nvidia-cublas==13.0.0.19 -d "$deps"
    unzip -q -o "$deps"/nvidia_cublas-*.whl 'nvidia/cu13/*' -d "$deps"
fi
python3 - "$deps/stub.c" <<'PY'
import re, subprocess, sys
pre = subprocess.run(["gcc", "-E", "-I/usr/local/cuda/include", "-x", "c", "-"],
                     input="#include <cuda.h>\n", capture_output=True, text=True,
                     check=True).stdout
names = sorted(set(re.findall(r"\b(cu[A-Z]\w*)\s*\(", pre)))
open(sys.argv[1], "w").write("".join(f"void {n}(void) {{}}\n" for n in names))
PY
gcc -shared -fPIC -o "$deps/libcuda.so" "$deps/stub.c" -Wl,-soname,libcuda.so.1
lib=$deps/nvidia/cu13/lib inc=$deps/nvidia/cu13/include
"$here/build_llama_bench.sh" "$dest/llama.cpp.tar.xz" "$build" "$jobs" \
    -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DCMAKE_SKIP_RPATH=ON \
    -DCUDA_cublas_LIBRARY="$lib/libcublas.so.13" -DCUDA_cublasLt_LIBRARY="$lib/libcublasLt.so.13" \
    -DCUDA_cuda_driver_LIBRARY="$deps/libcuda.so" \
    -DCMAKE_CUDA_FLAGS="-I$inc" -DCMAKE_CXX_FLAGS="-I$inc"
mkdir -p "$dest/bin"
cp "$build/bin/llama-bench" "$dest/bin/"
cp -L /usr/local/cuda/lib64/libcudart.so.13 "$dest/bin/"  # 0.7 MB; the device may have its own
ls -l "$dest/bin"
