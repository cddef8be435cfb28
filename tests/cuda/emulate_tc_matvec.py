#!/usr/bin/env python3
"""CPU emulation of the index arithmetic of src/backend/cuda/matvec.cu's tensor path.

Mirrors, step by step, pack_x_kernel (limb layout, per-token power-of-two scale) and
tc_matvec_kernel (16-byte staged copies from 16-byte-aligned starts with per-row deltas, the
row-slot layout, each lane's two 4-byte quant words read through the funnel shift, the int8 ->
f16 byte_perm trick, the mma.sync m16n8k16 fragment layout of the PTX ISA, the warp split of a
stage's column blocks, split columns, the epilogue's fragment -> (row, token) map) in numpy,
and compares with x · Wᵀ. It checks that the pieces agree with each other and with the PTX
layout as documented; it cannot check the hardware, which tests/cuda/test_cuda_matvec.cpp does
on a GPU. Needs numpy (Debian: python3-numpy); not part of ctest.

    python3 tests/cuda/emulate_tc_matvec.py     # exits 1 if any case is off
"""
import numpy as np, math, struct
rng = np.random.default_rng(1)
kThreads, kWarps, kTileRows, kStages = 256, 8, 32, 4
FMT = {'q8': dict(blk=34, scb=16, slot=656), 'f16': dict(blk=64, scb=8, slot=544)}

