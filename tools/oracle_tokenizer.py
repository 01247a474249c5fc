"""
oracle_tokenizer.py — the small byte-level BPE tokenizer and ChatML chat
template that the tiny-llama fixture ships, plus the golden tokenizer and
chat-template cases written beside it.

Used by make_fixtures.py (run it, not this file). Depends on the `tokenizers`
library (training, tokenizer.json) and transformers (AutoTokenizer and
apply_chat_template are the oracles for the golden cases).

The tokenizer is trained on the inline CORPUS below, so it is deterministic and
needs no download. It is laid out like a published Llama-3 / Qwen snapshot:
tokenizer.json (ByteLevel pre-tokenizer with the GPT-2 style regex, ByteLevel
decoder, a TemplateProcessing post-processor that prepends <|begin_of_text|>)
and tokenizer_config.json (bos/eos tokens, add_bos_token, added_tokens_decoder
and an inline chat_template).
"""

import json
import os

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

VOCAB_SIZE = 384

# Special tokens (special=True: dropped by decode(skip_special_tokens=True)).
SPECIAL_TOKENS = ["<|begin_of_text|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added but not special (as in Qwen3): they survive skip_special_tokens decoding.
ADDED_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

BOS = "<|begin_of_text|>"
EOS = "<|im_end|>"
PAD = "<|endoftext|>"

CORPUS = """\
The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox runs into the forest.
Once upon a time there was a small model that wanted to learn how to speak. It read every book in the library,
one token at a time, and wrote down what it thought would come next.
Hello, world! How are you today? I am fine, thank you. What is the weather like in Paris?
It is sunny and warm; the temperature is 21 degrees. Tomorrow it will rain.
def add(a, b):
    return a + b

for i in range(10):
    print(i * i)
{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
The user asked a question. The assistant thought about it, then answered with a short reply.
You are a helpful assistant. Think step by step before you answer the question.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 3.14159
Unicode: café naïve résumé über straße 日本語 中文 한국어 Привет мир — “quotes” … emoji 🙂🚀
Whitespace:  two spaces,   three spaces,\ttab,\n\nnewlines.
Inference engines batch many requests together; each step runs one forward pass over every token.
The key and value cache stores the past so that decoding reads it instead of recomputing it.
"""

CHAT_TEMPLATE = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}
    {{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
    {%- for tool in tools %}
        {{- '\\n' }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments '
        'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n'
        '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>assistant\\n' }}
        {%- if message.reasoning_content is string and message.reasoning_content %}
            {{- '<think>\\n' + message.reasoning_content.strip('\\n') + '\\n</think>\\n\\n' }}
        {%- endif %}
        {{- content }}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' + tool_call.name + '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""


def train_tokenizer():
    """Trains the byte-level BPE; returns a tokenizers.Tokenizer of exactly VOCAB_SIZE ids."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(ADDED_TOKENS),
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS.splitlines(keepends=True), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} ids, wanted {VOCAB_SIZE}")
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single=f"{BOS}:0 $A:0",
            pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1",
            special_tokens=[(BOS, bos_id)],
        ),
    ])
    return tok


def write_tokenizer(out_dir):
    """Writes tokenizer.json + tokenizer_config.json; returns the token ids of BOS, EOS, PAD."""
    tok = train_tokenizer()
    tok.save(os.path.join(out_dir, "tokenizer.json"), pretty=True)
    added = {}
    for t in SPECIAL_TOKENS + ADDED_TOKENS:
        added[str(tok.token_to_id(t))] = {
            "content": t, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": t in SPECIAL_TOKENS,
        }
    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "bos_token": BOS,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS,
        "model_max_length": 256,
        "pad_token": PAD,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return tok.token_to_id(BOS), tok.token_to_id(EOS), tok.token_to_id(PAD)


TEXT_CASES = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "",
    " ",
    "   leading spaces and trailing   ",
    "tabs\tand\nnewlines\n\n\nend",
    "def add(a, b):\n    return a + b\n",
    "Numbers 1234567 and 3.14159, 2024-06-01.",
    "café naïve über straße",
    "日本語 中文 한국어 Привет",
    "emoji 🙂🚀 and a lone é",
    "words the model never saw: zebra quixotic xylophone",
    "<|im_start|>user\nhi<|im_end|>",
    "<think>reasoning</think> answer",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "not special: <|im_start without close, <thinkk>",
    "'s 're 've 'll 'd 't I'M DON'T",
]

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}]

CHAT_CASES = [
    {"name": "user_only", "messages": [{"role": "user", "content": "Hello!"}],
     "kwargs": {"add_generation_prompt": True}},
    {"name": "system_user_no_gen", "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2+2?"}],
     "kwargs": {"add_generation_prompt": False}},
    {"name": "multi_turn", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."}],
     "kwargs": {"add_generation_prompt": True}},
    {"name": "thinking_off", "messages": [{"role": "user", "content": "Quick answer please."}],
     "kwargs": {"add_generation_prompt": True, "enable_thinking": False}},
    {"name": "thinking_on", "messages": [{"role": "user", "content": "Think first."}],
     "kwargs": {"add_generation_prompt": True, "enable_thinking": True}},
    {"name": "reasoning_content", "messages": [
        {"role": "user", "content": "Why is the sky blue?"},
        {"role": "assistant", "content": "Rayleigh scattering.",
         "reasoning_content": "\nShort wavelengths scatter more.\n"},
        {"role": "user", "content": "Thanks"}],
     "kwargs": {"add_generation_prompt": True}},
    {"name": "tools_call_and_response", "messages": [
        {"role": "system", "content": "You can check the weather."},
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"type": "function", "function": {"name": "get_weather",
                                              "arguments": "{\"city\": \"Oslo\", \"unit\": \"celsius\"}"}}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "tool", "content": "{\"temp\": 4}"},
        {"role": "assistant", "content": "Paris is 21 C, Oslo is 4 C."},
        {"role": "user", "content": "Thanks!"}],
     "tools": TOOLS, "kwargs": {"add_generation_prompt": True}},
    {"name": "tools_no_system", "messages": [{"role": "user", "content": "Weather in Rome?"}],
     "tools": TOOLS, "kwargs": {"add_generation_prompt": True, "enable_thinking": False}},
]


def golden_text_cases(hf_tok):
    """Golden encode/decode results from transformers' AutoTokenizer."""
    out = []
    for text in TEXT_CASES:
        with_special = hf_tok(text, add_special_tokens=True)["input_ids"]
        plain = hf_tok(text, add_special_tokens=False)["input_ids"]
        out.append({
            "text": text,
            "ids": plain,
            "ids_with_special": with_special,
            "decoded": hf_tok.decode(with_special, skip_special_tokens=False),
            "decoded_skip_special": hf_tok.decode(with_special, skip_special_tokens=True),
        })
        if hf_tok.decode(plain) != text:
            raise RuntimeError(f"tokenizer does not round-trip {text!r}")
    return out


def golden_chat_cases(hf_tok):
    """Golden chat-template renderings (text and ids, no special tokens added on top)."""
    out = []
    for case in CHAT_CASES:
        text = hf_tok.apply_chat_template(case["messages"], tools=case.get("tools"), tokenize=False,
                                          **case["kwargs"])
        out.append({
            "name": case["name"],
            "messages": case["messages"],
            "tools": case.get("tools"),
            "kwargs": case["kwargs"],
            "rendered": text,
            "ids": hf_tok(text, add_special_tokens=False)["input_ids"],
        })
    return out
