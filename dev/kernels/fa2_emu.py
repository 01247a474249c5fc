"""fa2_emu.py: the fragment layouts of the decode step kernel's attention
pass, checked on the CPU (no GPU needed). Emulates ldmatrix (.x4, plain and
.trans) and mma.sync m16n8k16 per lane as PTX defines them, runs the
FlashAttention-2 style pass of branch wip/s12-att-fa2 (cuda_step.cu's
st_att_item: warp w takes positions 16 (w % 4) .. + 15 and dims 32 (w / 4)
.. + 31, scores S = q K^T with the q heads as the MMA's rows, p as the next
MMA's A operand in place, the position groups merged at the end) on random
K / V / q with stale (NaN) rows past n and dims past hd, and compares with
softmax(q K^T * scale) V. Also runs the landed kernel's q . k (K rows as the
A operand) through the same emulation, as a check of the emulation itself.
Floats, no bf16 rounding: layouts, masks and the online softmax only.

Usage: tools/.venv/bin/python dev/kernels/fa2_emu.py [G hd n]  (default 4 128 33)
"""
import sys

import numpy as np

rng = np.random.default_rng(1)
G, hd, n = (int(x) for x in sys.argv[1:4]) if len(sys.argv) > 3 else (4, 128, 33)
SPL, MAXHD = 64, 128  # positions per pass (ST_SPL), TK_STEP_MAX_HD

def pass_rows(n):  # one pass's K / V rows as the kernel holds them: stale (NaN) past n and hd
    K = np.full((SPL, MAXHD + 8), np.nan); V = np.full((SPL, MAXHD + 8), np.nan)
    K[:n, :hd] = rng.standard_normal((n, hd)); V[:n, :hd] = rng.standard_normal((n, hd))
    V[n:(n + 15) & ~15, :hd] = 0.0  # the kernel zeroes rows past n up to n16 (cols < hd)
    return K, V, n

passes = [pass_rows(SPL), pass_rows(n)]  # a full pass, then the split's last (n positions)
q = np.zeros((8, hd)); q[:G] = rng.standard_normal((G, hd))
scale = hd ** -0.5
qflat = q.reshape(-1)  # qb: [8][hd]

def ldm(mat, addr, trans):  # addr(lane) -> (row, col) of an 8-element row
    regs = [[None] * 4 for _ in range(32)]
    for i in range(4):
        rows = [mat[addr(8 * i + r)[0], addr(8 * i + r)[1]:addr(8 * i + r)[1] + 8] for r in range(8)]
        M = np.array(rows)  # 8x8
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            regs[lane][i] = (M[g, 2*t], M[g, 2*t+1]) if not trans else (M[2*t, g], M[2*t+1, g])
    return regs

def mma(C, A, B):  # per-lane fragments: A[lane]=(a0..a3 pairs), B[lane]=(b0,b1 pairs), C[lane]=4 floats
    Am = np.zeros((16, 16)); Bm = np.zeros((16, 8)); Cm = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        a = A[lane]; b = B[lane]; c = C[lane]
        Am[g, 2*t:2*t+2] = a[0]; Am[g+8, 2*t:2*t+2] = a[1]; Am[g, 2*t+8:2*t+10] = a[2]; Am[g+8, 2*t+8:2*t+10] = a[3]
        Bm[2*t:2*t+2, g] = b[0]; Bm[2*t+8:2*t+10, g] = b[1]
        Cm[g, 2*t:2*t+2] = c[0:2]; Cm[g+8, 2*t:2*t+2] = c[2:4]
    with np.errstate(invalid='ignore'):
        R = Am @ Bm + Cm
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        C[lane] = [R[g, 2*t], R[g, 2*t+1], R[g+8, 2*t], R[g+8, 2*t+1]]

