/*
 * fuzz_template.c — arbitrary bytes as chat template source: compile, then
 * render with a small fixed conversation. Must never crash, leak or hang
 * (the interpreter bounds steps, depth, output and memory).
 */
#include "tern.h"

#include <stddef.h>
#include <stdint.h>

static const char *const context =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi\"}]},"
    "{\"role\": \"assistant\", \"content\": \"Hello\", \"tool_calls\": [{\"type\": \"function\","
    "\"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1.5, \"y\": [true, null]}}}]},"
    "{\"role\": \"tool\", \"content\": \"42\"}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}],"
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tern_chat_template *t = NULL;
    if (tern_chat_template_create((const char *)data, size, &t) != TERN_OK) return 0;
    char *out = NULL;
    size_t len = 0;
    if (tern_chat_template_render(t, context, &out, &len) == TERN_OK) tern_free_buf(out);
    tern_chat_template_destroy(t);
    return 0;
}
