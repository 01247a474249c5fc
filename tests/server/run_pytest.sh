#!/usr/bin/env bash
# run_pytest.sh VENV TESTFILE [pytest args] — runs one server test file with
# the venv's pytest; exits 77 (CTest "skipped") when the venv is absent.
set -u
venv="$1"; shift
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import openai, anthropic, requests, prometheus_client, pytest' 2>/dev/null; then
    echo "skipped: $venv missing (run scripts/setup-pytest.sh)"
    exit 77
fi
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
