# Sourced by the call scripts, run from the root of the checkout that travels: where state
# lives on the device, and the setup every call runs: call 1 unpacks the loaders and installs
# the wheels (it carries .gl and .whl); later calls find them done and only set the variables.
set -euo pipefail
export PYTHONUNBUFFERED=1
STATE=/tmp/channel  # survives between calls only while the machine stays warm (30 s)
OUT=${OUT:-$STATE/out}
REPO=$PWD
mkdir -p "$STATE" "$OUT"

say() { echo "[$(date +%T)] $*"; }

setup() {
    # grep without -q reads all of ldconfig's output: -q exits at the first match, and
    # ldconfig's SIGPIPE then fails the pipeline under pipefail, as if nothing matched.
    if ! ldconfig -p | grep libvulkan.so.1 >/dev/null; then
        for f in .gl/*.deb; do dpkg -x "$f" /; done
        ldconfig
    fi
    if [ ! -f /tmp/site/.ok ]; then
        # .whl/READY's line (README.md of the device tool), without its export and exit.
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl
        touch /tmp/site/.ok
    fi
    export PYTHONPATH=/tmp/site:$REPO
    local icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    [ -f "$icd" ] && export VK_DRIVER_FILES=$icd
    local egl=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    [ -f "$egl" ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$egl
    return 0
}

# The machine was given back between calls: what an earlier call left in /tmp is gone.
cold() {
    echo "COLD: $1 is missing, so this is a fresh machine (more than 30 s passed since the" \
         "last call). Start again at call 1 and make the calls back to back." >&2
    exit 3
}

# Wait for a llama-bench build started by call 1 (setsid, so it outlives that call).
wait_build() {
    local deadline=$(( $(date +%s) + $1 ))
    while [ -f "$STATE/building" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
    [ -x "$STATE/llama/bin/llama-bench" ] || {
        echo "no llama-bench: $(tail -5 "$STATE/llama/build.log" 2>/dev/null)" >&2
        return 1
    }
}

# $STATE/<preset>-q4k.gguf: a synthetic Q4_K model of a named shape, written once, from the
# shipped vocabulary (carried as .model/tokenizer.gguf); its log in $STATE/<preset>.synth.log.
synth_model() {
    local out=$STATE/$1-q4k.gguf
    [ -f "$out" ] && return 0
    python3 scripts/make_synthetic_gguf.py "$out.part" --preset "$1" --type Q4_K \
        --tokenizer-from .model/tokenizer.gguf >"$STATE/$1.synth.log" 2>&1 && mv "$out.part" "$out"
}
