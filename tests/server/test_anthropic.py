"""test_anthropic.py — the Anthropic Messages API of `tern serve` end to end
through the official anthropic client on the tiny fixture model, with outputs
forced by --test-script: plain and streamed messages (the client's stream
helper assembles the final message, which must equal the non-streamed one),
thinking blocks, stop sequences, max_tokens, tool use and a several-turn agent
loop, tool_choice, count_tokens, errors in Anthropic's shape, x-api-key, and
the per-route metrics.
"""
import json

import anthropic
import pytest
import requests

from conftest import Server

EOS = "<|im_end|>"
USER = [{"role": "user", "content": "Hello there, how are you today?"}]
TOOLS = [{"name": "get_weather", "description": "Weather",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
LONGCTX = ("--max-context", "1024")


def call(name, args):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def client(s, key="none"):
    return anthropic.Anthropic(base_url=s.url, api_key=key, max_retries=0)


def blocks(msg):
    """Content blocks without the random tool ids."""
    out = []
    for b in msg.content:
        d = b.model_dump(exclude_none=True)
        if d["type"] == "tool_use":
            assert d.pop("id").startswith("toolu_")
        d.pop("citations", None)
        out.append(d)
    return out


def both(s, **kw):
    """The non-streamed message and the stream helper's final message, which must agree."""
    kw.setdefault("model", "tiny-llama")
    kw.setdefault("max_tokens", 100)
    full = client(s).messages.create(**kw)
    events = []
    with client(s).messages.stream(**kw) as st:
        for ev in st:
            events.append(ev.type)
        final = st.get_final_message()
    assert blocks(full) == blocks(final)
    assert (full.stop_reason, full.stop_sequence) == (final.stop_reason, final.stop_sequence)
    assert full.usage.output_tokens == final.usage.output_tokens
    assert full.usage.input_tokens + full.usage.cache_read_input_tokens == \
        final.usage.input_tokens + final.usage.cache_read_input_tokens
    return full, events


def test_plain_and_stream(make_server):
    s = make_server(script=["Hello from tern." + EOS])
    m, events = both(s, messages=USER)
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert m.model == "tiny-llama"
    assert blocks(m) == [{"type": "text", "text": "Hello from tern."}]
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0
    assert m.usage.cache_creation_input_tokens == 0 and m.usage.cache_read_input_tokens >= 0
    # the raw event grammar
    raw = [e for e in events if e in ("message_start", "content_block_start", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop")]
    assert raw[0] == "message_start" and raw[-2:] == ["message_delta", "message_stop"]
    assert raw[1] == "content_block_start" and raw[-3] == "content_block_stop"


def test_raw_sse_lines(make_server):
    s = make_server(script=["abc" + EOS])
    r = requests.post(s.url + "/v1/messages", stream=True, json={
        "model": "m", "max_tokens": 20, "stream": True, "messages": USER})
    assert r.headers["Content-Type"].startswith("text/event-stream")
    lines = [l for l in r.iter_lines(decode_unicode=True) if l]
    names = [l[7:] for l in lines if l.startswith("event: ")]
    datas = [json.loads(l[6:]) for l in lines if l.startswith("data: ")]
    assert len(names) == len(datas) and all(d["type"] == n for n, d in zip(names, datas))
    assert names[:2] == ["message_start", "ping"] and names[-1] == "message_stop"
    text = "".join(d["delta"]["text"] for d in datas if d["type"] == "content_block_delta")
    assert text == "abc"
    md = [d for d in datas if d["type"] == "message_delta"][0]
    assert md["delta"]["stop_reason"] == "end_turn" and md["usage"]["output_tokens"] >= 1


def test_thinking(make_server):
    s = make_server(script=["<think>\nLet me see.\n</think>\n\nFour." + EOS])
    m, events = both(s, messages=USER, thinking={"type": "enabled", "budget_tokens": 50})
    b = blocks(m)
    assert b[0]["type"] == "thinking" and b[0]["thinking"] == "Let me see." and b[0]["signature"]
    assert b[1] == {"type": "text", "text": "Four."}
    assert "thinking" in events and "signature" in events  # thinking_delta, signature_delta
    # thinking enabled / disabled reach the template's enable_thinking
    c = client(s)
    on = c.messages.count_tokens(model="m", messages=USER, thinking={"type": "enabled", "budget_tokens": 50})
    off = c.messages.count_tokens(model="m", messages=USER)
    assert off.input_tokens > on.input_tokens  # disabled renders an empty <think></think>
    # a thinking block sent back is accepted
    follow = USER + [{"role": "assistant", "content": [{"type": "thinking", "thinking": "Let me see.",
                                                        "signature": b[0]["signature"]},
                                                       {"type": "text", "text": "Four."}]},
                     {"role": "user", "content": "Why?"}]
    assert c.messages.count_tokens(model="m", messages=follow).input_tokens > off.input_tokens


def test_stop_sequences(make_server):
    s = make_server(script=["alpha beta gamma delta" + EOS])
    m, _ = both(s, messages=USER, stop_sequences=["a gam", "zeta"])
    assert blocks(m) == [{"type": "text", "text": "alpha bet"}]
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "a gam"


def test_max_tokens(make_server):
    s = make_server(script=["one two three four five six seven" + EOS])
    m, _ = both(s, messages=USER, max_tokens=3)
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 3


def test_tool_use_round_trip(make_server):
    s = make_server(*LONGCTX, script=["Let me check.\n" + call("get_weather", {"city": "Paris"}) + EOS])
    m, _ = both(s, messages=USER, tools=TOOLS)
    assert m.stop_reason == "tool_use"
    assert blocks(m) == [{"type": "text", "text": "Let me check."},
                         {"type": "tool_use", "name": "get_weather", "input": {"city": "Paris"}}]
    use = m.content[1]
    s2 = make_server(*LONGCTX, script=["It is sunny in Paris." + EOS])
    msgs = USER + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                 "content": "sunny, 21 C"}]}]
    r = client(s2).messages.create(model="m", max_tokens=50, messages=msgs, tools=TOOLS)
    assert blocks(r) == [{"type": "text", "text": "It is sunny in Paris."}] and r.stop_reason == "end_turn"
    # the result reached the prompt as a tool response (block content and is_error too)
    n = client(s2).messages.count_tokens(model="m", messages=msgs, tools=TOOLS).input_tokens
    msgs[-1]["content"][0]["content"] = [{"type": "text", "text": "sunny, 21 C"}]
    assert client(s2).messages.count_tokens(model="m", messages=msgs, tools=TOOLS).input_tokens == n
    msgs[-1]["content"][0]["is_error"] = True
    assert client(s2).messages.count_tokens(model="m", messages=msgs, tools=TOOLS).input_tokens > n


