#!/usr/bin/env bash
# setup-pytest.sh — creates tools/.venv-server with the packages the server
# tests need (tools/requirements-server.txt: openai, anthropic, requests, prometheus_client,
# pytest). Idempotent and quick when the venv is already up to date: it only
# calls pip when the requirements file changed since the last install.
# CTest's server tests skip (exit 77) when the venv is absent.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/tools/.venv-server"
req="$root/tools/requirements-server.txt"
python="${PYTHON:-python3}"
stamp="$venv/.requirements.sha256"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
    echo "$want" >"$stamp"
fi
"$venv/bin/python" -c 'import openai, anthropic, requests, prometheus_client, pytest' \
    && echo "server test venv ready: $venv"
