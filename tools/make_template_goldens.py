#!/usr/bin/env python3
"""Chat-template goldens for tern's Jinja interpreter, rendered by the oracle:
transformers' own compiled template (transformers.utils.chat_template_utils.
_compile_jinja_template: ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, tojson with ensure_ascii=False, raise_exception,
strftime_now, its dict and namespace). The context passed to render() is the
one written to the fixture, so tern renders exactly the same variables.

Writes tests/fixtures/templates/:
  index.json                      which templates exist and where their source lives
  contexts/<case>.json            render context (the same for every template)
  <template>/<case>.txt | .err    expected output, or the error the oracle raised
  unit.json                       interpreter feature cases (template, context, expected)
  gemma4_calls.json               assistant tool calls (and reasoning) rendered by Gemma 4's
                                  template: the text its model writes for them, for the
                                  server's parser to read back (tests/server/test_server_gemma.c)

Run:  python3 -m venv tools/.venv && tools/.venv/bin/pip install jinja2 transformers
      tools/.venv/bin/python tools/make_template_goldens.py
Templates are read from tests/fixtures/data.
"""
import copy
import json
import lzma
import os
import re
import shutil
import sys

import jinja2
from transformers.utils.chat_template_utils import _compile_jinja_template

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "fixtures", "data")
OUT = os.path.join(ROOT, "tests", "fixtures", "templates")

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Unit"}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "number", "description": "First"},
            "b": {"type": "integer", "description": "Second"},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags"}},
            "required": ["a", "b"]}}},
]

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello! How are you?"}
A1 = {"role": "assistant", "content": "I'm fine, thanks. How can I help?"}
U2 = {"role": "user", "content": "What's the weather in Paris?"}
CALL = {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
    "name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}
CALL_NONE = dict(CALL, content=None)
CALL_STR = {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {
    "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
RESULT = {"role": "tool", "name": "get_weather", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}
A2 = {"role": "assistant", "content": "It is 21°C and clear in Paris."}
BASE = {"bos_token": "<s>", "eos_token": "</s>", "date_string": "26 Jul 2024"}


def case(messages, agp=True, **extra):
    ctx = dict(BASE)
    ctx["messages"] = messages
    ctx["add_generation_prompt"] = agp
    ctx.update(extra)
    return ctx


CASES = {
    "single_user": case([U1]),
    "system_multi": case([SYS, U1, A1, U2]),
    "multi_no_prompt": case([U1, A1, U2, A2], agp=False),
    "system_only_no_prompt": case([SYS, U1], agp=False),
    "tools": case([SYS, U2], tools=TOOLS),
    "tools_no_system": case([U2], tools=TOOLS),
    "tool_call_roundtrip": case([SYS, U2, CALL, RESULT, A2], agp=False, tools=TOOLS),
    "tool_call_none_content": case([U2, CALL_NONE, RESULT], tools=TOOLS),
    "tool_call_string_args": case([U2, CALL_STR, RESULT], tools=TOOLS),
    "content_parts": case([{"role": "user", "content": [{"type": "text", "text": "Describe this."},
                                                        {"type": "text", "text": " Briefly."}]}]),
    "system_parts": case([{"role": "system", "content": [{"type": "text", "text": "Be terse."}]}, U1]),
    "thinking_on": case([U1, {"role": "assistant", "content": "<think>\nHmm.\n</think>\n\nHi!"}, U2],
                        enable_thinking=True),
    "thinking_off": case([U1, U2], enable_thinking=False),
    "reasoning_field": case([U1, {"role": "assistant", "content": "Hi!", "reasoning_content": "Greet back."}, U2]),
    "unicode_ws": case([{"role": "user", "content": "  naïve café — 日本語 \"quotes\" 'single' \\ back  \n"}]),
    "wrong_order": case([U1, U2]),
    "assistant_first": case([A1, U1]),
    "empty": case([], agp=True),
    # transformers passes tools=None and documents=None when a call has none
    "tools_none": case([SYS, U2], tools=None, documents=None),
    "tools_empty": case([SYS, U2], tools=[]),
}


def render(src, ctx):
    try:  # a copy: jinja2's indent filter extends a list it is given in place
        return {"ok": _compile_jinja_template(src).render(**copy.deepcopy(ctx))}
    except jinja2.exceptions.TemplateError as e:
        kind = type(e).__name__
        return {"error": str(e), "kind": kind}
    except Exception as e:  # TypeError, KeyError... raised through the template
        return {"error": str(e), "kind": type(e).__name__}


def shared_templates():
    out = []
    tok = os.path.join(DATA, "tokenizers")
    for name in sorted(os.listdir(tok)):
        p = os.path.join(tok, name, "tokenizer_config.json.xz")
        if not os.path.exists(p):
            continue
        ct = json.loads(lzma.open(p).read()).get("chat_template")
        if isinstance(ct, list):
            ct = next((t["template"] for t in ct if t.get("name") == "default"), None)
        if isinstance(ct, str):
            out.append((name, "xz:tokenizers/%s/tokenizer_config.json" % name, ct))
    peer = os.path.join(DATA, "peer-tests", "chat-templates")
    for f in sorted(os.listdir(peer)):
        if f.endswith(".jinja"):
            out.append((f[:-6], "file:peer-tests/chat-templates/" + f, open(os.path.join(peer, f)).read()))
    return out


def write_goldens():
    index = []
    cdir = os.path.join(OUT, "contexts")
    os.makedirs(cdir, exist_ok=True)
    for cname, ctx in CASES.items():
        with open(os.path.join(cdir, cname + ".json"), "w") as f:
            json.dump(ctx, f, ensure_ascii=False)
    for name, where, src in shared_templates():
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        for cname, ctx in CASES.items():
            r = render(src, ctx)
            if "ok" in r:
                with open(os.path.join(d, cname + ".txt"), "w", newline="") as f:
                    f.write(r["ok"])
            else:
                with open(os.path.join(d, cname + ".err"), "w") as f:
                    json.dump(r, f, ensure_ascii=False)
        index.append({"name": name, "source": where})
    index = {"templates": index, "cases": list(CASES)}
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    return index


# --------------------------------------------------------------- unit cases
# (name, template, context). Expected output comes from the oracle.
U = [
    ("lit_int", "{{ 1 }}|{{ -3 }}|{{ 1_000 }}", {}),
    ("lit_float", "{{ 1.0 }}|{{ 2.5e3 }}|{{ 1e20 }}|{{ 0.1 + 0.2 }}|{{ 1e-7 }}|{{ 3.14159 }}", {}),
    ("lit_const", "{{ true }}{{ False }}{{ none }}{{ None }}", {}),
    ("lit_str_escapes", "{{ 'a\\nb\\tc\\\\d\\'e' }}|{{ \"x\\\"y\" }}|{{ '\\u00e9\\x41' }}", {}),
    ("lit_str_concat", "{{ 'a' 'b' }}", {}),
    ("lit_list_repr", "{{ ['a', 1, 2.0, none, true, [\"it's\"]] }}", {}),
    ("lit_dict_repr", "{{ {'a': 1, 'b': [1, 2], 'c': {'d': none}} }}", {}),
    ("lit_tuple_repr", "{{ (1,) }}{{ (1, 'x') }}{{ () }}", {}),
    ("str_repr_quotes", "{{ [\"a'b\", 'a\"b', 'a\\'b\"c', 'nl\\n'] }}", {}),
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}", {}),
    ("arith_mixed", "{{ 1 + 2.5 }} {{ true + 1 }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 3 - 5 }}", {}),
    ("concat_tilde", "{{ 1 ~ 'a' ~ none ~ [1] ~ undefined_var }}", {}),
    ("compare", "{{ 1 < 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ 1 == true }} {{ 'a' != 'a' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}", {}),
    ("in_ops", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 'x' in undefined_var }}", {}),
    ("logic", "{{ 1 and 'x' }}|{{ 0 or 'y' }}|{{ not 0 }}|{{ '' or [] }}|{{ none and 1 }}", {}),
    ("ternary", "{{ 'a' if x else 'b' }}|{{ 'a' if not x }}|{{ ('c' if x) is defined }}", {"x": False}),
    ("truthiness", "{% for v in [0, 1, '', 'a', [], [0], {}, none, 0.0] %}{{ 'T' if v else 'F' }}{% endfor %}", {}),
    ("attr_item", "{{ d.a }}|{{ d['a'] }}|{{ d.b.c }}|{{ l[0] }}|{{ l[-1] }}|{{ d.missing }}|{{ l[10] }}|{{ d.b['c'] }}", {"d": {"a": 1, "b": {"c": "x"}}, "l": [1, 2, 3]}),
    ("dict_method_shadow", "{{ d.items is defined }}|{{ d['items'] }}|{{ d.get('items') }}", {"d": {"items": "mine"}}),
    ("slices", "{{ l[1:] }}{{ l[:2] }}{{ l[::-1] }}{{ l[::2] }}{{ l[-2:] }}{{ s[1:3] }}{{ s[::-1] }}{{ l[5:] }}{{ l[1:-1] }}{{ l[3:0:-1] }}", {"l": [1, 2, 3, 4], "s": "héllo"}),
    ("str_index_unicode", "{{ s[0] }}{{ s[1] }}{{ s|length }}{{ s[-1] }}", {"s": "日本語"}),
    ("if_elif", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}{% endfor %}", {}),
    ("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", {}),
    ("for_prev_next", "{% for x in [1, 2, 3] %}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}", {}),
    ("for_cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] %}x{% else %}empty{% endfor %}", {}),
    ("for_filter_if", "{% for x in range(10) if x is odd %}{{ x }}{{ loop.index }}{{ loop.last }},{% endfor %}", {}),
    ("for_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}", {"d": {"x": 1, "y": 2}}),
    ("for_dict", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("for_nested_loop", "{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("set_scope_loop", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = i * 10 %}{{ x }}{% endfor %}|{{ x }}", {}),
    ("set_scope_if", "{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = [3, 4] %}{{ c }}{{ d }}", {}),
    ("set_block", "{% set x %}Hello {{ name }}!{% endset %}[{{ x }}]{% set y | upper %}abc{% endset %}{{ y }}", {"name": "W"}),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("namespace_dict_arg", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns.c is defined }}", {}),
    ("macro_basic", "{% macro greet(name, greeting='Hi') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Bob') }} {{ greet('Al', greeting='Yo') }} {{ greet(name='Z') }}", {}),
    ("macro_recursive", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(4) }}", {}),
    ("macro_concat", "{% macro t(x) %}<{{ x }}>{% endmacro %}{{ t(1) + t(2) }}", {}),
    ("macro_outer_var", "{% set g = 'G' %}{% macro m() %}{{ g }}{{ v }}{% endmacro %}{{ m() }}", {"v": "V"}),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ x }}{% endcall %}", {"x": 1}),
    ("call_block_args", "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(item) each([1, 2]) %}[{{ item }}]{% endcall %}", {}),
    ("filter_block", "{% filter upper %}hello {{ x }}{% endfilter %}", {"x": "w"}),
    ("ws_trim_blocks", "{% if true %}\nA\n{% endif %}\nB\n", {}),
    ("ws_lstrip", "  {% if true %}\n    x\n  {% endif %}\n  y", {}),
    ("ws_minus", "a   {{- 'b' -}}   c\n  {%- if true -%}  d  {%- endif -%}\n e", {}),
    ("ws_plus", "  {%+ if true %}x{% endif +%}\ny", {}),
    ("ws_var_no_lstrip", "  {{ 'x' }}\n  z", {}),
    ("ws_comment", "a\n  {# comment #}\nb{#- c -#}  c", {}),
    ("ws_trailing_newline", "x\n", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    ("raw_block", "{% raw %}{{ not }} {% evaluated %}{% endraw %}|{%- raw -%}  x  {%- endraw -%}|", {}),
    ("tests_types", "{{ x is string }}{{ 1 is number }}{{ 1.0 is float }}{{ 1 is integer }}{{ true is boolean }}{{ true is number }}{{ d is mapping }}{{ d is iterable }}{{ 'a' is sequence }}{{ none is none }}{{ u is undefined }}{{ u is defined }}{{ u is iterable }}", {"x": "s", "d": {}}),
    ("tests_values", "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 1 is eq 1 }}{{ 1 is equalto 2 }}{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ 2 is gt 1 }}{{ 2 is le 2 }}{{ 2 is ge 3 }}{{ 'a' is in 'abc' }}{{ true is true }}{{ false is false }}{{ 1 is true }}{{ x is not none }}", {"x": 1}),
    ("tests_case", "{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 'aB' is lower }}", {}),
    ("f_length", "{{ 'héllo'|length }}{{ [1, 2]|length }}{{ {'a': 1}|count }}{{ u|length }}", {}),
    ("f_first_last", "{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}{{ 'abc'|first }}{{ 'abc'|last }}{{ []|first is defined }}", {}),
    ("f_join", "{{ [1, 2, 3]|join(', ') }}|{{ ['a', 'b']|join }}|{{ users|join(',', attribute='name') }}", {"users": [{"name": "a"}, {"name": "b"}]}),
    ("f_map", "{{ users|map(attribute='name')|join(',') }}|{{ ['a', 'B']|map('upper')|list }}|{{ [1.5, 2.4]|map('round')|list }}|{{ users|map(attribute='age', default=0)|list }}", {"users": [{"name": "a", "age": 3}, {"name": "b"}]}),
    ("f_select", "{{ range(10)|select('odd')|list }}{{ range(5)|reject('even')|list }}{{ [0, 1, '', 'x']|select|list }}{{ ['a', 'code_interpreter']|reject('equalto', 'code_interpreter')|list }}", {}),
    ("f_selectattr", "{{ m|selectattr('role', 'equalto', 'user')|map(attribute='c')|list }}{{ m|rejectattr('role', 'eq', 'user')|list|length }}{{ m|selectattr('flag')|list|length }}{{ m|selectattr('flag', 'defined')|list|length }}", {"m": [{"role": "user", "c": 1, "flag": True}, {"role": "bot", "c": 2}, {"role": "user", "c": 3, "flag": False}]}),
    ("f_items", "{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}{{ u|items|list }}", {"d": {"z": 1, "a": 2}}),
    ("f_dictsort", "{{ d|dictsort }}{{ d|dictsort(reverse=true) }}{{ d|dictsort(by='value') }}", {"d": {"b": 2, "a": 3, "C": 1}}),
    ("f_trim", "[{{ '  a b \\n'|trim }}][{{ 'xxaxx'|trim('x') }}][{{ '\\u3000a\\u00a0'|trim }}]", {}),
    ("f_case", "{{ 'hello world'|upper }}{{ 'HeLLo'|lower }}{{ 'hello WORLD'|capitalize }}{{ 'hello big-world (x)'|title }}{{ 'éa'|upper }}", {}),
    ("f_replace", "{{ 'aaa'|replace('a', 'b') }}{{ 'aaa'|replace('a', 'b', 2) }}{{ 'abc'|replace('', '-') }}", {}),
    ("f_default", "{{ u|default('d') }}|{{ ''|default('d') }}|{{ ''|default('d', true) }}|{{ none|d('n') }}|{{ 0|d('z', boolean=true) }}|{{ u|default }}", {}),
    ("f_conv", "{{ '42'|int }}{{ 'x'|int }}{{ 'x'|int(7) }}{{ 3.9|int }}{{ '2.5'|float }}{{ 3|float }}{{ 42|string }}{{ [1]|string }}{{ 'ab'|list }}{{ ' 12 '|int }}", {}),
    ("f_round", "{{ 2.5|round }}{{ 3.5|round }}{{ 2.675|round(2) }}{{ 2.1|round(0, 'ceil') }}{{ 2.9|round(method='floor') }}{{ 7|round }}", {}),
    ("f_tojson", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ 'é\"\\n'|tojson }}|{{ [1, 2.5, none, true]|tojson }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ {}|tojson(indent=4) }}|{{ [[]]|tojson(indent=4) }}", {"d": {"b": [1, {"x": "y"}], "a": "日本"}}),
    ("f_tojson_floats", "{{ [1.0, 0.1, 1e16, 1e-5, 123456789.123, -0.0]|tojson }}", {}),
    ("f_escape", "{{ '<a href=\"x\">&\\'</a>'|e }}{{ '<b>'|escape }}{{ '<i>'|safe }}", {}),
    ("f_unique_sort", "{{ ['b', 'A', 'a', 'c', 'B']|unique|list }}{{ ['b', 'A', 'a', 'c']|sort }}{{ ['b', 'A', 'a']|sort(case_sensitive=true) }}{{ [3, 1, 2]|sort(reverse=true) }}{{ users|sort(attribute='age')|map(attribute='n')|join }}", {"users": [{"n": "x", "age": 3}, {"n": "y", "age": 1}, {"n": "z", "age": 2}]}),
    ("f_reverse", "{{ 'abc'|reverse }}{{ [1, 2, 3]|reverse|list }}", {}),
    ("f_indent", "[{{ 'a\\nb\\n\\nc'|indent }}][{{ 'a\\nb'|indent(2, first=true) }}][{{ 'a\\n\\nb'|indent(2, blank=true) }}][{{ 'x\\ny'|indent('>>') }}]", {}),
    ("f_misc", "{{ 'a b  c'|wordcount }}{{ [3, 1, 2]|min }}{{ [3, 1, 2]|max }}{{ [1, 2, 3]|sum }}{{ -3|abs }}{{ [1, 2, 3, 4, 5]|batch(2)|list }}{{ [1, 2, 3]|batch(2, 0)|list }}[{{ 'ab'|center(6) }}]{{ '%s-%d'|format('x', 3) }}{{ ['b', 'A']|max }}", {}),
    ("f_sum_attr", "{{ items|sum(attribute='v') }}{{ items|map(attribute='v')|sum(start=10) }}", {"items": [{"v": 1}, {"v": 2}]}),
    ("str_methods", "{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  x'.lstrip() }}|{{ 'x  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a-b-c'.split('-', 1) }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}", {}),
    ("str_methods2", "{{ 'Hello'.upper() }}{{ 'Hello'.lower() }}{{ 'hello world'.title() }}{{ 'hELLO'.capitalize() }}{{ 'abcabc'.find('c') }}{{ 'abc'.find('z') }}{{ 'abab'.count('ab') }}{{ '-'.join(['a', 'b']) }}{{ 'a\\nb\\r\\nc'.splitlines() }}{{ 'aXbX'.replace('X', '.') }}", {}),
    ("str_format", "{{ '{} and {}'.format('a', 1) }}|{{ '{0}{1}{0}'.format('x', 'y') }}|{{ '{name}!'.format(name='N') }}|{{ '{{}}'.format() }}", {}),
    ("str_percent", "{{ '%s is %d' % ('x', 3) }}|{{ '%s' % 'y' }}|{{ '100%%' % () }}", {}),
    ("dict_methods", "{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 'dflt') }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.items()|list }}", {"d": {"a": 1, "b": 2}}),
    ("range_fn", "{{ range(3)|list }}{{ range(1, 4)|list }}{{ range(10, 0, -3)|list }}{{ range(0)|list }}", {}),
    ("dict_fn", "{{ dict(a=1, b='x') }}{{ dict([('k', 'v')]) }}", {}),
    ("undefined_print", "[{{ nothing }}][{{ nothing.attr is defined if false else '' }}]", {}),
    ("undefined_chain_default", "{{ a.b|default('x') }}", {"a": {}}),
    ("none_attr", "{{ n.x is defined }}{{ n is none }}", {"n": None}),
    ("list_in_message", "{% for m in messages %}{{ m.content is string }}{{ m.content is iterable }}{{ m.content is mapping }}{% endfor %}", {"messages": [{"content": "s"}, {"content": [1]}, {"content": {"a": 1}}]}),
    ("generation_block", "a{% generation %}b{{ 1 }}{% endgeneration %}c", {}),
    ("strftime_type", "{{ strftime_now('%Y')|length }}{{ strftime_now is defined }}", {}),
    ("jinja_nested_data", "{{ x.a[0].b }}{{ x['a'][0]['b'] }}", {"x": {"a": [{"b": "ok"}]}}),
    ("int_float_print", "{{ 10 / 4 }} {{ 10 / 5 }} {{ 2 * 1.5 }} {{ 1e3 }} {{ 12345678901234567.0 }} {{ 0.000123 }} {{ -1.5e-10 }}", {}),
    ("bool_print", "{{ 1 == 1 }} {{ [true, false] }} {{ {'k': none} }}", {}),
    ("loop_in_macro", "{% macro m(xs) %}{% for x in xs %}{{ loop.index }}{% endfor %}{% endmacro %}{% for y in [1] %}{{ m([5, 6]) }}{{ loop.index }}{% endfor %}", {}),
    ("set_inside_loop_read_outer", "{% set total = 5 %}{% for i in [1] %}{{ total }}{% endfor %}", {}),
    ("macro_varargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1) }}{{ m(1, 2, k=3) }}", {}),
    ("set_loop_read_before_set", "{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i %}{% endfor %}{{ x }}", {}),
    ("percent_format", "{{ '%.2f|%5s|%-4d|%03d|%x'|format(1.234, 'ab', 7, 5, 255) }}", {}),
    ("think_split", "{{ s.split('</think>')[-1].lstrip('\\n') }}|{{ s.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}", {"s": "<think>\nr\n</think>\n\nanswer"}),
    ("str_attr_undefined", "{{ x.y is defined }}{{ x.y }}", {"x": "str"}),
    ("none_filters", "{{ none|string }}{{ none|lower }}{{ true|string|lower }}", {}),
    ("tojson_empty_indent", "{{ d|tojson(indent=2) }}", {"d": {"a": [1, {}], "b": []}}),
    ("loop_outside", "[{{ loop }}]{% for a in [1] %}{% for b in [2, 3] %}{{ loop.length }}{% endfor %}{% endfor %}", {}),
    # errors the oracle raises
    ("err_macro_too_many_args", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", {}),
    ("err_raise", "a{{ raise_exception('Bad role: ' ~ r) }}", {"r": "x"}),
    ("err_raise_line", "line1\n{% if true %}\n{{ raise_exception('third line') }}\n{% endif %}", {}),
    ("err_undefined_attr", "{{ a.b.c }}", {"a": {}}),
    ("err_undefined_call", "{{ nothing() }}", {}),
    ("err_type_add", "{{ 'a' + 1 }}", {}),
    ("err_div_zero", "{{ 1 // 0 }}", {}),
    ("err_list_append", "{% set l = [] %}{{ l.append(1) }}", {}),
    ("err_dict_update", "{% set d = {} %}{{ d.update({'a': 1}) }}", {}),
    ("err_range_big", "{% for i in range(1000000000) %}{% endfor %}", {}),
    ("err_unknown_filter", "{{ 1|nosuchfilter }}", {}),
    ("err_syntax", "{% if x %}no end", {}),
    ("err_syntax_expr", "{{ 1 + }}", {}),
    ("err_unknown_tag", "{% nosuchtag %}", {}),
    ("err_namespace_underscore", "{% set ns = namespace() %}{% set ns._x = 1 %}", {}),
    ("err_none_iter", "{% for x in n %}{% endfor %}", {"n": None}),
    ("err_tojson_undefined", "{{ u|tojson }}", {}),
    ("err_compare", "{{ 1 < 'a' }}", {}),
]

