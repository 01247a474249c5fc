#!/usr/bin/env python3
"""http_bench.py — the `tern bench` workload (one sequence: a prompt of
--prompt-len token ids, then --gen greedy tokens) sent through `tern serve`'s
/v1/completions, next to `tern bench` run directly on the same model, to
measure the HTTP server's overhead. Standard library only.

  bench/http_bench.py --tern build/release/tern --model DIR [--prompt-len 128] [--gen 128] [--reps 5]

With --concurrency N[,N...] it runs the concurrent workload instead: per level,
`tern bench --concurrency N --seed R` (the direct path, N requests submitted at
once through the serving API) and N simultaneous POST /v1/completions
(non-streamed; with --stream also streamed, TTFT from the first SSE token) of
distinct random-id prompts, fresh for every request of every rep, so the prefix
cache never hits. Output tok/s = N * gen / wall (first send -> last response).
Each side runs --reps times (one warm-up request first on the server); the
medians are printed as one JSON line per level.
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import threading
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tern", default="build/release/tern")
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--concurrency", help="N[,N...]: the concurrent workload")
    ap.add_argument("--stream", action="store_true", help="concurrent: also time streamed requests")
    a = ap.parse_args()
    if a.concurrency:
        return concurrent(a, [int(x) for x in a.concurrency.split(",")])

    direct = subprocess.run([a.tern, "bench", "--model", a.model, "--prompt-len", str(a.prompt_len),
                             "--gen", str(a.gen), "--reps", str(a.reps), "--json"],
                            capture_output=True, text=True)
    print("direct (tern bench):", direct.stdout.strip() or direct.stderr.strip())

    p = subprocess.Popen([a.tern, "serve", "--model", a.model, "--port", "0",
                          "--max-context", str(a.prompt_len + a.gen + 8)], stderr=subprocess.PIPE, text=True)
    try:
        port = re.search(r":(\d+) ", p.stderr.readline()).group(1)
        url = f"http://127.0.0.1:{port}"
        while True:
            try:
                if urllib.request.urlopen(url + "/health").status == 200:
                    break
            except Exception:  # noqa: BLE001 - 503 while loading
                time.sleep(0.1)
        ids = [(7 * i + 3) % 200 + 10 for i in range(a.prompt_len)]
        body = {"prompt": ids, "max_tokens": a.gen, "ignore_eos": True, "temperature": 0}
        post(url + "/v1/completions", body)  # warm-up
        times = []
        for _ in range(a.reps):
            t = time.perf_counter()
            r = post(url + "/v1/completions", body)
            times.append(time.perf_counter() - t)
            assert r["usage"]["completion_tokens"] == a.gen
        best = min(times)
        print(json.dumps({"http_request_s_best": best, "http_tokens_per_s": a.gen / best,
                          "prompt_len": a.prompt_len, "gen": a.gen, "reps": a.reps}))
    finally:
        p.terminate()
        p.wait()


def start_server(a, extra=()):
    p = subprocess.Popen([a.tern, "serve", "--model", a.model, "--port", "0", *extra],
                         stderr=subprocess.PIPE, text=True)
    port = re.search(r":(\d+) ", p.stderr.readline()).group(1)
    threading.Thread(target=lambda: p.stderr.read(), daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    while True:
        try:
            if urllib.request.urlopen(url + "/health").status == 200:
                return p, url
        except Exception:  # noqa: BLE001 - 503 while loading
            time.sleep(0.1)


def stream_ttft(url, body):
    """Streams one completion; returns (time to the first text chunk, tokens)."""
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    t, first, n = time.perf_counter(), None, 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if line.startswith(b"data: {") and b'"text"' in line:
                n += 1
                if first is None:
                    first = time.perf_counter() - t
    return first, n


def http_level(url, n, a, rng, vocab, stream):
    """N simultaneous requests of fresh prompts; returns (wall s, median TTFT s or None)."""
    bodies = [{"prompt": [rng.randrange(10, vocab) for _ in range(a.prompt_len)], "max_tokens": a.gen,
               "ignore_eos": True, "temperature": 0} for _ in range(n)]
    out = [None] * n

    def one(i):
        if stream:
            out[i] = stream_ttft(url, bodies[i])
        else:
            out[i] = post(url + "/v1/completions", bodies[i])["usage"]["completion_tokens"]

    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t = time.perf_counter()
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    wall = time.perf_counter() - t
    if stream:
        return wall, statistics.median(o[0] for o in out)
    assert all(o == a.gen for o in out), out
    return wall, None


def concurrent(a, levels):
    with open(os.path.join(a.model, "config.json")) as f:
        vocab = min(json.load(f)["vocab_size"], 32000)
    rng = random.Random(1234)
    for n in levels:
        direct = []
        for rep in range(a.reps):
            r = subprocess.run([a.tern, "bench", "--model", a.model, "--concurrency", str(n), "--prompt-len",
                                str(a.prompt_len), "--gen", str(a.gen), "--seed", str(rep + 1), "--json"],
                               capture_output=True, text=True, check=True)
            direct.append(json.loads(r.stdout)["results"][0])
        seqs = direct[0]["max_seqs"]
        p, url = start_server(a, ["--max-seqs", str(seqs), "--max-context", str(a.prompt_len + a.gen + 8)])
        try:
            http_level(url, 1, a, rng, vocab, False)  # warm-up
            walls = [http_level(url, n, a, rng, vocab, False)[0] for _ in range(a.reps)]
            sse = [http_level(url, n, a, rng, vocab, True) for _ in range(a.reps)] if a.stream else []
        finally:
            p.terminate()
            p.wait()
        med = statistics.median
        res = {"concurrency": n, "max_seqs": seqs, "prompt_len": a.prompt_len, "gen": a.gen, "reps": a.reps,
               "direct_output_tok_s": med(d["output_tok_s"] for d in direct),
               "direct_wall_s": med(d["wall_s"] for d in direct),
               "direct_ttft_p50_ms": med(d["ttft_p50_ms"] for d in direct),
               "direct_cached_tokens": sum(d["cached_tokens"] for d in direct),
               "http_output_tok_s": n * a.gen / med(walls), "http_wall_s": med(walls),
               "http_walls_s": [round(w, 4) for w in walls],
               "direct_walls_s": [round(d["wall_s"], 4) for d in direct]}
        if sse:
            res["sse_wall_s"] = med(w for w, _ in sse)
            res["sse_ttft_p50_ms"] = 1000 * med(t for _, t in sse)
        res["overhead_pct"] = 100 * (res["http_wall_s"] / res["direct_wall_s"] - 1)
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
