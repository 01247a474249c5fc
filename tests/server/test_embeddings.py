"""test_embeddings.py — POST /v1/embeddings through the official openai client on
a real `tern serve` of tiny-qwen3-embed (a Qwen3-Embedding-style snapshot: last-token
pooling, normalised), against the transformers goldens of
tests/fixtures/models/tiny-qwen3-embed/golden/embeddings.json (within 1e-4): float
and base64 (the client's default) encodings, dimensions (Matryoshka), token-array
inputs, the prompt_name extension, vectors that do not depend on what else runs
(other inputs of the request, concurrent requests, generation beside them), usage,
and the errors, each naming its field; a model that is not an embedding model
answers 400 saying why.
"""
import base64
import json
import math
import os
import struct
import threading

import openai
import pytest
import requests

from conftest import FIXTURES, MODEL, Server

EMBED = os.path.join(FIXTURES, "models", "tiny-qwen3-embed")
with open(os.path.join(EMBED, "golden", "embeddings.json")) as f:
    GOLDEN = json.load(f)["inputs"]
PLAIN = [g for g in GOLDEN if g["prompt_name"] is None and g["text"]]


@pytest.fixture(scope="module")
def emb():
    s = Server("--device", "cpu", "--kv-bytes", "16M", "--max-batch-tokens", "16", model=EMBED)
    yield s
    assert s.stop() == 0, "".join(s.log)


def client(s):
    return openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)


def close(got, want, tol=1e-4):
    scale = max(abs(x) for x in want)
    err = max(abs(a - b) for a, b in zip(got, want)) / scale
    assert len(got) == len(want) and err <= tol, f"max relative error {err:.3g}"


def f32(v):
    """The float32 values of a list (JSON floats are written with 9 digits: exact float32)."""
    return list(struct.unpack(f"<{len(v)}f", struct.pack(f"<{len(v)}f", *v)))


def post(s, body):
    return requests.post(s.url + "/v1/embeddings", json=body, timeout=60)


def test_float(emb):
    r = client(emb).embeddings.create(model="m", input=[g["text"] for g in PLAIN],
                                      encoding_format="float")
    assert r.object == "list" and r.model == "tiny-qwen3-embed"
    assert [d.index for d in r.data] == list(range(len(PLAIN)))
    for d, g in zip(r.data, PLAIN):
        assert d.object == "embedding"
        close(d.embedding, g["last"])
        assert abs(math.sqrt(sum(x * x for x in d.embedding)) - 1) < 1e-5
    n = sum(len(g["ids"]) for g in PLAIN)
    assert r.usage.prompt_tokens == n and r.usage.total_tokens == n


def test_base64_is_the_floats(emb):
    texts = [g["text"] for g in PLAIN]
    floats = client(emb).embeddings.create(model="m", input=texts, encoding_format="float")
    b64 = client(emb).embeddings.create(model="m", input=texts)  # the client asks for base64
    for a, b in zip(floats.data, b64.data):
        assert f32(a.embedding) == b.embedding  # float32 either way, bit for bit
    raw = post(emb, {"input": texts[0], "encoding_format": "base64"}).json()
    s = raw["data"][0]["embedding"]
    assert isinstance(s, str)
    v = struct.unpack(f"<{len(base64.b64decode(s)) // 4}f", base64.b64decode(s))
    assert list(v) == f32(floats.data[0].embedding)


def test_single_string_and_dimensions(emb):
    g = PLAIN[0]
    r = client(emb).embeddings.create(model="m", input=g["text"], dimensions=16,
                                      encoding_format="float")
    assert len(r.data) == 1 and len(r.data[0].embedding) == 16
    close(r.data[0].embedding, g["last16"])
    assert abs(math.sqrt(sum(x * x for x in r.data[0].embedding)) - 1) < 1e-5


def test_token_inputs(emb):
    r = client(emb).embeddings.create(model="m", input=GOLDEN[0]["ids"], encoding_format="float")
    close(r.data[0].embedding, GOLDEN[0]["last"])
    assert r.usage.prompt_tokens == len(GOLDEN[0]["ids"])
    # every golden input as ids, the prompted ones included (ids are taken as they are)
    r = client(emb).embeddings.create(model="m", input=[g["ids"] for g in GOLDEN],
                                      encoding_format="float")
    for d, g in zip(r.data, GOLDEN):
        close(d.embedding, g["last"])