Z = (0.0, 0.0)
wm = np.full((4, G), -np.inf); wl = np.zeros((4, G)); wo = np.zeros((4, G, hd))
for warp in range(16):
    pg, dq = warp & 3, warp >> 2
    mrun = [-np.inf] * 32; lrun = [0.0] * 32; oacc = [[[0.0] * 4 for _ in range(32)] for _ in range(4)]
    for K, V, n in passes:
        if 16 * pg < n:
            s0 = [[[0.0]*4 for _ in range(32)] for _ in range(2)]; s1 = [[[0.0]*4 for _ in range(32)] for _ in range(2)]
            for ks in range(MAXHD // 16):
                inn = ks < hd // 16
                kr = ldm(K, lambda L: (16*pg + (L & 15), 8*(L >> 4) + 16*ks), False)
                A = []; B0 = []; B1 = []
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    qa = (qflat[g*hd + 16*ks + 2*t], qflat[g*hd + 16*ks + 2*t + 1]) if inn else Z
                    qc = (qflat[g*hd + 16*ks + 8 + 2*t], qflat[g*hd + 16*ks + 9 + 2*t]) if inn else Z
                    k = kr[lane] if inn else [Z]*4
                    A.append((qa, Z, qc, Z)); B0.append((k[0], k[2])); B1.append((k[1], k[3]))
                mma(s0[ks & 1], A, B0); mma(s1[ks & 1], A, B1)
            e_all = []
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                sc = [s0[0][lane][0] + s0[1][lane][0], s0[0][lane][1] + s0[1][lane][1], s1[0][lane][0] + s1[1][lane][0], s1[0][lane][1] + s1[1][lane][1]]
                for j in range(4):
                    p = 16*pg + 2*t + (j & 1) + 8*(j >> 1)
                    sc[j] = sc[j] * scale if p < n else -np.inf
                e_all.append(sc)
            # shuffles over t (xor 1, 2): lanes of one g
            sc_all = [list(x) for x in e_all]
            for lane in range(32):
                g = lane >> 2
                grp = [sc_all[(g << 2) | t] for t in range(4)]
                mx = max(max(x) for x in grp)
                mn = max(mrun[lane], mx); fc = 0.0 if mrun[lane] == -np.inf else np.exp(mrun[lane] - mn)
                e = [0.0 if x == -np.inf else np.exp(x - mn) for x in sc_all[lane]]
                sm = sum(0.0 if x == -np.inf else np.exp(x - mn) for gg in grp for x in gg)
                lrun[lane] = lrun[lane] * fc + sm; mrun[lane] = mn
                e_all[lane] = (e, fc)
            for nt in range(0, 4, 2):
                vr = ldm(V, lambda L: (16*pg + (L & 15), 32*dq + 8*nt + 8*(L >> 4)), True)
                A = []; B0 = []; B1 = []
                for lane in range(32):
                    e, fc = e_all[lane]
                    A.append(((e[0], e[1]), Z, (e[2], e[3]), Z)); B0.append((vr[lane][0], vr[lane][1])); B1.append((vr[lane][2], vr[lane][3]))
                    oacc[nt][lane] = [x * fc for x in oacc[nt][lane]]; oacc[nt+1][lane] = [x * fc for x in oacc[nt+1][lane]]
                mma(oacc[nt], A, B0); mma(oacc[nt+1], A, B1)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        if g < G:
            if dq == 0 and t == 0: wm[pg, g] = mrun[lane]; wl[pg, g] = lrun[lane]
            for nt in range(4):
                d = 32*dq + 8*nt + 2*t
                if d < hd: wo[pg, g, d:d+2] = oacc[nt][lane][0:2]
out = np.zeros((G, hd))
for g in range(G):
    M = wm[:, g].max(); f = np.where(wm[:, g] == -np.inf, 0.0, np.exp(wm[:, g] - M))
    out[g] = (wo[:, g, :] * f[:, None]).sum(0) / (wl[:, g] * f).sum()
Kall = np.concatenate([K[:m, :hd] for K, V, m in passes]); Vall = np.concatenate([V[:m, :hd] for K, V, m in passes])
S = (q[:G] @ Kall.T) * scale
P = np.exp(S - S.max(1, keepdims=True)); P /= P.sum(1, keepdims=True)
ref = P @ Vall
err_fa2 = np.abs(out - ref).max()
print("FA2 pass: max |diff| %.3g (max |ref| %.3g)" % (err_fa2, np.abs(ref).max()))
# the landed kernel's q . k (A = K rows, B = q) of the last pass, through the same emulation
K, V, n = passes[-1]
n16 = (n + 15) & ~15
S = (q[:G] @ K[:n, :hd].T) * scale
s_old = np.full((8, SPL), np.nan)
for warp in range(n16 // 16):
    c0 = [[0.0]*4 for _ in range(32)]
    for ks in range(hd // 16):
        kr = ldm(K, lambda L: (16*warp + (L & 15), 8*(L >> 4) + 16*ks), False)
        A = [tuple(kr[l]) for l in range(32)]
        B = [((qflat[(l>>2)*hd + 16*ks + 2*(l&3)], qflat[(l>>2)*hd + 16*ks + 2*(l&3) + 1]),
              (qflat[(l>>2)*hd + 16*ks + 8 + 2*(l&3)], qflat[(l>>2)*hd + 16*ks + 9 + 2*(l&3)])) for l in range(32)]
        mma(c0, A, B)
    for l in range(32):
        g4, t4 = l >> 2, l & 3
        for e in range(4):
            head, p = 2*t4 + (e & 1), 16*warp + g4 + 8*(e >> 1)
            if head < G and p < n: s_old[head, p] = c0[l][e] * scale
err_old = np.abs(s_old[:G, :n] - S).max()
print("landed q . k through the emulation: max |diff| %.3g" % err_old)
sys.exit(0 if err_fa2 < 1e-9 and err_old < 1e-9 else 1)
