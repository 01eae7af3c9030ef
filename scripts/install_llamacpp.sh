#!/usr/bin/env bash
# The llama.cpp engine: the Python binding (llama-cpp-python, built from its source distribution,
# the only one the registry has) and llama-server built from the very llama.cpp tree that binding
# vendors, both for this CPU (GGML_NATIVE=ON, stated: llama.cpp turns it off by itself when
# SOURCE_DATE_EPOCH is set, as some build tools do).
#
# Cold: about 10 minutes on 2 cores (the binding 3.5, the server 6). Again on the same machine:
# seconds. pip keeps the built wheel in its cache, and the server is built once into a folder of the
# model cache, $HSD_PLAN_CACHE/llama.cpp/<version> (default ~/.cache/hsd-plan), reused while its
# binary is there. Both are built for this CPU: a cache shared with a CPU of another kind needs
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
ROOT="${HSD_PLAN_CACHE:-$HOME/.cache/hsd-plan}/llama.cpp/$VERSION"
mkdir -p "$ROOT"
if ! python -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$VERSION')" 2>/dev/null; then
    # the compiler's output goes to a log (printed if the build fails)
    if ! CMAKE_ARGS="$NATIVE -DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
        python -m pip install "llama-cpp-python==$VERSION" >"$ROOT/pip-build.log" 2>&1; then
        tail -30 "$ROOT/pip-build.log" >&2
        echo "error: building llama-cpp-python $VERSION failed (log: $ROOT/pip-build.log); HSD_PLAN_SKIP_LLAMACPP=1 skips the llama.cpp engine" >&2
        exit 1
    fi
fi
if [ ! -x "$ROOT/bin/llama-server" ]; then
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
fi
