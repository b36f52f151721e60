#!/usr/bin/env python3
"""The baseline for `shardlab bench --what gemm`: numpy (OpenBLAS) f32 GEMM on one thread.

    pip install numpy
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python3 scripts/bench_numpy.py
"""
import time

import numpy as np

for n in (256, 512, 1024):
    a = np.random.rand(n, n).astype(np.float32)
    b = a.copy()
    times = []
    for _ in range(11):
        t = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t)
    t = sorted(times)[len(times) // 2]
    print(f"  n={n:>5}  {t * 1e3:>9.3f} ms  {2 * n**3 / t / 1e9:>7.2f} GFLOP/s")
