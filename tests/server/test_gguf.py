"""test_gguf.py — `tern serve --model FILE.gguf` on the real
SmolLM2-135M-Instruct Q4_1 GGUF: the model list names the file, and one chat
question through the openai client (greedy) is answered through the GGUF's
own chat template and tokenizer, streamed and not, with Paris. Skipped when
the GGUF is absent (tools/fetch_smollm2_gguf.sh fetches it;
TERN_SMOLLM2_GGUF overrides the cache path).
"""
import os

import openai
import pytest

from conftest import Server

NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF = os.environ.get("TERN_SMOLLM2_GGUF") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tern", NAME)
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]

pytestmark = pytest.mark.skipif(not os.path.exists(GGUF), reason=f"{GGUF} is absent")


@pytest.fixture(scope="module")
def smol():
    s = Server("--device", "cpu", model=GGUF)
    yield s
    assert s.stop() == 0, "".join(s.log)


def client(s):
    return openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)


def test_models(smol):
    ids = [m.id for m in client(smol).models.list().data]
    assert ids == [os.path.basename(GGUF)]


def test_chat(smol):
    r = client(smol).chat.completions.create(model="m", messages=QUESTION, max_tokens=32,
                                             temperature=0)
    c = r.choices[0]
    assert c.message.content == "The capital of France is Paris."
    assert c.finish_reason == "stop"  # <|im_end|>, the GGUF's eos
    assert r.usage.prompt_tokens == 37 and r.usage.completion_tokens == 8


def test_chat_stream(smol):
    text, finish = "", None
    for ch in client(smol).chat.completions.create(model="m", messages=QUESTION, max_tokens=32,
                                                   temperature=0, stream=True):
        for c in ch.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert text == "The capital of France is Paris." and finish == "stop"
