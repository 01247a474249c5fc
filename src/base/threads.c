/*
 * threads.c — how many CPU threads the CPU backend uses by default.
 *
 * TERN_THREADS=N (a positive integer) sets it; otherwise it is the number of
 * physical cores this process may run on (its affinity mask, SMT siblings
 * counted once, as llama.cpp does): a second hardware thread of a busy core
 * adds little to bandwidth-bound work, and one thread per core leaves the
 * siblings to the rest of the machine. Depends on libc and Linux's sysfs.
 */
#include "base/base.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The (package, core) id of a logical CPU, or -1 when sysfs does not say. */
static long core_key(int cpu)
{
    char path[128];
    long ids[2] = {-1, -1};
    const char *names[2] = {"physical_package_id", "core_id"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", cpu, names[i]);
        FILE *f = fopen(path, "r");
        if (!f) return -1;
        if (fscanf(f, "%ld", &ids[i]) != 1) ids[i] = -1;
        fclose(f);
        if (ids[i] < 0) return -1;
    }
    return ids[0] * 65536 + ids[1];
}

int tern_default_threads(void)
{
    const char *env = getenv("TERN_THREADS");
    if (env && *env) {
        char *end;
        long n = strtol(env, &end, 10);
        if (*end == '\0' && n > 0 && n <= 4096) return (int)n;
        tern_log(TERN_LOG_WARN, "TERN_THREADS='%s' is not a positive integer; ignored", env);
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    long keys[CPU_SETSIZE];
    int n_keys = 0, n_cpus = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        n_cpus++;
        long k = core_key(cpu);
        if (k < 0) return CPU_COUNT(&set); /* no topology: every CPU */
        bool seen = false;
        for (int i = 0; i < n_keys && !seen; i++) seen = keys[i] == k;
        if (!seen) keys[n_keys++] = k;
    }
    return n_keys > 0 ? n_keys : (n_cpus > 0 ? n_cpus : 1);
}