# ------------------------------------------- none / undefined / empty inputs
# Every filter on x = None, x undefined and x = []: jinja2 guards map and the
# select family with `if value:` (empty on any false input), other filters
# raise or render per their Python code.
NU_FILTERS = [
    ("length", "length"), ("count", "count"), ("first", "first"), ("last", "last"),
    ("join", "join(',')"), ("join_attr", "join(',', attribute='a')"),
    ("map_filter", "map('upper')|list"), ("map_attr", "map(attribute='a')|join(',')"),
    ("map_default", "map(attribute='a', default=0)|list"), ("map_noarg", "map|list"),
    ("map_badfilter", "map('nosuchfilter')|list"), ("select", "select|list"),
    ("select_test", "select('odd')|list"), ("reject", "reject('none')|list"),
    ("selectattr", "selectattr('a')|list"), ("selectattr_test", "selectattr('a', 'equalto', 1)|list"),
    ("selectattr_noarg", "selectattr|list"), ("selectattr_badtest", "selectattr('a', 'nosuchtest')|list"),
    ("rejectattr", "rejectattr('a', 'defined')|list"), ("select_first", "selectattr('a')|first"),
    ("items", "items|list"), ("trim", "trim"), ("upper", "upper"), ("lower", "lower"),
    ("capitalize", "capitalize"), ("title", "title"), ("replace", "replace('o', '0')"),
    ("default", "default('D')"), ("default_bool", "default('D', true)"), ("list", "list"),
    ("string", "string"), ("int", "int"), ("int_default", "int(7)"), ("float", "float"),
    ("round", "round"), ("tojson", "tojson"), ("safe", "safe|length"), ("escape", "escape"),
    ("forceescape", "forceescape"), ("unique", "unique|list"), ("sort", "sort"),
    ("dictsort", "dictsort"), ("reverse", "reverse|list"), ("indent", "indent(2)"),
    ("wordcount", "wordcount"), ("min", "min"), ("max", "max"), ("sum", "sum"), ("abs", "abs"),
    ("batch", "batch(2)|list"), ("center", "center(6)"), ("format", "format"), ("attr", "attr('a')"),
]
NU_INPUTS = [("none", {"x": None}), ("undef", {}), ("empty", {"x": []})]
for _name, _f in NU_FILTERS:
    for _in, _ctx in NU_INPUTS:
        U.append(("nu_%s_%s" % (_name, _in), "{{ x|%s }}|{{ (x|%s) is defined }}" % (_f, _f), _ctx))

