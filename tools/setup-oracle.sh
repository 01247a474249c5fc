#!/usr/bin/env bash
# setup-oracle.sh — creates tools/.venv with the Python oracles (torch, transformers, tokenizers,
# safetensors, numpy, jinja2) pinned in tools/requirements-oracle.txt. Idempotent: an existing
# venv is reused and brought to the pinned versions.
#
# Then: tools/.venv/bin/python tools/make_fixtures.py
#
# Needs python3 (>= 3.10) with the venv module and PyPI access. torch from PyPI brings its CUDA
# runtime packages (several GB); the oracle itself runs on the CPU in float32.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -r "$here/requirements-oracle.txt"
"$venv/bin/python" -c 'import torch, transformers, tokenizers, safetensors, numpy, jinja2; print("oracle ready: torch", torch.__version__, "transformers", transformers.__version__)'
