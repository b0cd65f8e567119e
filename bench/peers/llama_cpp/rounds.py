#!/usr/bin/env python3
"""Timing rounds: diffattn-forward against llama-bench on one model shape, weight type by weight
type (F32, BF16, Q8_0, Q4_0), 1 and 2 threads. diffattn reads the Motif BF16 checkpoint with
`--weights f32` or `--weights bf16`, and the directories diffattn-quantize wrote from it for Q8_0
and Q4_0 (motif_2p6b_q8_0, motif_2p6b_q4_0); llama-bench the llama-architecture GGUF of the same
weights at that type.

Before every timed run it waits until the machine is quiet: the 1-minute load average below 0.5,
or no other process above 10% of a CPU over a 20 s window; after 10 minutes it gives up waiting,
runs anyway and records the load. The two programs alternate run by run, and the order of the
runs is reversed every other round (one llama-bench process covers both thread counts of a weight
type; each diffattn-forward process one test at one thread count). Every run goes through /usr/bin/time -v (peak RSS, wall).

Each run's full output is kept under OUT/raw/, one JSON line per run is appended to
OUT/runs.jsonl, and `summarize.py OUT` makes the table.

Usage: /usr/bin/python3 rounds.py --out DIR [--rounds 3] [--gen 128] [--types BF16,Q8_0,Q4_0]
                                  [--only diffattn|llama]
Environment: PEER_DIR (the models, llama.cpp, stream), DIFFATTN_FORWARD (default
$PEER_DIR/diffattn/build/release/examples/diffattn-forward).
"""
import argparse
import json
import os
import random
import re
import subprocess
import time

PEER = os.environ.get("PEER_DIR", os.path.abspath("peer-work"))
LLAMA_BENCH = f"{PEER}/llama.cpp/build/bin/llama-bench"
DIFFATTN = os.environ.get("DIFFATTN_FORWARD", f"{PEER}/diffattn/build/release/examples/diffattn-forward")
MOTIF = f"{PEER}/models/motif_2p6b"
# The directory and the --weights of diffattn's side at each llama.cpp weight type.
DIFFATTN_MODEL = {"F32": (MOTIF, "f32"), "BF16": (MOTIF, "bf16"), "Q8_0": (f"{MOTIF}_q8_0", "q8_0"),
                  "Q4_0": (f"{MOTIF}_q4_0", "q4_0")}
GGUF = {t: f"{PEER}/models/llama_2p6b_{t.lower()}.gguf" for t in ("F32", "BF16", "Q8_0", "Q4_0")}
VOCAB = 219520
N_PROMPT = 512
THREADS = (1, 2)