def test_prompt_name(emb):
    for g in GOLDEN:
        if g["prompt_name"] is None or not g["text"]:
            continue
        r = client(emb).embeddings.create(model="m", input=g["text"], encoding_format="float",
                                          extra_body={"prompt_name": g["prompt_name"]})
        close(r.data[0].embedding, g["last"])
        assert r.usage.prompt_tokens == len(g["ids"])


def test_batch_invariance(emb):
    """A vector is bitwise the same alone, among other inputs, and while other
    requests (embeddings and completions) run beside it."""
    c = client(emb)
    texts = [g["text"] for g in PLAIN]
    alone = [c.embeddings.create(model="m", input=t, encoding_format="float").data[0].embedding
             for t in texts]
    together = [d.embedding for d in
                c.embeddings.create(model="m", input=texts, encoding_format="float").data]
    assert together == alone
    results, errors = {}, []

    def embed(k):
        try:
            order = texts[k % len(texts):] + texts[:k % len(texts)]
            r = c.embeddings.create(model="m", input=order, encoding_format="float")
            results[k] = (order, [d.embedding for d in r.data])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    def complete():
        try:
            c.completions.create(model="m", prompt=[5, 6, 7, 8, 9, 10], max_tokens=12)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=embed, args=(k,)) for k in range(6)]
    threads += [threading.Thread(target=complete) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for order, vecs in results.values():
        for t, v in zip(order, vecs):
            assert v == alone[texts.index(t)]
    emb.wait_kv_free()


@pytest.mark.parametrize("body,param,says", [
    ({"input": ""}, "input", "empty"),
    ({"input": []}, "input", "empty"),
    ({"input": ["a", ""]}, "input[1]", "empty"),
    ({"input": [[]]}, "input[0]", "empty"),
    ({"input": 5}, "input", "a string or an array"),
    ({"input": ["a", 3]}, "input[1]", "a string like input[0]"),
    ({"input": [[1, 2], "a"]}, "input[1]", "an array of token ids"),
    ({"input": [1, "a"]}, "input", "token ids"),
    ({"input": [[1, 400]]}, "input[0]", "outside the vocabulary"),
    ({"input": [1.5]}, "input[0]", "got number"),
    ({}, "input", "required"),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format", "base64"),
    ({"input": "a", "dimensions": 0}, "dimensions", "dimensions"),
    ({"input": "a", "dimensions": 65}, "dimensions", "[1, 64]"),
    ({"input": "a", "dimensions": "8"}, "dimensions", "dimensions"),
    ({"input": "a", "model": 3}, "model", "string"),
    ({"input": "a", "prompt_name": "passage"}, "prompt_name", "'query'"),
    ({"input": "fox " * 300}, "input", "context length 256"),
    ({"input": ["a", "fox " * 300]}, "input[1]", "context length 256"),
    ({"input": [list(range(300))]}, "input", "context length 256"),
])
def test_errors(emb, body, param, says):
    r = post(emb, body)
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["param"] == param and says in e["message"], e
    assert e["type"] == "invalid_request_error"


def test_errors_through_the_client(emb):
    with pytest.raises(openai.BadRequestError) as ei:
        client(emb).embeddings.create(model="m", input="")
    assert ei.value.status_code == 400
    body = ei.value.body
    assert (body.get("error", body))["param"] == "input"


def test_not_an_embedding_model(make_server):
    s = make_server("--device", "cpu", model=MODEL)
    r = post(s, {"input": "hello"})
    assert r.status_code == 400
    e = r.json()["error"]
    assert e["param"] == "model"
    assert "does not compute embeddings" in e["message"] and "modules.json" in e["message"]
    with pytest.raises(openai.BadRequestError):
        client(s).embeddings.create(model="m", input="hello")


def test_metrics(emb):
    post(emb, {"input": "hello"})
    m = emb.metrics()
    assert m['tern_http_requests_total{"route": "/v1/embeddings", "status": "200"}'] >= 1
    assert m['tern_route_prompt_tokens_total{"route": "/v1/embeddings"}'] >= 4
