#!/usr/bin/env bash
# The GPU benchmark (benchmarks/bench_gpu.py) on a bare machine that has torch and transformers but
# no network and no model weights: the packages its image lacks are installed from wheels carried
# beside the working tree, then the benchmark runs from the source tree, within LIMIT seconds.
#
# Prepare once, in the repository root, on a machine with pip (wheels for the GPU machine's Python):
#   mkdir -p .gpu/whl && echo /.gpu/ >> .git/info/exclude
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#       -d .gpu/whl sqlalchemy alembic mako pydantic 'pydantic-core==<the version pydantic pins>' \
#       annotated-types typing-inspection typing-extensions networkx greenlet click tqdm
#   (only what the image lacks: two versions of one package stop the install)
# Then, there:  OUT=<results folder> [SIZES=q05,q15,q7] [COMPILE=q15] [LIMIT=270] bash benchmarks/gpu/run.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
OUT=${OUT:-.}
if ls .gpu/whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/hsd-site .gpu/whl/*.whl || exit 3
fi
export PYTHONPATH=/tmp/hsd-site:$PWD
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
git log -1 --format='commit %H' 2>/dev/null || true
timeout "${LIMIT:-270}" python3 -m benchmarks.bench_gpu --device cuda --sizes "${SIZES:-q05,q15,q7}" --compile "${COMPILE:-}" \
    --out "$OUT/gpu.jsonl"
echo "rc=$?"
