#!/usr/bin/env bash
# Before spending device time on a change to the decode step kernel
# (src/backend/cuda/cuda_step.cu): does its GEMV loop still get its
# registers? ptxas allocates the whole kernel as one function at 128
# registers, and changes far from the loop have made it rematerialise values
# with S2R or spill inside it (docs/perf/quant.md, session 9: 2-7% slower).
# Compiles the kernel for sm_90a here (no GPU needed) and prints ptxas's
# register / spill line, the kernel's instruction count, and the S2R / LDL /
# STL instructions between the GEMV loop's first ring wait (SYNCS.PHASECHK)
# and the block barrier after it. The landed kernel has one, an S2R of
# SR_CgaCtaId in the partial-chunk path (the shared window's base, known
# and cheap there); any other fails the check (exit status 1). The kernel
# checked is the plain instantiation, k_step<false> (no stamps or timing
# switches: what a normal decode runs).
# Needs nvcc and nvdisasm (NVDISASM=path; `pip download nvidia-cuda-nvdisasm`
# has one where the toolkit does not).
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
NVDISASM=${NVDISASM:-$(command -v nvdisasm || echo /usr/local/cuda/bin/nvdisasm)}
[ -x "$NVDISASM" ] || { echo "step-sass-check: no nvdisasm (set NVDISASM)" >&2; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$NVCC" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src -I include -Xptxas -v \
  -cubin -o "$T/k.cubin" src/backend/cuda/cuda_step.cu 2>&1 | grep -A2 "entry function '_Z6k_step\(ILb0EE\)\?[v]\?12" | tail -2
"$NVDISASM" -c "$T/k.cubin" >"$T/k.sass"
python3 - "$T/k.sass" <<'PY'
import re, sys
lines, inside = [], False
for l in open(sys.argv[1]):
    if re.match(r"^\.text\.\S+:", l):  # a function's label: k_step's, or the next one's
        # k_step (or its instantiation without stamps, k_step<false>)
        inside = re.match(r"^\.text\._Z6k_step(ILb0EE)?v?12tk_step_args", l) is not None
    elif inside and re.search(r"/\*[0-9a-f]{4,}\*/", l):
        lines.append(l)
op = lambda l: [w for w in l.split("*/", 1)[1].split() if not w.startswith("@")][0]
mma = [i for i, l in enumerate(lines) if "HMMA.16816.F32 " in l and "BF16" not in l]
if not mma:
    sys.exit("step-sass-check: no f16 HMMA found (the GEMV loop moved?)")
lo = max(i for i in range(mma[0]) if "SYNCS.PHASECHK" in lines[i])
hi = min(i for i in range(mma[-1], len(lines)) if "BAR.SYNC" in lines[i])
bad = [l.strip() for l in lines[lo:hi] if op(l) in ("S2R", "LDL", "STL")]
print("k_step: %d instructions; GEMV loop %d, with %d S2R / LDL / STL" % (len(lines), hi - lo, len(bad)))
for l in bad:
    print("   ", l[:90])
sys.exit(1 if [l for l in bad if "SR_CgaCtaId" not in l] or len(bad) > 1 else 0)
PY