def test_agent_loop(make_server):
    """An agent loop of several tool turns through the Anthropic protocol completes."""
    script = [call("get_weather", {"city": "Paris"}) + EOS,
              call("get_weather", {"city": "Rome"}) + EOS,
              "Checking Oslo too.\n" + call("get_weather", {"city": "Oslo"}) + EOS,
              "Paris, Rome and Oslo are sunny." + EOS]
    s = make_server(*LONGCTX, script=script)
    c = client(s)
    msgs = [{"role": "user", "content": "Weather in three cities?"}]
    cities, turns = [], 0
    while True:
        turns += 1
        with c.messages.stream(model="m", max_tokens=100, messages=msgs, tools=TOOLS) as st:
            m = st.get_final_message()
        msgs.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]})
        if m.stop_reason != "tool_use":
            break
        results = []
        for b in m.content:
            if b.type == "tool_use":
                cities.append(b.input["city"])
                results.append({"type": "tool_result", "tool_use_id": b.id, "content": "sunny"})
        msgs.append({"role": "user", "content": results})
        assert turns < 10
    assert turns == 4 and cities == ["Paris", "Rome", "Oslo"]
    assert m.stop_reason == "end_turn" and m.content[0].text == "Paris, Rome and Oslo are sunny."


def test_tool_choice(make_server):
    s = make_server(*LONGCTX, script=['{"city": "Rome"}}\n</tool_call>' + EOS])
    m = client(s).messages.create(model="m", max_tokens=60, messages=USER, tools=TOOLS,
                                  tool_choice={"type": "tool", "name": "get_weather"})
    assert m.stop_reason == "tool_use" and m.content[0].input == {"city": "Rome"}
    s2 = make_server(*LONGCTX, script=['{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' + EOS])
    m = client(s2).messages.create(model="m", max_tokens=60, messages=USER, tools=TOOLS,
                                   tool_choice={"type": "any"})
    assert m.stop_reason == "tool_use" and m.content[0].input == {"city": "Oslo"}
    s3 = make_server(*LONGCTX, script=[call("get_weather", {"city": "Oslo"}) + EOS])
    m = client(s3).messages.create(model="m", max_tokens=60, messages=USER, tools=TOOLS,
                                   tool_choice={"type": "none"})
    assert m.stop_reason == "end_turn" and "<tool_call>" in m.content[0].text


