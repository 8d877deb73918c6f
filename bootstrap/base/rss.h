/* This process's memory as the kernel counts it, for the programs that
 * report it (hpct-bench's ranks, the simulator, the tests' harness). */
#ifndef HPCT_SELF_RSS_H
#define HPCT_SELF_RSS_H
#include <stdio.h>
#include <string.h>

/* A field of /proc/self/status in kB ("VmRSS", "VmHWM", "VmData"), -1 if
 * it cannot be read. */
static inline long hpct_self_status_kb(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;
	size_t n = strlen(field);
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, field, n) == 0 && line[n] == ':' &&
		    sscanf(line + n + 1, "%ld", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

/* VmRSS in kB, -1 if it cannot be read. */
static inline long hpct_self_rss_kb(void)
{
	return hpct_self_status_kb("VmRSS");
}

/* VmHWM (the peak) back to the resident memory now, so that a later read
 * of VmHWM is the peak since (Linux 4.0 and later; elsewhere it stays the
 * whole run's). */
static inline void hpct_self_hwm_reset(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");
	if (f) {
		fputs("5", f);
		fclose(f);
	}
}

#endif
