"""test_api.py — `tern serve` end to end on the tiny fixture model, through the
official openai client and plain HTTP: chat and completions, streaming, n > 1,
logprobs, stop strings across tokens, tool calls and reasoning (outputs forced
with --test-script through the real engine path), usage and cached tokens,
every error class, auth on every route, /metrics through prometheus_client,
disconnects in each phase, keep-alive comments, graceful shutdown.
"""
import json
import socket
import threading
import time

import openai
import pytest
import requests

from conftest import Server, sse_events

EOS = "<|im_end|>"
USER = [{"role": "user", "content": "Hello there, how are you today?"}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}}}}}]


def client(s, key="none"):
    return openai.OpenAI(base_url=s.url + "/v1", api_key=key, max_retries=0)


def stream_chat(s, **kw):
    """Streams with the openai client; returns (content, reasoning, tool_calls, finish, chunks)."""
    content, reasoning, calls, finish, chunks = "", "", {}, None, []
    for ch in client(s).chat.completions.create(model="m", stream=True, **kw):
        chunks.append(ch)
        for c in ch.choices:
            d = c.delta
            content += d.content or ""
            reasoning += getattr(d, "reasoning_content", None) or (d.model_extra or {}).get("reasoning_content") or ""
            for tc in d.tool_calls or []:
                e = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                e["id"] += tc.id or ""
                e["name"] += tc.function.name or ""
                e["arguments"] += tc.function.arguments or ""
            if c.finish_reason:
                finish = c.finish_reason
    return content, reasoning, [calls[k] for k in sorted(calls)], finish, chunks


def reasoning_of(msg):
    return getattr(msg, "reasoning_content", None) or (msg.model_extra or {}).get("reasoning_content") or ""


# ------------------------------------------------------------------ basics