NU_TESTS = "".join("{{ x is %s }}" % t for t in (
    "defined", "undefined", "none", "iterable", "sequence", "mapping", "string", "number",
    "callable", "boolean", "eq(none)", "ne([])", "sameas(none)", "in([none, 1])"))
for _in, _ctx in NU_INPUTS + [("missing_attr", {"d": {}}), ("none_attr", {"n": None})]:
    _x = {"missing_attr": "d.x", "none_attr": "n.x"}.get(_in, "x")
    U += [
        ("nu_tests_" + _in, NU_TESTS.replace("x is", _x + " is"), _ctx),
        ("nu_for_" + _in, "{% for i in X %}[{{ i }}]{% else %}empty{% endfor %}".replace("X", _x), _ctx),
        ("nu_in_right_" + _in, "{{ none in X }}|{{ 'a' in X }}".replace("X", _x), _ctx),
        ("nu_in_left_" + _in, "{{ X in [none, 1] }}|{{ X in {'a': 1} }}".replace("X", _x), _ctx),
        ("nu_truth_" + _in, "{{ 'T' if X else 'F' }}{{ X == none }}{{ X ~ '!' }}".replace("X", _x), _ctx),
    ]

U += [
    # a sandbox-refused attribute is an undefined that raises SecurityError when misused
    ("nu_unsafe_undefined", "[{{ l.append|string }}|{{ l.append|upper }}|{{ l.append|default('d') }}|{{ l.append is defined }}|{{ l.append|list }}|{{ l.append is callable }}|{{ l.append|center(3) }}]", {"l": []}),
    ("err_nu_unsafe_int", "{{ l.append|int }}", {"l": []}),
    ("nu_false_inputs", "{{ 0|select|list }}{{ false|map('upper')|list }}{{ ''|selectattr('a')|list }}{{ {}|rejectattr('a')|list }}{{ 0.0|reject|list }}", {}),
    ("err_nu_true_not_iterable", "{{ 5|select|list }}", {}),
    ("f_attr_dict", "{{ {'a': 1}|attr('a') is defined }}{{ {'a': 1}|attr('items') is defined }}{{ n|attr('a') is defined }}", {"n": None}),
    ("f_safe_str", "{{ n|safe|length }}{{ [1, 2]|safe|length }}{{ u|safe|length }}", {"n": None}),
    ("f_batch_counts", "{{ [1, 2, 3]|batch(2, 0)|list }}{{ [1, 2]|batch(0)|list }}{{ [1, 2]|batch(-1)|list }}{{ u|batch(2)|list }}", {}),
    ("err_f_unique_unhashable", "{{ [[1], [1]]|unique|list }}", {}),
    ("err_in_unhashable", "{{ [] in {} }}", {}),
    ("err_test_unhashable", "{{ [] is filter }}", {}),
    # map, select..., unique, items, batch and reverse return one-shot iterators
    ("gen_truthy", "{{ 'T' if n|selectattr('a') else 'F' }}{{ 'T' if []|select else 'F' }}{{ 'T' if u|map('upper') else 'F' }}{{ 'T' if n|items else 'F' }}{{ 'T' if 5|select else 'F' }}{{ 'T' if u|reverse else 'F' }}", {"n": None}),
    ("gen_once", "{% set g = [1, 2, 3]|select %}{{ g|first }}{{ g|list }}{{ g|list }}{{ g|first is defined }}", {}),
    ("gen_in", "{% set g = [1, 2, 3]|map('string') %}{{ '2' in g }}{{ g|list }}{{ 'x' in g }}", {}),
    ("gen_repr", "{{ n|select }}|{{ [1]|map('string') }}|{{ [1]|reverse }}|{{ (1,)|reverse }}|{{ {'a': 1}|reverse }}|{{ u|reverse }}|{{ {'a': 1}|items }}|{{ [1]|unique }}|{{ [1]|batch(1) }}|{{ [n|select] }}|{{ 5|select }}", {"n": None}),
    ("gen_tests", "{% set g = n|select %}{{ g is iterable }}{{ g is sequence }}{{ g is defined }}{{ g is none }}{{ g[0] is defined }}{{ g.x is defined }}{{ g == [] }}{{ g == g }}{{ g|list == [] }}{{ g|default('d') is string }}", {"n": None}),
    ("gen_loop", "{% for x in [3, 1, 2]|reject('none') %}{{ loop.index }}/{{ loop.length }}{{ loop.last }},{% endfor %}{% for k, v in {'a': 1}|items %}{{ k }}{{ v }}{% endfor %}", {}),
    ("gen_chain", "{{ n|selectattr('a')|map(attribute='b')|unique|list }}{{ [1, 2, 3, 3]|select('odd')|unique|sort }}{{ [1, 2]|reverse|list }}{{ [1, 2]|select|reverse }}{{ [[1, 2]]|map('reverse')|map('list')|list }}{{ [1, 2]|select|join('-') }}{{ [1, 2]|map('string')|sum(start='') if false }}{{ {'b': 1, 'a': 2}|items|sort }}", {"n": None}),
    ("gen_lazy_errors", "{% set g = ms|map(attribute='a.b') %}{{ g|first }}|{{ 'T' if ms|selectattr('a.b', 'eq', 1) }}|{{ 'T' if ms|select('nosuchtest') }}|{{ 'T' if ms|map }}|{{ 'T' if [[1]]|unique }}", {"ms": [{"a": {"b": 1}}, {}, {"a": {"b": 2}}]}),
    ("err_gen_lazy_item", "{% set g = ms|map(attribute='a.b') %}{{ g|first }}{{ g|first }}", {"ms": [{"a": {"b": 1}}, {}, {"a": {"b": 2}}]}),
    ("err_gen_map_noarg", "{{ [1]|map|list }}", {}),
    ("err_gen_badtest", "{{ [1]|select('nosuchtest')|list }}", {}),
    ("err_gen_length", "{{ n|select|length }}", {"n": None}),
    ("err_gen_last", "{{ []|map('upper')|last }}", {}),
    ("err_gen_tojson", "{{ n|selectattr('a')|tojson }}", {"n": None}),
    ("err_gen_deferred", "{% set g = 5|select %}{{ 'made' }}{{ g|list }}", {}),
    ("err_gen_items_none", "{{ n|items|list }}", {"n": None}),
    ("err_gen_reverse_none", "{{ n|reverse }}", {"n": None}),
]

