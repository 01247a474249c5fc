#!/usr/bin/env python3
"""http_bench.py — the `tern bench` workload (one sequence: a prompt of
--prompt-len token ids, then --gen greedy tokens) sent through `tern serve`'s
/v1/completions, next to `tern bench` run directly on the same model, to
measure the HTTP server's overhead. Standard library only.

  bench/http_bench.py --tern build/release/tern --model DIR [--prompt-len 128] [--gen 128] [--reps 5]
"""
import argparse
import json
import re
import subprocess
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
    a = ap.parse_args()

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


if __name__ == "__main__":
    main()
