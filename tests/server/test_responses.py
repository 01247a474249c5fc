"""test_responses.py — the OpenAI Responses API of `tern serve` end to end
through the official openai client on the tiny fixture model, with outputs
forced by --test-script: plain and streamed responses (the client's stream
helper assembles the final response, which must equal the non-streamed one)
with the event chain and its sequence numbers, reasoning items, a function
call round trip, previous_response_id and the store's GET / DELETE and its
count and age limits, max_output_tokens, and errors naming the field.
"""
import json
import time

import openai
import pytest
import requests

EOS = "<|im_end|>"
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
LONGCTX = ("--max-context", "1024")


def client(s):
    return openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)


def items(resp):
    """Output items without the ids that differ between requests."""
    out = []
    for it in resp.output:
        d = it.model_dump(exclude_none=True)
        d.pop("id", None)
        if d["type"] == "function_call":
            assert d.pop("call_id").startswith("call_")
        out.append(d)
    return out


def both(s, **kw):
    kw.setdefault("model", "tiny-llama")
    full = client(s).responses.create(**kw)
    events = []
    with client(s).responses.stream(**kw) as st:
        for ev in st:
            events.append(ev)
        final = st.get_final_response()
    assert items(full) == items(final)
    assert full.output_text == final.output_text and full.status == final.status
    assert full.usage.output_tokens == final.usage.output_tokens
    seqs = [e.sequence_number for e in events]
    assert seqs == list(range(len(seqs)))
    return full, [e.type for e in events]


def test_plain_and_stream(make_server):
    s = make_server(script=["Hello from tern." + EOS])
    r, types = both(s, input="Hi there", instructions="Be kind.")
    assert r.id.startswith("resp_") and r.object == "response" and r.status == "completed"
    assert r.output_text == "Hello from tern." and r.instructions == "Be kind."
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    u = r.usage
    assert u.input_tokens > 0 and u.output_tokens > 0 and u.total_tokens == u.input_tokens + u.output_tokens
    assert u.input_tokens_details.cached_tokens >= 0 and u.output_tokens_details.reasoning_tokens == 0
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    for t in ["response.output_item.added", "response.content_part.added", "response.output_text.delta",
              "response.output_text.done", "response.content_part.done", "response.output_item.done"]:
        assert t in types


def test_reasoning(make_server):
    s = make_server(script=["<think>\nLet me see.\n</think>\n\nFour." + EOS])
    r, types = both(s, input="2+2?", reasoning={"effort": "high"})
    assert [it.type for it in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == "Let me see." and r.output_text == "Four."
    assert r.usage.output_tokens_details.reasoning_tokens > 0
    assert "response.reasoning_text.delta" in types and "response.reasoning_text.done" in types
    assert r.reasoning.effort == "high"


def test_function_call_round_trip(make_server):
    s = make_server(*LONGCTX, script=['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' + EOS,
                                      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' + EOS,
                                      "It is sunny." + EOS])
    r, types = both(s, input="Weather in Paris?", tools=TOOLS)
    fc = r.output[0]
    assert fc.type == "function_call" and fc.name == "get_weather" and json.loads(fc.arguments) == {"city": "Paris"}
    assert "response.function_call_arguments.delta" in types and "response.function_call_arguments.done" in types
    r2 = client(s).responses.create(model="m", tools=TOOLS, input=[
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": fc.call_id, "name": fc.name, "arguments": fc.arguments},
        {"type": "function_call_output", "call_id": fc.call_id, "output": "sunny"}])
    assert r2.output_text == "It is sunny."


def test_previous_response_and_store(make_server):
    s = make_server(*LONGCTX, script=["First answer." + EOS, "Second answer." + EOS])
    c = client(s)
    r1 = c.responses.create(model="m", input="Question one")
    r2 = c.responses.create(model="m", input="Question two", previous_response_id=r1.id)
    assert r2.output_text == "Second answer." and r2.previous_response_id == r1.id
    # the second prompt holds the whole first exchange
    assert r2.usage.input_tokens > r1.usage.input_tokens + r1.usage.output_tokens
    assert r2.usage.input_tokens_details.cached_tokens > 0
    got = c.responses.retrieve(r1.id)
    assert got.id == r1.id and got.output_text == "First answer."
    c.responses.delete(r1.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r1.id)
    r = requests.post(s.url + "/v1/responses", json={"input": "x", "previous_response_id": r1.id})
    assert r.status_code == 404 and r.json()["error"]["param"] == "previous_response_id"
    r3 = c.responses.create(model="m", input="not kept", store=False)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r3.id)
    assert requests.delete(s.url + "/v1/responses/resp_nothing").status_code == 404
    assert requests.post(s.url + "/v1/responses/" + r2.id).status_code == 405


def test_store_limits(make_server):
    s = make_server("--responses-max", "2", "--responses-max-age", "1", script=["ok" + EOS])
    c = client(s)
    ids = [c.responses.create(model="m", input="hi").id for _ in range(3)]
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(ids[0])  # over the count: the oldest went
    assert c.responses.retrieve(ids[2]).id == ids[2]
    time.sleep(2.2)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(ids[2])  # over the age


def test_max_output_tokens(make_server):
    s = make_server(script=["one two three four five six seven" + EOS])
    r = client(s).responses.create(model="m", input="count", max_output_tokens=3)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3
    # streamed, as OpenAI does: the chain ends in response.incomplete (which the
    # stream helper does not take as final), carrying the same response
    events = list(client(s).responses.create(model="m", input="count", max_output_tokens=3, stream=True))
    assert events[-1].type == "response.incomplete"
    last = events[-1].response
    assert last.status == "incomplete" and last.output_text == r.output_text


def err(r, status, param):
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert e["param"] == param and e["message"], e
    return e


def test_errors(server):
    url = server.url + "/v1/responses"
    err(requests.post(url, json={}), 400, "input")
    err(requests.post(url, json={"input": "x", "tools": [{"type": "web_search"}]}), 400, "tools[0]")
    err(requests.post(url, json={"input": "x", "temperature": 5}), 400, "temperature")
    err(requests.post(url, json={"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
        400, "input[0].content")
    err(requests.post(url, json={"input": "x", "max_output_tokens": 5000}), 400, "max_output_tokens")
    err(requests.post(url, json={"input": "x", "tool_choice": "required"}), 400, "tool_choice")
    err(requests.post(url, json={"input": "x", "text": {"format": {"type": "json_schema"}}}), 400, "text.format")
    with pytest.raises(openai.BadRequestError):
        client(server).responses.create(model="m", input="x", top_p=0)