# A tools block written the way Hub templates write it, rendered as
# transformers calls it without tools (tools=None), with tools absent,
# empty, and given.
TOOLS_BLOCK = (
    "{%- set fns = tools | selectattr('type', 'equalto', 'function') | map(attribute='function') | list %}\n"
    "{%- if fns %}\n<tools>\n{% for f in fns %}{{ f | tojson }}\n{% endfor %}</tools>\n{% endif %}\n"
    "{%- if tools | rejectattr('type', 'equalto', 'function') | list %}builtin: {{ tools | rejectattr('type', 'equalto', 'function') | map(attribute='type') | join(', ') }}\n{% endif %}\n"
    "{%- if tools | selectattr('function.name', 'equalto', 'add') %}generator is true\n{% endif %}\n"
    "names=[{{ fns | map(attribute='name') | join(', ') }}] first={{ tools | map(attribute='type') | first }}\n"
    "{% for m in messages | rejectattr('role', 'equalto', 'system') %}\n<{{ m.role }}>{{ m.content }}\n{% endfor %}"
)
for _in, _tools in [("none", None), ("undef", "absent"), ("empty", []), ("list", TOOLS + [{"type": "code_interpreter"}])]:
    _ctx = {"messages": [SYS, U2]}
    if _tools != "absent":
        _ctx["tools"] = _tools
    U.append(("tools_block_" + _in, TOOLS_BLOCK, _ctx))