def q8_quant(w):  # rows x cols float -> bytes
    rows, cols = w.shape
    out = bytearray()
    for r in range(rows):
        for b in range(cols // 32):
            v = w[r, 32*b:32*b+32]
            amax = np.abs(v).max(); d = amax / 127 if amax > 0 else 0
            dh = np.float16(d); q = np.round(v / float(dh)).clip(-128, 127).astype(np.int8) if d else np.zeros(32, np.int8)
            out += dh.tobytes() + q.tobytes()
    return bytes(out)

def q8_deq(buf, rows, cols):
    rb = cols // 32 * 34; W = np.zeros((rows, cols))
    for r in range(rows):
        for b in range(cols // 32):
            o = r*rb + 34*b
            d = np.frombuffer(buf[o:o+2], np.float16)[0]
            q = np.frombuffer(buf[o+2:o+34], np.int8)
            W[r, 32*b:32*b+32] = float(d) * q.astype(np.float64)
    return W

def pack(x, bf16=False):
    T, K = x.shape; nb = K // 32
    out = np.zeros((T, nb * 64), np.float64)  # hi at [cb*64 + pos], lo at [cb*64 + 32 + pos] (halfs)
    scale = np.ones(T)
    for r in range(T):
        m = np.abs(x[r]).max(); e = 0
        if m > 0:
            _, ex = math.frexp(m); e = max(-100, min(100, ex - 15))
        inv = 2.0 ** -e; scale[r] = 2.0 ** e
        for k in range(K):
            v = np.float32(x[r, k] * inv)
            cb, j = k >> 5, k & 31
            pos = (j >> 2) * 8 + (j & 3) if j < 16 else ((j - 16) >> 2) * 8 + 4 + (j & 3)
            hi = np.float16(v); lo = np.float16(np.float32(v) - np.float32(hi))
            out[r, cb*64 + pos] = hi; out[r, cb*64 + 32 + pos] = lo
    return out, scale

def mma(d, A, B):  # A: dict reg->(lane -> (lowval, highval)); emulate per PTX layout
    # build 16x16 A and 16x8 B from fragments
    Am = np.zeros((16, 16)); Bm = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        a = A[lane]; b = B[lane]
        Am[g, 2*t:2*t+2] = a[0]; Am[g+8, 2*t:2*t+2] = a[1]; Am[g, 2*t+8:2*t+10] = a[2]; Am[g+8, 2*t+8:2*t+10] = a[3]
        Bm[2*t:2*t+2, g] = b[0]; Bm[2*t+8:2*t+10, g] = b[1]
    C = Am @ Bm
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        d[lane][0] += C[g, 2*t]; d[lane][1] += C[g, 2*t+1]; d[lane][2] += C[g+8, 2*t]; d[lane][3] += C[g+8, 2*t+1]

def u32(buf, off): return struct.unpack_from('<I', buf, off)[0]
def funnel(buf, off):
    wi = off >> 2; lo, hi = u32(buf, 4*wi), u32(buf, 4*wi + 4); sh = (off & 2) * 8
    return ((hi << 32 | lo) >> sh) & 0xffffffff
def i8x4(v):
    b = [(v >> (8*i)) & 0xff for i in range(4)]
    q = [x - 256 if x >= 128 else x for x in b]
    # byte_perm emulation check
    u = v ^ 0x80808080
    lo = ((0x64) << 24) | (((u >> 8) & 0xff) << 16) | (0x64 << 8) | (u & 0xff)
    f = np.frombuffer(struct.pack('<I', lo), np.float16).astype(np.float64) - 1152
    assert f[0] == q[0] and f[1] == q[1], (f, q)
    return (q[0], q[1]), (q[2], q[3])
def f16pair(buf, off):
    v = np.frombuffer(buf[off:off+4], np.float16).astype(np.float64); return (v[0], v[1])

def run(kind, rows, cols, T, wbuf_full, wbase, count_bytes, gridx, kbps=None):
    F = FMT[kind]; blk, scb, slot = F['blk'], F['scb'], F['slot']
    rb = cols // 32 * blk; nb = cols // 32
    kbps = kbps or nb
    chunks = (14 + scb*blk + 15) // 16
    tiles = (rows + 31) // 32
    y = np.zeros((T, rows))
    for z in range((nb + kbps - 1)//kbps):
      kb0 = z*kbps; kb1 = min(nb, kb0+kbps); nks = (kb1-kb0+scb-1)//scb
      for bx in range(gridx):
        ntile = (tiles - 1 - bx)//gridx + 1 if bx < tiles else 0
        S = ntile * nks
        stagebuf = [bytearray(kTileRows*slot + 64) for _ in range(kStages)]
        acc = {w: [[[0.0]*4 for _ in range(32)] for _ in range(2)] for w in range(kWarps)}
        def geom(s):
            k = s // nks; ks = s - k*nks; row0 = (bx + k*gridx)*32; cb0 = kb0 + ks*scb
            return row0, cb0, min(scb, kb1-cb0), ks
        def load(s):
            if s >= S: return
            row0, cb0, ncb, ks = geom(s); buf = stagebuf[s % kStages]
            for i in range(kTileRows*chunks):
                r, ch = divmod(i, chunks); row = row0 + r
                if row >= rows: continue
                start = wbase + row*rb + cb0*blk; addr = (start & ~15) + ch*16
                if addr >= start + ncb*blk: continue
                n = min(16, count_bytes - addr)
                buf[r*slot + ch*16: r*slot+ch*16+16] = wbuf_full[addr:addr+n] + bytes(16-n)
        for s in range(kStages-1): load(s)
        for s in range(S):
            load(s + kStages - 1)  # (after barrier) -- buffer (s-1)%4, not s%4
            row0, cb0, ncb, ks = geom(s); buf = bytes(stagebuf[s % kStages])
            for warp in range(kWarps):
                for j in range(scb // kWarps):
                    c = warp*(scb//kWarps) + j
                    if c >= ncb: break
                    A = [[None]*2 for _ in range(2)]
                    for sub in range(2):
                        Aregs0, Aregs1, Bregs0, Bregs1, parts = [], [], [], [], []
                        per_lane = []
                        for lane in range(32):
                            g, t = lane >> 2, lane & 3
                            rowoff = []
                            for q in range(4):
                                r = g + 8*q; start = wbase + (row0 + r)*rb + cb0*blk
                                rowoff.append(r*slot + (start & 15))
                            oa = rowoff[2*sub] + c*blk; ob = rowoff[2*sub+1] + c*blk
                            if g < T:
                                xo = (kb0 + ks*scb + c)*64 + 8*t
                                hx = XP[g, xo:xo+8]; lx = XP[g, xo+32:xo+40]
                            else:
                                hx = np.zeros(8); lx = np.zeros(8)
                            if kind == 'q8':
                                da = float(np.frombuffer(buf[oa:oa+2], np.float16)[0]); db = float(np.frombuffer(buf[ob:ob+2], np.float16)[0])
                                a00, a08 = i8x4(funnel(buf, oa + 2 + 4*t)); a10, a18 = i8x4(funnel(buf, oa + 18 + 4*t))
                                b00, b08 = i8x4(funnel(buf, ob + 2 + 4*t)); b10, b18 = i8x4(funnel(buf, ob + 18 + 4*t))
                            else:
                                a00, a08 = f16pair(buf, oa + 8*t), f16pair(buf, oa + 8*t + 4)
                                a10, a18 = f16pair(buf, oa + 32 + 8*t), f16pair(buf, oa + 32 + 8*t + 4)
                                b00, b08 = f16pair(buf, ob + 8*t), f16pair(buf, ob + 8*t + 4)
                                b10, b18 = f16pair(buf, ob + 32 + 8*t), f16pair(buf, ob + 32 + 8*t + 4)
                                da = db = 1.0
                            per_lane.append(dict(da=da, db=db, s0=[a00, b00, a08, b08], s1=[a10, b10, a18, b18],
                                bh=[(hx[0],hx[1]),(hx[2],hx[3]),(hx[4],hx[5]),(hx[6],hx[7])],
                                bl=[(lx[0],lx[1]),(lx[2],lx[3]),(lx[4],lx[5]),(lx[6],lx[7])]))
                        part = [[0.0]*4 for _ in range(32)]
                        mma(part, [pl['s0'] for pl in per_lane], [pl['bh'][0:2] for pl in per_lane])
                        mma(part, [pl['s0'] for pl in per_lane], [pl['bl'][0:2] for pl in per_lane])
                        mma(part, [pl['s1'] for pl in per_lane], [pl['bh'][2:4] for pl in per_lane])
                        mma(part, [pl['s1'] for pl in per_lane], [pl['bl'][2:4] for pl in per_lane])
                        for lane in range(32):
                            pl = per_lane[lane]
                            for e in range(4):
                                acc[warp][sub][lane][e] += (pl['da'] if e < 2 else pl['db']) * part[lane][e]
            if ks == nks - 1:
                for o in range(32*T):
                    n, r = divmod(o, 32); row = row0 + r
                    if row >= rows: continue
                    sub, m = r >> 4, r & 15
                    src = (m & 7)*4 + (n >> 1); e = ((m >> 3) << 1) | (n & 1)
                    v = sum(acc[w][sub][src][e] for w in range(kWarps))
                    y[n, row] += v * SC[n]
                for w in range(kWarps):
                    acc[w] = [[[0.0]*4 for _ in range(32)] for _ in range(2)]
    return y

worst = 0.0
# (format, rows, cols, T, blocks, matrices in the stack, matrix used, column blocks per split)
for kind, rows, cols, T, gridx, count, mat, kbps in [('q8', 33, 96, 3, 1, 3, 1, None), ('q8', 40, 544, 2, 2, 1, 0, None), ('f16', 37, 288, 5, 1, 1, 0, None), ('q8', 70, 1056, 8, 2, 2, 1, 7), ('f16', 20, 320, 2, 1, 1, 0, 3)]:
    Wf = rng.normal(0, 0.05, (rows*count, cols))
    if kind == 'q8':
        wb = q8_quant(Wf); Wd = q8_deq(wb, rows*count, cols)
    else:
        Wh = Wf.astype(np.float16); wb = Wh.tobytes(); Wd = Wh.astype(np.float64)
    rb = len(wb) // (rows*count)
    x = rng.normal(0, 1, (T, cols)) * np.array([1, 1000, 0.001, 1, 1, 1, 1, 1][:T])[:, None]
    XP, SC = pack(x)
    y = run(kind, rows, cols, T, wb, mat*rows*rb, len(wb), gridx, kbps)
    ref = x @ Wd[mat*rows:(mat+1)*rows].T
    absd = np.abs(x) @ np.abs(Wd[mat*rows:(mat+1)*rows]).T
    err = (np.abs(y - ref) / absd).max()
    print(kind, rows, cols, T, 'max |err| / sum|x||w| =', err)
    worst = max(worst, err)
if not worst < 1e-6:
    raise SystemExit('emulated kernel disagrees with x . W^T')
