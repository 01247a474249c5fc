/*
 * fuzz_safetensors.c — libFuzzer target: arbitrary bytes as a whole
 * .safetensors file image (8-byte length, JSON header, data section).
 *
 * Runs the same checks tern_st_file_open makes (tern_st_image_parse), then,
 * when they pass, reads every byte of every tensor view, so that any
 * accepted header whose offsets escape the data section shows up under ASan.
 * Also feeds the raw input straight to tern_st_header_parse with a data
 * length taken from the first byte. Errors must be one line.
 */
#include "io/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_message(void)
{
    if (strchr(tern_last_error(), '\n')) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* copy so that the data section ends exactly at the end of an allocation */
    uint8_t *img = malloc(size ? size : 1);
    if (!img) return 0;
    if (size) memcpy(img, data, size);
    struct tern_st_header h;
    size_t start = 0;
    if (tern_st_image_parse(img, size, "fuzz.safetensors", &h, &start) == TERN_OK) {
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < h.n_entries; i++) {
            struct tern_tensor_view v;
            tern_st_entry_view(&h.entries[i], img + start, &v);
            const uint8_t *p = v.data;
            for (size_t j = 0; j < v.n_bytes; j++) sink ^= p[j];
            if (!tern_st_header_find(&h, h.entries[i].name)) abort();
        }
        (void)sink;
        tern_st_header_deinit(&h);
    } else {
        check_message();
    }
    if (size > 1) {
        if (tern_st_header_parse((const char *)data + 1, size - 1, data[0], "raw", &h) == TERN_OK)
            tern_st_header_deinit(&h);
        else
            check_message();
    }
    free(img);
    return 0;
}
