# Sourced by the scripts that run on the GPU machine (gpu-check.sh and
# friends): carry_unpack DIR unpacks a carry built here by
# scripts/gpu-decode-prebuild.sh (DIR/bins.tar.xz, and DIR/bench_quant.xz
# when present) into $C (default /tmp/tern-carry); cr runs a command with the
# carried shared libraries first on the library path.
C=${C:-/tmp/tern-carry}
mkdir -p "$C"
carry_unpack() { # skipped when $C already holds this very tarball
  local stamp
  stamp="$1 $(stat -c %s:%Y "$1/bins.tar.xz")"
  if [ "$(cat "$C/.carry" 2>/dev/null)" != "$stamp" ]; then
    python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
      "$1/bins.tar.xz" "$C" && echo "$stamp" >"$C/.carry"
  fi
  if [ -f "$1/bench_quant.xz" ]; then # xz-compressed apart: the carry's 64 MiB limit
    python3 -c "import lzma,sys,shutil; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" \
      "$1/bench_quant.xz" "$C/bench_quant" && chmod +x "$C/bench_quant"
  fi
}
cr() { LD_LIBRARY_PATH=$C:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} "$@"; }
