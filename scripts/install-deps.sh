#!/usr/bin/env bash
# Installs the Debian packages tern builds and tests with. Idempotent: packages
# already present are skipped, and apt-get update runs only when something is
# missing. Usage: scripts/install-deps.sh
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config
  libjansson-dev libopenblas-dev libcmocka-dev libxxhash-dev
  libpcre2-dev libutf8proc-dev libmicrohttpd-dev
  clang libclang-rt-dev libomp-dev xz-utils curl python3 python3-venv
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
