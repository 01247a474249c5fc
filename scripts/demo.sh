#!/usr/bin/env bash
# Installs what tern needs, builds it, and generates text with the tiny model
# the repo ships (tests/fixtures/models/tiny-llama: random weights, a real
# byte-level BPE tokenizer and a ChatML template), through its chat template.
# The output is gibberish by design — the weights are random — but every
# stage (tokenizer, template, forward, KV cache, detokenizer) is real.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build build/release -j"$(nproc)" --target tern_cli
model=tests/fixtures/models/tiny-llama
./build/release/tern inspect --model "$model"
echo
./build/release/tern generate --model "$model" --chat --prompt "Hello, who are you?" \
  --max-tokens 24 --no-eos