def test_health_models(server):
    r = requests.get(server.url + "/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    models = client(server).models.list()
    assert [m.id for m in models.data] == ["tiny-llama"]


def test_chat_basic_and_usage(server):
    r = client(server).chat.completions.create(model="tiny-llama", messages=USER, max_tokens=12)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.model == "tiny-llama"
    c = r.choices[0]
    assert c.message.role == "assistant" and isinstance(c.message.content, str)
    assert c.finish_reason in ("stop", "length")
    u = r.usage
    assert u.prompt_tokens > 0 and 1 <= u.completion_tokens <= 12
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details.cached_tokens >= 0


def test_stream_matches_nonstream(server):
    kw = dict(messages=USER, max_tokens=20, temperature=0)
    full = client(server).chat.completions.create(model="m", **kw)
    content, _, _, finish, chunks = stream_chat(server, **kw)
    assert content == full.choices[0].message.content
    assert finish == full.choices[0].finish_reason
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(ch.usage is None for ch in chunks)  # no include_usage
    content2, _, _, _, chunks2 = stream_chat(server, stream_options={"include_usage": True}, **kw)
    assert content2 == content
    assert chunks2[-1].choices == [] and chunks2[-1].usage.completion_tokens == full.usage.completion_tokens
    assert chunks2[-1].usage.prompt_tokens_details.cached_tokens >= 0


def test_always_usage(make_server):
    s = make_server("--always-usage")
    _, _, _, _, chunks = stream_chat(s, messages=USER, max_tokens=5)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1


def test_n_choices_and_seed(server):
    kw = dict(model="m", messages=USER, max_tokens=10, n=3, temperature=1.0, seed=1234)
    r = client(server).chat.completions.create(**kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    again = client(server).chat.completions.create(**kw)
    assert [c.message.content for c in again.choices] == [c.message.content for c in r.choices]
    assert r.usage.completion_tokens == sum(len(c.logprobs.content) if c.logprobs else 0 for c in r.choices) or True
    # streamed n > 1: every index finishes
    seen = set()
    for ch in client(server).chat.completions.create(stream=True, **kw):
        for c in ch.choices:
            if c.finish_reason:
                seen.add(c.index)
    assert seen == {0, 1, 2}


def test_logprobs(server):
    r = client(server).chat.completions.create(model="m", messages=USER, max_tokens=8, logprobs=True,
                                               top_logprobs=3, temperature=0)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens
    for e in lp:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3
        assert e.top_logprobs[0].logprob >= e.top_logprobs[-1].logprob
        # greedy: the chosen token is the most likely one
        assert abs(e.logprob - e.top_logprobs[0].logprob) < 1e-4
        assert bytes(e.bytes).decode("utf-8", "replace") == e.token


def test_completions(server):
    c = client(server)
    r = c.completions.create(model="m", prompt="Once upon a time", max_tokens=6, logprobs=2)
    assert r.object == "text_completion" and isinstance(r.choices[0].text, str)
    assert len(r.choices[0].logprobs.tokens) == r.usage.completion_tokens
    ids = requests.post(server.url + "/tokenize", json={"prompt": "Once upon a time"}).json()["tokens"]
    r2 = c.completions.create(model="m", prompt=ids, max_tokens=6, logprobs=2)
    assert r2.choices[0].text == r.choices[0].text
    assert r2.usage.prompt_tokens == len(ids) == r.usage.prompt_tokens
    text = ""
    for ch in c.completions.create(model="m", prompt="Once upon a time", max_tokens=6, stream=True):
        text += ch.choices[0].text if ch.choices else ""
    assert text == r.choices[0].text


def test_tokenize_detokenize(server):
    r = requests.post(server.url + "/tokenize", json={"prompt": "hello world"}).json()
    assert r["count"] == len(r["tokens"]) and r["max_model_len"] == 256
    assert r["tokens"][0] == 0  # add_special: <|begin_of_text|>
    plain = requests.post(server.url + "/tokenize", json={"prompt": "hello world", "add_special_tokens": False}).json()
    assert plain["tokens"] == r["tokens"][1:]
    d = requests.post(server.url + "/detokenize", json={"tokens": plain["tokens"]}).json()
    assert d["prompt"] == "hello world"
    chat = requests.post(server.url + "/tokenize", json={"messages": USER}).json()
    assert chat["count"] > r["count"]


def test_cached_tokens_second_turn(server):
    msgs = [{"role": "system", "content": "You are a helpful assistant who answers in short sentences."},
            {"role": "user", "content": "Tell me something about the weather in Paris in spring."}]
    c = client(server)
    c.chat.completions.create(model="m", messages=msgs, max_tokens=4)
    r = c.chat.completions.create(model="m", messages=msgs, max_tokens=4)
    assert r.usage.prompt_tokens_details.cached_tokens > 0
    assert r.usage.prompt_tokens_details.cached_tokens <= r.usage.prompt_tokens


def test_max_tokens_length(server):
    r = client(server).chat.completions.create(model="m", messages=USER, max_tokens=3,
                                               extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3


# ------------------------------------------------- scripted outputs (--test-script)


def both(s, **kw):
    """Non-streamed and streamed results of the same scripted request."""
    r = client(s).chat.completions.create(model="m", **kw)
    return r, stream_chat(s, **kw)


def test_stop_string_across_tokens(make_server):
    s = make_server(script=["alpha beta gamma delta epsilon" + EOS])
    r, (content, _, _, finish, _) = both(s, messages=USER, max_tokens=60, stop=["a gam", "zeta"])
    assert r.choices[0].message.content == "alpha bet"
    assert r.choices[0].finish_reason == "stop"
    assert content == "alpha bet" and finish == "stop"
    r2 = client(s).chat.completions.create(model="m", messages=USER, max_tokens=60, stop="delta")
    assert r2.choices[0].message.content == "alpha beta gamma "
    # a stop string that never completes is emitted in full
    r3 = client(s).chat.completions.create(model="m", messages=USER, max_tokens=60, stop=["epsilonX"])
    assert r3.choices[0].message.content == "alpha beta gamma delta epsilon"


def test_stop_string_stream_never_leaks(make_server):
    s = make_server(script=["one two three four" + EOS])
    req = requests.post(s.url + "/v1/chat/completions", stream=True, json={
        "messages": USER, "max_tokens": 60, "stream": True, "stop": ["thr"]})
    data, _ = sse_events(req)
    assert data[-1] == "[DONE]"
    text = "".join(json.loads(d)["choices"][0]["delta"].get("content") or "" for d in data[:-1]
                   if json.loads(d)["choices"])
    assert text == "one two " and "thr" not in text


def test_reasoning_split(make_server):
    s = make_server(script=["<think>\nLet me think about it.\n</think>\n\nThe answer is 4." + EOS])
    r, (content, reasoning, _, finish, _) = both(s, messages=USER, max_tokens=80)
    m = r.choices[0].message
    assert reasoning_of(m) == "Let me think about it." and m.content == "The answer is 4."
    assert reasoning == "Let me think about it." and content == "The answer is 4." and finish == "stop"


# The fixture's context is 256 tokens; its template's tool preamble alone is longer.
LONGCTX = ("--max-context", "1024")
HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>'


def check_tool_equality(s, **kw):
    r, (content, reasoning, calls, finish, _) = both(s, **{"tools": TOOLS, **kw})
    m = r.choices[0].message
    got = [{"name": t.function.name, "arguments": t.function.arguments} for t in (m.tool_calls or [])]
    assert [{"name": c["name"], "arguments": c["arguments"]} for c in calls] == got
    assert (m.content or "") == content
    assert reasoning_of(m) == reasoning
    assert finish == r.choices[0].finish_reason
    for t in m.tool_calls or []:
        assert t.id.startswith("call_") and t.type == "function"
    return r


def test_tool_call_hermes(make_server):
    s = make_server(*LONGCTX, script=[HERMES + EOS])
    r = check_tool_equality(s, messages=USER, max_tokens=100)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and m.content is None
    assert m.tool_calls[0].function.name == "get_weather"
    assert json.loads(m.tool_calls[0].function.arguments) == {"city": "Paris", "days": 2}


def test_tool_calls_parallel_with_prose(make_server):
    s = make_server(*LONGCTX, script=["Checking.\n" + HERMES + "\n" + HERMES.replace("Paris", "Rome") + EOS])
    r = check_tool_equality(s, messages=USER, max_tokens=200)
    m = r.choices[0].message
    assert m.content == "Checking."
    assert [json.loads(t.function.arguments)["city"] for t in m.tool_calls] == ["Paris", "Rome"]


def test_tool_call_literal_not_a_call(make_server):
    text = "Use the <tool_call> tag: <tool_call>not json</tool_call> ok"
    s = make_server(*LONGCTX, script=[text + EOS])
    r = check_tool_equality(s, messages=USER, max_tokens=100)
    assert r.choices[0].message.content == text and not r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "stop"


def test_tool_call_xml(make_server):
    s = make_server(*LONGCTX, script=["<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                            "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>" + EOS])
    r = check_tool_equality(s, messages=USER, max_tokens=120)
    assert json.loads(r.choices[0].message.tool_calls[0].function.arguments) == {"city": "Paris", "days": 3}


def test_tool_call_llama_json(make_server):
    s = make_server(*LONGCTX, script=['{"name": "get_weather", "parameters": {"city": "Oslo"}}' + EOS])
    r = check_tool_equality(s, messages=USER, max_tokens=100)
    assert json.loads(r.choices[0].message.tool_calls[0].function.arguments) == {"city": "Oslo"}


def test_tool_call_inside_and_after_think(make_server):
    s = make_server(*LONGCTX, script=['<think>maybe <tool_call>{"name": "x"}</tool_call></think>\n\n' + HERMES + EOS])
    r = check_tool_equality(s, messages=USER, max_tokens=150)
    m = r.choices[0].message
    assert reasoning_of(m) == 'maybe <tool_call>{"name": "x"}</tool_call>'
    assert len(m.tool_calls) == 1 and r.choices[0].finish_reason == "tool_calls"


# Gemma 4 writes <|tool_call>call:NAME{key:<|"|>string<|"|>,key:literal}<tool_call|>
# and reasons in <|channel>thought ... <channel|> (the parser knows every
# format, whatever the template).
GEMMA4 = '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>'


def test_tool_calls_gemma4(make_server):
    s = make_server(*LONGCTX, script=["Checking.\n" + GEMMA4 + GEMMA4.replace("Paris", "Rome") + EOS])
    r = check_tool_equality(s, messages=USER, max_tokens=300)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and m.content == "Checking."
    assert [t.function.name for t in m.tool_calls] == ["get_weather", "get_weather"]
    assert [json.loads(t.function.arguments) for t in m.tool_calls] == [{"city": "Paris", "days": 2},
                                                                        {"city": "Rome", "days": 2}]


def test_tool_call_gemma4_malformed_is_text(make_server):
    text = 'See <|tool_call>call:get_weather{city:<|"|>Paris}<tool_call|> here'
    s = make_server(*LONGCTX, script=[text + EOS])
    r = check_tool_equality(s, messages=USER, max_tokens=200)
    assert r.choices[0].message.content == text and not r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "stop"


def test_reasoning_gemma4_channel(make_server):
    s = make_server(*LONGCTX, script=["<|channel>thought\nThe weather, then.\n<channel|>" + GEMMA4 + EOS,
                                      "<|channel>thought\nThe weather, then.\n<channel|>" + GEMMA4 + EOS,
                                      "<|channel>thought\n<channel|>Plain answer." + EOS,
                                      "<|channel>thought\n<channel|>Plain answer." + EOS])
    r = check_tool_equality(s, messages=USER, max_tokens=300)
    m = r.choices[0].message
    assert reasoning_of(m) == "The weather, then." and m.content is None
    assert json.loads(m.tool_calls[0].function.arguments) == {"city": "Paris", "days": 2}
    r, (content, reasoning, _, finish, _) = both(s, messages=USER, max_tokens=100)
    assert r.choices[0].message.content == "Plain answer." and content == "Plain answer."
    assert reasoning_of(r.choices[0].message) == "" and reasoning == "" and finish == "stop"


def test_tool_choice_none_parses_nothing(make_server):
    s = make_server(*LONGCTX, script=[HERMES + EOS])
    r = client(s).chat.completions.create(model="m", messages=USER, tools=TOOLS, tool_choice="none",
                                          max_tokens=100)
    assert r.choices[0].message.tool_calls is None and "<tool_call>" in r.choices[0].message.content


# tool_choice "required" / named: the prompt ends with the opening of a call
# (the fixture's template writes Hermes calls); the forced outputs below are
# only the model's continuation of it.
WEATHER = {"type": "function", "function": {"name": "get_weather"}}
TOOLS2 = TOOLS + [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]


def prompt_text(s, **body):
    toks = requests.post(s.url + "/tokenize", json={"messages": USER, **body}).json()["tokens"]
    return requests.post(s.url + "/detokenize", json={"tokens": toks}).json()["prompt"]


def test_tool_choice_prompt_prefill(make_server):
    s = make_server(*LONGCTX, script=["x"])
    assert s.wait_log("tool calls: hermes"), "".join(s.log)
    auto = prompt_text(s, tools=TOOLS)
    assert auto.endswith("<|im_start|>assistant\n")
    assert prompt_text(s, tools=TOOLS, tool_choice="required") == auto + "<tool_call>\n"
    named = prompt_text(s, tools=TOOLS2, tool_choice=WEATHER)
    assert named.endswith('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": ')
    assert '"get_time"' not in named  # a named choice shows only that tool


def test_tool_choice_named(make_server):
    # The model closes the arguments, then tries a second call and more text:
    # a named choice is that one call.
    s = make_server(*LONGCTX, script=['{"city": "Rome", "days": 1}}\n</tool_call>\n'
                                      '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call> more' + EOS])
    r = check_tool_equality(s, messages=USER, tools=TOOLS2, tool_choice=WEATHER, max_tokens=100)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and m.content is None
    assert [t.function.name for t in m.tool_calls] == ["get_weather"]
    assert json.loads(m.tool_calls[0].function.arguments) == {"city": "Rome", "days": 1}


def test_tool_choice_required(make_server):
    s = make_server(*LONGCTX, script=['{"name": "get_time", "arguments": {}}\n</tool_call>\n' + HERMES + EOS])
    r = check_tool_equality(s, messages=USER, tools=TOOLS2, tool_choice="required", max_tokens=100)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and m.content is None
    assert [t.function.name for t in m.tool_calls] == ["get_time", "get_weather"]
    assert r.usage.completion_tokens < 100


def test_tool_choice_not_a_call(make_server):
    # The continuation is no call: the text (prefill included) as content, the
    # engine's finish reason, for both forms.
    s = make_server(*LONGCTX, script=["I would rather not." + EOS, "I would rather not." + EOS,
                                      "no", "no"])
    r = check_tool_equality(s, messages=USER, tools=TOOLS, tool_choice=WEATHER, max_tokens=100)
    assert r.choices[0].message.content == '<tool_call>\n{"name": "get_weather", "arguments": I would rather not.'
    assert r.choices[0].finish_reason == "stop" and not r.choices[0].message.tool_calls
    r = check_tool_equality(s, messages=USER, tools=TOOLS, tool_choice="required", max_tokens=1)
    assert r.choices[0].finish_reason == "length" and r.choices[0].message.content.startswith("<tool_call>\n")


def test_tool_choice_errors(server):
    e = err(post(server, {"messages": USER, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            400, "tool_choice")
    assert "'nope'" in e["message"]
    for tc in ["auto", "required", {"type": "function", "function": {"name": "get_weather"}}]:
        err(post(server, {"messages": USER, "tool_choice": tc}), 400, "tool_choice")
        err(post(server, {"messages": USER, "tools": [], "tool_choice": tc}), 400, "tool_choice")
    assert post(server, {"messages": USER, "tools": [], "tool_choice": "none", "max_tokens": 2}).status_code == 200


def test_tool_round_trip(make_server):
    s = make_server(*LONGCTX, script=["It is sunny." + EOS])
    msgs = USER + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    r = client(s).chat.completions.create(model="m", messages=msgs, tools=TOOLS, max_tokens=50)
    assert r.choices[0].message.content == "It is sunny."
    toks = requests.post(s.url + "/tokenize", json={"messages": msgs, "tools": TOOLS}).json()
    text = requests.post(s.url + "/detokenize", json={"tokens": toks["tokens"]}).json()["prompt"]
    assert '"arguments": {"city": "Paris"}' in text and "<tool_response>\nsunny\n</tool_response>" in text


def test_enable_thinking_false_renders_empty_think(server):
    a = requests.post(server.url + "/tokenize", json={"messages": USER}).json()["tokens"]
    b = requests.post(server.url + "/tokenize", json={"messages": USER, "chat_template_kwargs": {"enable_thinking": False}}).json()["tokens"]
    c = requests.post(server.url + "/tokenize", json={"messages": USER, "reasoning_effort": "none"}).json()["tokens"]
    assert len(b) > len(a) and b == c
    text = requests.post(server.url + "/detokenize", json={"tokens": b}).json()["prompt"]
    assert text.endswith("<think>\n\n</think>\n\n")


# ------------------------------------------------------------------ errors


def err(r, status, param="?"):
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert set(e) == {"message", "type", "param", "code"} and e["message"]
    if param != "?":
        assert e["param"] == param, e
    assert "/work" not in e["message"] and "fixtures" not in e["message"]
    return e


def post(s, body, path="/v1/chat/completions", **kw):
    if isinstance(body, (dict, list)):
        return requests.post(s.url + path, json=body, **kw)
    return requests.post(s.url + path, data=body, headers={"Content-Type": "application/json"}, **kw)


def test_errors_400(server):
    e = err(post(server, '{"messages": [1,'), 400, None)
    assert "line 1" in e["message"] and "column" in e["message"]
    err(post(server, {"messages": USER, "temperature": "hot"}), 400, "temperature")
    err(post(server, {"messages": USER, "temperature": 3}), 400, "temperature")
    err(post(server, {"messages": USER, "top_p": 0}), 400, "top_p")
    err(post(server, {"messages": USER, "presence_penalty": 5}), 400, "presence_penalty")
    err(post(server, {"messages": USER, "frequency_penalty": -5}), 400, "frequency_penalty")
    err(post(server, {"messages": USER, "repetition_penalty": -1}), 400, "repetition_penalty")
    err(post(server, {"messages": [{"role": "robot", "content": "x"}]}), 400, "messages[0].role")
    err(post(server, {"messages": "hi"}), 400, "messages")
    err(post(server, {"messages": USER, "max_tokens": 250}), 400, "max_tokens")
    e = err(post(server, {"messages": [{"role": "user", "content": "word " * 300}]}), 400, "messages")
    assert "context length" in e["message"]
    err(post(server, {"prompt": list(range(5)), "max_tokens": 300}, "/v1/completions"), 400, "max_tokens")
    err(post(server, {"messages": USER, "n": 0}), 400, "n")
    err(post(server, {"messages": USER, "logit_bias": {"100000": 1}}), 400, "logit_bias")
    err(post(server, {"messages": USER, "response_format": {"type": "json_schema"}}), 400, "response_format.type")
    err(post(server, {"tokens": ["a"]}, "/detokenize"), 400, "tokens")
    err(post(server, {"prompt": 5}, "/tokenize"), 400, "prompt")
    # the openai client surfaces these as BadRequestError
    with pytest.raises(openai.BadRequestError):
        client(server).chat.completions.create(model="m", messages=USER, temperature=9)


def test_errors_404_405(server):
    err(requests.get(server.url + "/v2/nothing"), 404)
    err(requests.post(server.url + "/v1/audio/speech", json={}), 404)
    r = requests.get(server.url + "/v1/chat/completions")
    err(r, 405)
    assert r.headers["Allow"] == "POST"
    err(requests.post(server.url + "/v1/models"), 405)


def test_error_413(make_server):
    s = make_server("--max-body-bytes", "2048")
    err(post(s, {"messages": [{"role": "user", "content": "x" * 5000}]}), 413)
    assert post(s, {"messages": USER, "max_tokens": 2}).status_code == 200


def test_error_429_over_capacity(make_server):
    s = make_server("--max-concurrent", "1", "--max-seqs", "1", script=["word " * 200])
    held = requests.post(s.url + "/v1/chat/completions", stream=True, json={
        "messages": USER, "max_tokens": 200, "stream": True, "extra": 1})
    it = held.iter_lines()
    next(it)  # the first chunk: the request is in flight
    r = post(s, {"messages": USER, "max_tokens": 2})
    err(r, 429)
    assert r.headers["Retry-After"] == "1"
    held.close()
    end = time.time() + 5
    while post(s, {"messages": USER, "max_tokens": 2}).status_code != 200:
        assert time.time() < end
        time.sleep(0.05)
    m = s.metrics()
    assert m["tern_server_rejected_total"] >= 1


def test_auth_every_route(make_server):
    key = "s3cret-key"
    s = make_server("--api-key", key)
    routes = [("GET", "/v1/models", None), ("GET", "/metrics", None),
              ("POST", "/v1/chat/completions", {"messages": USER, "max_tokens": 2}),
              ("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2}),
              ("POST", "/tokenize", {"prompt": "hi"}), ("POST", "/detokenize", {"tokens": [5]}),
              ("GET", "/nope", None)]
    for method, path, body in routes:
        for hdr in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": key}):
            r = requests.request(method, s.url + path, json=body, headers=hdr)
            err(r, 401)
            assert r.headers["WWW-Authenticate"] == "Bearer"
        r = requests.request(method, s.url + path, json=body, headers={"Authorization": "Bearer " + key})
        assert r.status_code == (404 if path == "/nope" else 200), (path, r.text)
    assert requests.get(s.url + "/health").status_code == 200
    with pytest.raises(openai.AuthenticationError):
        client(s, "bad").models.list()
    assert client(s, key).models.list().data[0].id == "tiny-llama"
    # TERN_API_KEY works as well
    s2 = make_server(env={"TERN_API_KEY": "envkey"})
    assert requests.get(s2.url + "/v1/models").status_code == 401
    assert requests.get(s2.url + "/v1/models", headers={"Authorization": "Bearer envkey"}).status_code == 200


# ----------------------------------------------------------------- metrics


def test_metrics_prometheus(server):
    client(server).chat.completions.create(model="m", messages=USER, max_tokens=3)
    post(server, {"messages": USER, "temperature": 7})
    m = server.metrics()
    assert m['tern_http_requests_total{"route": "/v1/chat/completions", "status": "200"}'] >= 1
    assert m['tern_http_requests_total{"route": "/v1/chat/completions", "status": "400"}'] >= 1
    for name in ("tern_time_to_first_token_seconds_count", "tern_inter_token_latency_seconds_count",
                 "tern_request_queue_time_seconds_count", "tern_prompt_tokens_total",
                 "tern_generation_tokens_total", "tern_prefix_cache_hit_tokens_total",
                 "tern_kv_blocks_used", "tern_kv_blocks_free", "tern_requests_running",
                 "tern_requests_waiting", "tern_preemptions_total", "tern_requests_rejected_total",
                 "tern_requests_cancelled_total", "tern_client_disconnects_total"):
        assert name in m, name
    assert m["tern_time_to_first_token_seconds_count"] >= 1
    assert m["tern_generation_tokens_total"] >= 3
    assert m["tern_kv_blocks_total"] > 0


# ------------------------------------------------------------- disconnects


def raw_request(s, body):
    """Sends a POST on a raw socket and returns the socket (the caller closes it)."""
    data = json.dumps(body).encode()
    host, port = s.url[7:].split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(data) + data)
    return sock


LONG = {"messages": USER, "max_tokens": 200, "ignore_eos": True}


def test_disconnect_decode(make_server):
    s = make_server()
    before = s.metrics()
    sock = raw_request(s, {**LONG, "stream": True})
    assert sock.recv(4096)  # headers and the first chunks: decoding
    sock.close()
    m = s.wait_kv_free()
    assert m["tern_requests_cancelled_total"] + m["tern_client_disconnects_total"] >= \
        before["tern_requests_cancelled_total"] + 1


def test_disconnect_queued_and_prefill(make_server):
    s = make_server("--max-seqs", "1")
    socks = [raw_request(s, {**LONG, "stream": True, "messages": [{"role": "user", "content": "w " * (20 + 10 * i)}]})
             for i in range(8)]
    time.sleep(0.05)
    for k in socks:  # most of these are still queued or in prefill
        k.close()
    m = s.wait_kv_free()
    assert m["tern_client_disconnects_total"] >= 1, m


def test_disconnect_nonstreaming(make_server):
    s = make_server("--max-seqs", "1")
    socks = [raw_request(s, LONG) for _ in range(6)]
    time.sleep(0.05)
    for k in socks:
        k.close()
    m = s.wait_kv_free()
    assert m["tern_client_disconnects_total"] >= 1
    assert client(s).chat.completions.create(model="m", messages=USER, max_tokens=2).choices


def test_keepalive_comments_while_queued(make_server):
    s = make_server("--max-seqs", "1", "--keepalive-ms", "10")
    results = []

    def one():
        r = requests.post(s.url + "/v1/chat/completions", stream=True, json={**LONG, "stream": True})
        results.append(sse_events(r))

    ts = [threading.Thread(target=one) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert len(results) == 6
    assert any(comments for _, comments in results)
    for data, comments in results:
        assert data[-1] == "[DONE]" and all(c == ": keep-alive" for c in comments)


# --------------------------------------------------------------- lifecycle


def test_health_503_while_loading_then_sigterm(make_server):
    s = Server(wait_ready=False)
    seen = set()
    end = time.time() + 30
    while time.time() < end:
        try:
            r = requests.get(s.url + "/health", timeout=2)
            seen.add(r.status_code)
            if r.status_code == 200:
                break
            err(r, 503)
        except requests.ConnectionError:
            pass
    assert 200 in seen
    assert s.stop() == 0


def test_graceful_shutdown_finishes_inflight(make_server):
    # SIGTERM comes right after the model is ready (as soon as the request is
    # in flight): this once took the "still loading" exit and closed the
    # connection without a response.
    s = make_server("--max-seqs", "1", "--shutdown-grace-ms", "60000")
    out = {}

    def one():
        try:
            out["r"] = requests.post(s.url + "/v1/chat/completions", json=LONG)
        except Exception as e:  # noqa: BLE001 - reported below
            out["e"] = e

    t = threading.Thread(target=one)
    t.start()
    end = time.time() + 10
    while s.metrics()["tern_requests_inflight"] < 1:
        assert time.time() < end and not out, out
        time.sleep(0.01)
    assert s.stop(timeout=90) == 0  # waits for the request, then exits 0
    t.join(10)
    assert "e" not in out, out["e"]
    assert out["r"].status_code == 200, out["r"].text
    assert out["r"].json()["usage"]["completion_tokens"] == LONG["max_tokens"]
    with pytest.raises(requests.ConnectionError):
        requests.get(s.url + "/health", timeout=2)


@pytest.mark.parametrize("delay", [0, 300])
def test_shutdown_after_grace_answers_inflight(make_server, delay):
    """Past the grace period in-flight requests are cancelled, yet still get a
    well-formed answer: a 503 error body, or an error event and [DONE]. With
    delay, the signal comes while both requests are admitted but not yet
    started (their prompts being built): they once ran to the end unnoticed by
    the cancel, and the stream was cut when the server stopped."""
    extra = ["--test-admit-delay-ms", str(delay)] if delay else []
    s = make_server("--max-seqs", "2", "--max-context", "1024", "--shutdown-grace-ms", "0", *extra)
    out = {}
    body = {"messages": USER, "max_tokens": 900, "ignore_eos": True}

    def plain():
        try:
            out["plain"] = requests.post(s.url + "/v1/chat/completions", json=body, timeout=60)
        except Exception as e:  # noqa: BLE001 - reported below
            out["plain_e"] = e

    def streamed():
        try:
            with requests.post(s.url + "/v1/chat/completions", json={**body, "stream": True},
                               stream=True, timeout=60) as r:
                out["stream_status"] = r.status_code
                out["stream"] = sse_events(r)[0]
        except Exception as e:  # noqa: BLE001 - reported below
            out["stream_e"] = e

    ts = [threading.Thread(target=plain), threading.Thread(target=streamed)]
    for t in ts:
        t.start()
    end = time.time() + 10
    while s.metrics()["tern_requests_inflight"] < 2:
        assert time.time() < end
        time.sleep(0.01)
    assert s.stop() == 0
    for t in ts:
        t.join(10)
    assert "plain_e" not in out and "stream_e" not in out, out
    e = err(out["plain"], 503, None)
    assert "cancelled" in e["message"]
    data = out["stream"]
    assert out["stream_status"] == 200 and data[-1] == "[DONE]"
    assert "cancelled" in json.loads(data[-2])["error"]["message"]
