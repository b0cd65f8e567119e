#!/usr/bin/python3
"""The scaling model of docs/distributed.md: predicted time and efficiency of one prefill forward of
a DIFF model with the sequence split over R ranks (include/diffattn/distributed/), from the
single-core kernel rate measured by bench/ring/run.sh.

    /usr/bin/python3 tools/distributed_scaling.py [--pair-ns 3.2] [--gbps 100] [--latency-us 5]

Model (per layer, all heads; every rank one core, as measured):
  attention work   W = H * maps * N^2 / 2 pairs * t_pair        (causal; split so every rank has W / R)
  rest of a layer  P = N * 24 D^2 flops / rate                  (projections and SwiGLU, own rows only)
  ring             R - 1 steps per pass, one block of N / R rows each (its K1, K2, V: (2d + dv) * 4
                   bytes per row and head); a step costs max(block compute, transfer) + latency
  rank time        W / (R e) + P / R + exposed transfer + steps * latency, e the ring's efficiency
                   on 2 ranks (bench_ring's thread-CPU speed-up / 2)
t_pair is measured at d = 64, dv = 128 and scaled by (d + dv) / 192 (the products' flops).
"""
import argparse

p = argparse.ArgumentParser()
p.add_argument("--pair-ns", type=float, default=2.6, help="ns per (query, key) pair and map at d=64, dv=128")
p.add_argument("--gbps", type=float, default=100.0, help="network bandwidth per rank, Gbit/s")
p.add_argument("--latency-us", type=float, default=5.0, help="per message")
p.add_argument("--efficiency", type=float, default=0.95,
               help="the ring's attention efficiency measured on 2 ranks (speed-up / 2; DIFF: 0.95)")
p.add_argument("--gflops", type=float, default=100.0, help="dense product rate of one core, GFLOP/s")
a = p.parse_args()

layers, heads, d, dv, hidden, maps = 32, 10, 128, 256, 2560, 2   # the 2.8B DIFF Transformer's shape
t_pair = a.pair_ns * 1e-9 * (d + dv) / 192.0
bandwidth = a.gbps * 1e9 / 8
latency = a.latency_us * 1e-6

print(f"| N | one core | " + " | ".join(f"R = {r}" for r in (2, 4, 8, 16, 32, 64)) + " |")
print("|---|---|" + "---|" * 6)
for n in (65536, 262144, 1048576):
    attention = heads * maps * n * n / 2 * t_pair
    rest = n * 24 * hidden * hidden / (a.gflops * 1e9)
    one = layers * (attention + rest)
    cells = []
    for r in (2, 4, 8, 16, 32, 64):
        rows = n / r
        step_compute = heads * maps * rows * rows * t_pair          # one past block against one slice
        step_transfer = heads * rows * (2 * d + dv) * 4 / bandwidth
        exposed = (r - 1) * max(0.0, step_transfer - step_compute)
        t = layers * (attention / (r * a.efficiency) + rest / r + exposed + (r - 1) * heads * latency)
        cells.append(f"{t / 3600:.2f} h, {one / (r * t) * 100:.0f}%" if t > 3600 else f"{t:.0f} s, {one / (r * t) * 100:.0f}%")
    one_text = f"{one / 3600:.1f} h" if one > 3600 else f"{one:.0f} s"
    print(f"| {n // 1024}K | {one_text} | " + " | ".join(cells) + " |")
rows_needed = (2 * d + dv) * 4 / (maps * t_pair * bandwidth)
print(f"\nTransfers hide behind the tile work when a slice has >= {rows_needed:.0f} rows "
      f"(t_pair {t_pair * 1e9:.1f} ns at d={d}, dv={dv}; {a.gbps:g} Gbit/s).")
