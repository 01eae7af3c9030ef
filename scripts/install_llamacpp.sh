#!/usr/bin/env bash
# The llama.cpp engine: the Python binding (llama-cpp-python, built from its source distribution,
# the only one the registry has) and llama-server built from the very llama.cpp tree that binding
# vendors, both for this CPU (GGML_NATIVE=ON, stated: llama.cpp turns it off by itself when
# SOURCE_DATE_EPOCH is set, as some build tools do).
#
# Cold: about 10 minutes on 2 cores (the binding 3.5, the server 6). Again on the same machine:
# seconds: the binding is kept while its version and build suit this CPU, and the server is built
# once into a folder of the model cache, $HSD_PLAN_CACHE/llama.cpp/<version> (default
# ~/.cache/hsd-plan), reused while its binary is there and its build flags suit this CPU (AMX,
# below). Both are built for this CPU: a cache shared with a CPU of another kind needs
# its own build there.
# HSD_PLAN_SKIP_LLAMACPP=1 skips both (the torch engine needs neither).
set -euo pipefail
VERSION=0.3.36  # llama-cpp-python; it vendors llama.cpp's tree of 2026-10-01
if [ "${HSD_PLAN_SKIP_LLAMACPP:-0}" = 1 ]; then
    echo "note: HSD_PLAN_SKIP_LLAMACPP=1: the llama.cpp engine is not installed" >&2
    exit 0
fi
JOBS="$(nproc 2>/dev/null || echo 2)"
NATIVE="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF"

# AMX: a native build uses the CPU's AMX tiles wherever the compiler sees them. On a virtual Xeon
# llama.cpp's tile kernels killed the process at its first pass (llama-server and the binding:
# SIGSEGV in ggml_backend_amx_mul_mat), and so did a few tile instructions in a test program, while
# torch's oneDNN ran its own AMX kernels there. Where that test program faults, both builds leave
# AMX out (-mno-amx-*: AVX512 kernels); where it runs, they keep it. The server's folder records
# which build it holds (build-flags), and a server built otherwise is built again.
amx_runs() {
    local dir rc
    dir="$(mktemp -d)"
    cat >"$dir/amx.c" <<'C'
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */)) return 1;
    _Alignas(64) uint8_t cfg[64];
    memset(cfg, 0, sizeof cfg);
    cfg[0] = 1; cfg[16] = 64; cfg[48] = 16;  /* palette 1; tile 0: 16 rows of 64 bytes */
    _tile_loadconfig(cfg);
    _tile_zero(0);
    _tile_release();
    return 0;
}
C
    rc=1
    if "${CC:-cc}" -O1 -mamx-tile "$dir/amx.c" -o "$dir/amx" 2>/dev/null; then
        sh -c '"$0"; exit $?' "$dir/amx" 2>/dev/null && rc=0  # an inner shell reports a killed probe, silenced
    fi
    rm -rf "$dir"
    return $rc
}
FLAVOUR=""  # -noamx: built without AMX
MACROS="$("${CC:-cc}" -march=native -dM -E - </dev/null 2>/dev/null || true)"  # what a native build compiles for
if [[ "$MACROS" == *__AMX_TILE__* ]] && ! amx_runs; then
    echo "note: a tile instruction of this CPU's AMX faulted in a test program: llama.cpp is built without AMX" >&2
    NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    export CFLAGS="${CFLAGS:-} $NO_AMX" CXXFLAGS="${CXXFLAGS:-} $NO_AMX"
    FLAVOUR="-noamx"
fi
ROOT="${HSD_PLAN_CACHE:-$HOME/.cache/hsd-plan}/llama.cpp/$VERSION"
mkdir -p "$ROOT"
# the binding of this version, built as this CPU needs (without AMX: none of its tile kernels)
if ! python -c "
import llama_cpp, sys
amx = 'AMX_INT8 = 1' in llama_cpp.llama_print_system_info().decode()
sys.exit(llama_cpp.__version__ != '$VERSION' or (amx and '$FLAVOUR' == '-noamx'))" 2>/dev/null; then
    python -m pip uninstall -q -y llama-cpp-python >/dev/null 2>&1 || true
    # the compiler's output goes to a log (printed if the build fails); without AMX, not a wheel
    # from pip's cache, which a native build left there
    if ! CMAKE_ARGS="$NATIVE -DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
        python -m pip install ${FLAVOUR:+--no-cache-dir} "llama-cpp-python==$VERSION" >"$ROOT/pip-build.log" 2>&1; then
        tail -30 "$ROOT/pip-build.log" >&2
        echo "error: building llama-cpp-python $VERSION failed (log: $ROOT/pip-build.log); HSD_PLAN_SKIP_LLAMACPP=1 skips the llama.cpp engine" >&2
        exit 1
    fi
fi
if [ ! -x "$ROOT/bin/llama-server" ] || [ "$(cat "$ROOT/build-flags" 2>/dev/null || echo native)" != "native$FLAVOUR" ]; then
    rm -rf "$ROOT/build" "$ROOT/bin"  # CMake keeps the flags of a build folder's first configure
    SRC="$(mktemp -d)"
    trap 'rm -rf "$SRC"' EXIT
    python -m pip download -q --no-deps --no-binary :all: -d "$SRC" "llama-cpp-python==$VERSION"
    tar xzf "$SRC"/llama_cpp_python-"$VERSION".tar.gz -C "$SRC"
    # the server alone: no tests, examples or web UI (its prebuilt UI would be downloaded); the
    # compiler's output goes to logs (printed if the build fails)
    if ! { cmake -S "$SRC/llama_cpp_python-$VERSION/vendor/llama.cpp" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=Release $NATIVE \
        -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >"$ROOT/cmake.log" 2>&1 &&
        cmake --build "$ROOT/build" --target llama-server -j "$JOBS" >"$ROOT/build.log" 2>&1; }; then
        tail -30 "$ROOT/cmake.log" "$ROOT/build.log" >&2
        echo "error: building llama-server failed (logs: $ROOT/cmake.log, $ROOT/build.log); HSD_PLAN_SKIP_LLAMACPP=1 skips the llama.cpp engine" >&2
        exit 1
    fi
    mkdir -p "$ROOT/bin"
    cp "$ROOT/build/bin/llama-server" "$ROOT/bin/llama-server.tmp" && mv "$ROOT/bin/llama-server.tmp" "$ROOT/bin/llama-server"
    echo "native$FLAVOUR" >"$ROOT/build-flags"
fi
