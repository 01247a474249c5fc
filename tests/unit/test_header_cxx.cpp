// tern.h compiles as C++ and its symbols link with C linkage.
#include "tern.h"
#include <cstdio>
#include <cstring>

int main()
{
    if (std::strcmp(tern_status_str(TERN_OK), "ok") != 0) return 1;
    tern_model_params p = tern_model_default_params();
    (void)p;
    std::printf("1 passed, 0 failed\n");
    return 0;
}