def write_units():
    out = []
    for name, src, ctx in U:
        try:
            r = render(src, ctx)
        except jinja2.exceptions.TemplateSyntaxError as e:  # compile errors
            r = {"error": str(e), "kind": "TemplateSyntaxError"}
        if name.startswith("gen_") and "ok" in r:  # tern prints Python's repr without the address
            r["ok"] = re.sub(r" at 0x[0-9a-f]+>", ">", r["ok"])
        item = {"name": name, "template": src, "context": ctx}
        item.update(r)
        out.append(item)
    with open(os.path.join(OUT, "unit.json"), "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    return out


# --------------------------------------------------- Gemma 4 tool-call renders
# Each case: the arguments of assistant tool calls (and optional reasoning),
# rendered by the real template. What follows the model's turn opening, up to
# the <|tool_response> the template (and the model) ends a call turn with, is
# exactly what the model writes when it makes those calls.
GEMMA4 = "google-gemma-4-31B-it"
G_CALLS = [
    ("strings", None, [("get_weather", {"city": "Paris", "unit": "celsius"})]),
    ("scalars", None, [("add", {"a": 1, "b": -2, "c": 2.5, "d": 1e-07, "e": -0.0, "big": 1234567890123,
                                "t": True, "f": False, "n": None})]),
    ("string_bytes", None, [("note", {"text": "He said \"hi\", {ok}: [yes]\nline 2\ttab <b> 日本語 \\ back",
                                      "empty": "", "spaces": "  padded  "})]),
    ("nested", None, [("search", {"filter": {"tags": ["a", "b"], "range": {"min": 1, "max": 10.5},
                                             "deep": [[1, 2], [], {}]},
                                  "list": [{"k": "v"}, 3, True, None, "s"]})]),
    ("key_order", None, [("f", {"Zeta": 1, "alpha": 2, "beta_2": "x"})]),
    ("no_args", None, [("get_time", {})]),
    ("parallel", None, [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"}),
                        ("get_time", {"zone": "CET"})]),
    ("with_reasoning", "The user wants the weather.\nCall the tool.", [("get_weather", {"city": "Oslo"})]),
]


def write_gemma4_calls():
    src = next(s for n, _, s in shared_templates() if n == GEMMA4)
    out = []
    for cname, reasoning, calls in G_CALLS:
        msg = {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_%d" % i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)]}
        if reasoning:
            msg["reasoning_content"] = reasoning
        ctx = case([U2, msg], agp=False)
        r = render(src, ctx)
        assert "ok" in r, (cname, r)
        text = r["ok"]
        start = text.rindex("<|turn>model\n") + len("<|turn>model\n")
        assert text.endswith("<|tool_response>"), (cname, text[-80:])
        out.append({"name": cname, "context": ctx, "rendered": text,
                    "output": text[start:-len("<|tool_response>")],
                    "reasoning": reasoning or "",
                    "calls": [{"name": n, "arguments": a} for n, a in calls]})
    with open(os.path.join(OUT, "gemma4_calls.json"), "w") as f:
        json.dump({"template": GEMMA4, "cases": out}, f, ensure_ascii=False, indent=1)
    return out


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    idx = write_goldens()
    units = write_units()
    write_gemma4_calls()
    n_err = sum(1 for u in units if "error" in u)
    print("templates: %d x %d cases; unit cases: %d (%d errors)" % (len(idx["templates"]), len(CASES), len(units), n_err))


if __name__ == "__main__":
    sys.exit(main())