def cpu_times():
    """{pid: (name, utime + stime in clock ticks)} of every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        fields = s[s.rindex(")") + 2:].split()
        out[int(d)] = (name, int(fields[11]) + int(fields[12]))
    return out


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def wait_quiet(log, limit=600, window=20):
    """Waits for a quiet machine; returns a record of the wait."""
    start = time.time()
    me = os.getpid()
    hz = os.sysconf("SC_CLK_TCK")
    while True:
        la = loadavg()
        if la < 0.5:
            return {"waited_s": round(time.time() - start, 1), "quiet": "loadavg", "loadavg1": la}
        a = cpu_times()
        time.sleep(window)
        b = cpu_times()
        busy = []
        for pid, (name, t) in b.items():
            if pid == me or pid not in a:
                continue
            pct = 100.0 * (t - a[pid][1]) / hz / window
            if pct > 10.0:
                busy.append((round(pct), name, pid))
        la = loadavg()
        if not busy:
            return {"waited_s": round(time.time() - start, 1), "quiet": "no_busy_process", "loadavg1": la}
        if time.time() - start > limit:
            busy.sort(reverse=True)
            rec = {"waited_s": round(time.time() - start, 1), "quiet": "gave_up", "loadavg1": la,
                   "busy": busy[:8]}
            log(f"  gave up waiting: load {la}, busy {busy[:5]}")
            return rec


def timed(cmd, raw_path, env=None):
    """Runs cmd under /usr/bin/time -v; returns (stdout, stderr, rc, peak_rss_kb, wall_s)."""
    t0 = time.time()
    p = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True, env=env)
    wall = time.time() - t0
    with open(raw_path, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n--- stdout\n" + p.stdout + "\n--- stderr\n" + p.stderr)
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    rss = int(m.group(1)) if m else None
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", p.stderr)
    if m:
        parts = [float(x) for x in m.group(1).split(":")]
        wall = parts[-1] + 60 * parts[-2] + (3600 * parts[-3] if len(parts) > 2 else 0)
    return p.stdout, p.stderr, p.returncode, rss, wall


def run_stream(threads, raw):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="spread")
    out, err, rc, rss, wall = timed([f"{PEER}/stream"], raw, env=env)
    rec = {"program": "stream", "threads": threads, "rc": rc}
    m = re.search(r"best ([\d.]+) GB/s, median ([\d.]+) GB/s", out)
    if m:
        rec["best_GB_s"], rec["median_GB_s"] = float(m.group(1)), float(m.group(2))
    return rec


def run_llama(wtype, gen, raw):
    """One llama-bench process: pp512 and tg<gen> at 1 and 2 threads (one repetition each, after
    llama-bench's own warm-up run of each test). One record per thread count; the peak RSS and the
    wall time are the process's."""
    cmd = [LLAMA_BENCH, "-m", GGUF[wtype], "-t", ",".join(map(str, THREADS)), "-p", str(N_PROMPT),
           "-n", str(gen), "-r", "1", "-o", "jsonl"]
    out, err, rc, rss, wall = timed(cmd, raw)
    recs = {t: {"program": "llama.cpp", "wtype": wtype, "threads": t, "rc": rc, "peak_rss_kb": rss,
                "wall_s": wall} for t in THREADS}
    for line in out.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        j = json.loads(line)
        rec = recs[j["n_threads"]]
        key = "pp" if j["n_prompt"] > 0 else "tg"
        rec[key + "_tok_s"] = j["avg_ts"]
        rec[key + "_ms"] = j["avg_ns"] / 1e6
        rec.setdefault("build_commit", j.get("build_commit"))
        rec.setdefault("model_size", j.get("model_size"))
        rec.setdefault("flash_attn", j.get("flash_attn"))
        rec.setdefault("type_k", j.get("type_k"))
    return list(recs.values())


def diffattn_command(wtype, threads, tokens, gen=None):
    directory, weights = DIFFATTN_MODEL[wtype]
    cmd = [DIFFATTN, "--model", directory, "--weights", weights, "--tokens", tokens, "--threads", str(threads)]
    return cmd + (["--generate", str(gen)] if gen else [])


def diffattn_record(wtype, threads, test, out, rc, rss, wall):
    rec = {"program": "diffattn", "wtype": wtype, "threads": threads, "rc": rc, "peak_rss_kb": rss,
           "wall_s": wall, "test": test}
    m = re.search(r"^weights: (\S+), ([\d.]+) MB stored", out, re.M)
    if m:
        rec["weights"], rec["stored_MB"] = m.group(1), float(m.group(2))
    return rec


def run_diffattn_pp(wtype, threads, raw, prompt):
    out, err, rc, rss, wall = timed(diffattn_command(wtype, threads, " ".join(map(str, prompt))), raw)
    rec = diffattn_record(wtype, threads, "pp", out, rc, rss, wall)
    m = re.search(r"forward: ([\d.]+) ms, ([\d.]+) tokens/s", out)
    if m:
        rec["pp_ms"] = float(m.group(1))
        rec["pp_tok_s"] = N_PROMPT / (rec["pp_ms"] / 1e3)
        # wall = load + warm-up forward + timed forward (+ exit): the load is what is left
        rec["load_s_est"] = wall - 2 * rec["pp_ms"] / 1e3
    return rec


def run_diffattn_tg(wtype, threads, gen, raw):
    # A 1-token prompt: its prefill costs what one decode step costs, so generate(K) = K steps of one
    # token each, like llama-bench's tg (which also starts from one token, BOS).
    out, err, rc, rss, wall = timed(diffattn_command(wtype, threads, "1", gen), raw)
    rec = diffattn_record(wtype, threads, "tg", out, rc, rss, wall)
    m1 = re.search(r"forward: ([\d.]+) ms", out)
    m2 = re.search(r"generation time: ([\d.]+) ms .*?, ([\d.]+) tokens/s", out)
    gen_ids = re.search(r"generated:((?: \d+)*)", out)
    if m1 and m2:
        fwd1 = float(m1.group(1))
        total = float(m2.group(1))
        n = len(gen_ids.group(1).split()) if gen_ids else gen
        rec["n_generated"] = n
        rec["fwd1_ms"] = fwd1
        rec["gen_total_ms"] = total
        rec["tg_tok_s_program"] = float(m2.group(2))  # n / (setup + prefill of 1 token + n-1 decodes)
        rec["tg_tok_s"] = n / (total / 1e3)
        rec["tg_tok_s_decode_only"] = (n - 1) / ((total - fwd1) / 1e3)  # prefill estimated by the 1-token forward
        rec["load_s_est"] = wall - 2 * fwd1 / 1e3 - total / 1e3
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--first-round", type=int, default=1)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--only", choices=["diffattn", "llama"])
    ap.add_argument("--types", default="F32,BF16,Q8_0,Q4_0")
    ap.add_argument("--wait-limit", type=float, default=600, help="seconds to wait for a quiet machine (brief: 600)")
    ap.add_argument("--skip", default="", help="comma-separated items of the first round already done (resume)")
    a = ap.parse_args()
    os.makedirs(f"{a.out}/raw", exist_ok=True)
    logf = open(f"{a.out}/log.txt", "a")

    def log(msg):
        line = time.strftime("%H:%M:%S ") + msg
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    prompt = random.Random(512).sample(range(3, VOCAB), N_PROMPT)
    types = a.types.split(",")
    for r in range(a.first_round, a.first_round + a.rounds):
        # weight type by weight type: diffattn's four runs (pp, tg at 1 and 2 threads), then
        # llama-bench's one; the whole order reversed every other round
        seq = []
        for w in types:
            if a.only != "llama":
                seq += [("d_pp", w, t) for t in THREADS] + [("d_tg", w, t) for t in THREADS]
            if a.only != "diffattn":
                seq.append(("l", w))
        if r % 2 == 0:
            seq.reverse()
        seq = [("s",)] + seq
        for item in seq:
            tag = "_".join(map(str, item))
            if r == a.first_round and tag in a.skip.split(","):
                continue
            q = wait_quiet(log, limit=a.wait_limit)
            raw = f"{a.out}/raw/r{r}_{tag}.txt"
            t0 = time.time()
            if item[0] == "s":
                recs = [run_stream(t, raw.replace(".txt", f"_{t}.txt")) for t in THREADS]
            elif item[0] == "l":
                recs = run_llama(item[1], a.gen, raw)
            elif item[0] == "d_pp":
                recs = [run_diffattn_pp(item[1], item[2], raw, prompt)]
            else:
                recs = [run_diffattn_tg(item[1], item[2], a.gen, raw)]
            for rec in recs:
                rec.update({"round": r, "item": tag, "gen": a.gen, "wait": q,
                            "started": time.strftime("%H:%M:%S", time.localtime(t0)), "loadavg1_after": loadavg()})
                with open(f"{a.out}/runs.jsonl", "a") as f:
                    f.write(json.dumps(rec) + "\n")
                log(f"r{r} {tag} t{rec.get('threads')}: " + ", ".join(
                    f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in rec.items()
                    if k.endswith(("tok_s", "rss_kb", "wall_s", "load_s_est", "rc", "GB_s"))) +
                    f" (waited {q['waited_s']}s, {q['quiet']}, load {q['loadavg1']})")


if __name__ == "__main__":
    main()