def aerr(r, status, etype, needle):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == etype, body
    assert needle in body["error"]["message"], body
    return body


def test_errors(server):
    url = server.url + "/v1/messages"
    aerr(requests.post(url, json={"model": "m", "messages": USER}), 400, "invalid_request_error", "max_tokens")
    aerr(requests.post(url, json={"model": "m", "max_tokens": 5, "messages": USER, "temperature": 1.5}),
         400, "invalid_request_error", "temperature")
    aerr(requests.post(url, json={"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                   "data": "AAAA"}}]}]}),
         400, "invalid_request_error", "messages[0].content[0]")
    aerr(requests.post(url, json={"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}),
         400, "invalid_request_error", "messages[0].role")
    aerr(requests.post(url, json={"model": "m", "max_tokens": 5, "messages": USER, "thinking": {"type": "enabled"}}),
         400, "invalid_request_error", "budget_tokens")
    aerr(requests.post(url, json={"model": "m", "max_tokens": 5, "messages": USER, "tool_choice": {"type": "any"}}),
         400, "invalid_request_error", "tool_choice")
    aerr(requests.post(url, data="{bad", headers={"Content-Type": "application/json"}), 400,
         "invalid_request_error", "invalid JSON")
    aerr(requests.post(url, json={"model": "m", "max_tokens": 5000, "messages": USER}), 400,
         "invalid_request_error", "max_tokens")
    aerr(requests.get(url), 405, "invalid_request_error", "POST")
    with pytest.raises(anthropic.BadRequestError) as ei:
        client(server).messages.create(model="m", max_tokens=5, messages=USER, extra_body={"temperature": 1.5})
    assert "temperature" in str(ei.value)


def test_auth_x_api_key(make_server):
    s = make_server("--api-key", "sekret", script=["ok" + EOS])
    with pytest.raises(anthropic.AuthenticationError):
        client(s, key="wrong").messages.create(model="m", max_tokens=5, messages=USER)
    aerr(requests.post(s.url + "/v1/messages", json={}), 401, "authentication_error", "API key")
    m = client(s, key="sekret").messages.create(model="m", max_tokens=5, messages=USER)
    assert m.content[0].text == "ok"
    r = requests.post(s.url + "/v1/messages", headers={"x-api-key": "sekret", "anthropic-version": "2023-06-01"},
                      json={"model": "m", "max_tokens": 5, "messages": USER})
    assert r.status_code == 200
    r = requests.post(s.url + "/v1/chat/completions", headers={"x-api-key": "sekret"},
                      json={"messages": USER, "max_tokens": 2})
    assert r.status_code == 200


def test_metrics_by_route(make_server):
    s = make_server(script=["Hello." + EOS])
    m = client(s).messages.create(model="m", max_tokens=20, messages=USER)
    client(s).messages.count_tokens(model="m", messages=USER)
    requests.post(s.url + "/v1/messages", json={"messages": USER})
    got = s.metrics()
    assert got['tern_http_requests_total{"route": "/v1/messages", "status": "200"}'] == 1
    assert got['tern_http_requests_total{"route": "/v1/messages", "status": "400"}'] == 1
    assert got['tern_http_requests_total{"route": "/v1/messages/count_tokens", "status": "200"}'] == 1
    assert got['tern_route_generation_tokens_total{"route": "/v1/messages"}'] == m.usage.output_tokens
    assert got['tern_route_prompt_tokens_total{"route": "/v1/messages"}'] == \
        m.usage.input_tokens + m.usage.cache_read_input_tokens


def test_sampling_fields_accepted(make_server):
    s = make_server(script=["fine" + EOS])
    r = requests.post(s.url + "/v1/messages", json={
        "model": "m", "max_tokens": 10, "messages": USER, "system": [{"type": "text", "text": "Be brief."}],
        "temperature": 0.5, "top_p": 0.9, "top_k": 5, "metadata": {"user_id": "u1"}})
    assert r.status_code == 200, r.text
    assert r.json()["content"] == [{"type": "text", "text": "fine"}]
