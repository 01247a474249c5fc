// tern.h compiles as C++ and its symbols link with C linkage.
#include "tern.h"
#include <cstdio>
#include <cstring>

int main()
{
    if (std::strcmp(tern_status_str(TERN_OK), "ok") != 0) return 1;
    tern_model_params p = tern_model_default_params();
    (void)p;
    tern_request r = tern_request();
    r.embed = true;
    r.pooling = TERN_POOLING_LAST;
    tern_embed_info info;
    if (tern_model_embed_info(nullptr, &info) != TERN_E_INVALID_ARG) return 1;
    (void)r;
    std::printf("1 passed, 0 failed\n");
    return 0;
}
