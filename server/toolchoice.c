/*
 * toolchoice.c — enforcing `tool_choice` "required" and a named function
 * without a grammar engine. After the chat template's generation prompt the
 * prompt gets the opening of a tool call in the model's own format (an
 * assistant "prefill"), and gen.c feeds that same text to the output
 * pipeline before the first token, so the parser sees exactly what it would
 * have seen had the model written the opening itself:
 *
 *   format           required              named X
 *   Hermes / Qwen    <tool_call>\n          <tool_call>\n{"name": "X", "arguments": 
 *   Qwen3.5 XML      <tool_call>\n<function= <tool_call>\n<function=X>\n
 *   Llama 3.x JSON   {"name": "             {"name": "X", "parameters": 
 *   Gemma 4          <|tool_call>call:      <|tool_call>call:X{
 *
 * The format is found by rendering an assistant tool call through the
 * model's chat template (the template shows how the model writes calls),
 * falling back to the vocabulary (<|tool_call>, <tool_call>, <|python_tag|>),
 * then to Hermes. Also here: which special tokens the output pipeline needs
 * as text. Depends on include/tern.h, jansson, libc.
 */
#include "server.h"

#include <stdlib.h>
#include <string.h>

#define PROBE_FN "tern_probe_fn"

static const char PROBE_CTX[] =
    "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", "
    "\"content\": \"\", \"tool_calls\": [{\"id\": \"call_0\", \"type\": \"function\", \"function\": "
    "{\"name\": \"" PROBE_FN "\", \"arguments\": {\"tern_probe_arg\": \"v\"}}}]}], "
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"" PROBE_FN "\", "
    "\"description\": \"d\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"tern_probe_arg\": {\"type\": \"string\"}}}}}], "
    "\"add_generation_prompt\": false, \"bos_token\": \"\", \"eos_token\": \"\"}";

/* The format the rendered probe call shows, or -1. */
static int format_of_render(const char *text)
{
    if (strstr(text, "<|tool_call>call:" PROBE_FN "{")) return SRV_TF_GEMMA4;
    if (strstr(text, "<function=" PROBE_FN)) return SRV_TF_XML;
    if (strstr(text, "<tool_call>")) return SRV_TF_HERMES;
    const char *n = strstr(text, "\"name\": \"" PROBE_FN "\"");
    if (n && strstr(n, "\"parameters\"")) return SRV_TF_LLAMA;
    return -1;
}

enum srv_tool_fmt srv_tool_format_detect(const struct tern_chat_template *tmpl,
                                         const struct tern_tokenizer *tok)
{
    if (tmpl) {
        char *text = NULL;
        size_t len = 0;
        int f = -1;
        if (tern_chat_template_render(tmpl, PROBE_CTX, &text, &len) == TERN_OK && text)
            f = format_of_render(text);
        tern_free_buf(text);
        if (f >= 0) return (enum srv_tool_fmt)f;
    }
    if (tok && tern_tokenizer_token_id(tok, "<|tool_call>") >= 0) return SRV_TF_GEMMA4;
    if (tok && tern_tokenizer_token_id(tok, "<tool_call>") >= 0) return SRV_TF_HERMES;
    if (tok && tern_tokenizer_token_id(tok, "<|python_tag|>") >= 0) return SRV_TF_LLAMA;
    return SRV_TF_HERMES;
}

const char *srv_tool_format_name(enum srv_tool_fmt f)
{
    return f == SRV_TF_XML      ? "qwen3.5-xml"
           : f == SRV_TF_LLAMA  ? "llama3-json"
           : f == SRV_TF_GEMMA4 ? "gemma4"
                                : "hermes";
}

int srv_marker_tokens(const struct tern_tokenizer *tok, int32_t *ids, int max)
{
    static const char *const markers[] = {"<think>",      "</think>",     "<tool_call>",
                                          "</tool_call>", "<|channel>",   "<channel|>",
                                          "<|tool_call>", "<tool_call|>", "<|\"|>"};
    int n = 0;
    for (size_t i = 0; tok && i < sizeof markers / sizeof markers[0] && n < max; i++) {
        int32_t id = tern_tokenizer_token_id(tok, markers[i]);
        if (id >= 0 && tern_tokenizer_is_special(tok, id)) ids[n++] = id;
    }
    return n;
}

char *srv_tool_prefill(enum srv_tool_fmt f, enum srv_tool_choice choice, const char *name,
                       enum srv_reason_fmt open_reasoning)
{
    if (choice != SRV_TC_REQUIRED && (choice != SRV_TC_NAMED || !name)) return NULL;
    struct srv_buf b = {0};
    bool ok = srv_buf_add(&b, "", 0);
    /* A generation prompt that opened a reasoning block closes it first: the
     * call is the answer, not part of the reasoning. */
    if (open_reasoning == SRV_RF_THINK) ok = ok && srv_buf_adds(&b, "</think>\n\n");
    if (open_reasoning == SRV_RF_GEMMA4) ok = ok && srv_buf_adds(&b, "<channel|>");
    char *qname = NULL; /* the name as a JSON string, quotes included */
    if (choice == SRV_TC_NAMED && f != SRV_TF_XML && f != SRV_TF_GEMMA4) {
        json_t *j = json_string(name);
        qname = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
        json_decref(j);
        ok = ok && qname;
    }
    if (!ok) goto fail;
    bool named = choice == SRV_TC_NAMED;
    switch (f) {
    case SRV_TF_HERMES:
        ok = srv_buf_adds(&b, "<tool_call>\n") &&
             (!named || srv_buf_printf(&b, "{\"name\": %s, \"arguments\": ", qname));
        break;
    case SRV_TF_XML:
        ok = srv_buf_adds(&b, "<tool_call>\n<function=") &&
             (!named || srv_buf_printf(&b, "%s>\n", name));
        break;
    case SRV_TF_LLAMA:
        ok = named ? srv_buf_printf(&b, "{\"name\": %s, \"parameters\": ", qname)
                   : srv_buf_adds(&b, "{\"name\": \"");
        break;
    case SRV_TF_GEMMA4:
        ok = srv_buf_adds(&b, "<|tool_call>call:") && (!named || srv_buf_printf(&b, "%s{", name));
        break;
    }
    if (!ok) goto fail;
    free(qname);
    return b.p;
fail:
    free(qname);
    srv_buf_free(&b);
    return NULL;
}
