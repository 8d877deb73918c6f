/* This process's resident memory, for the programs that report it
 * (hpct-bench's ranks, the tests' harness). */
#ifndef HPCT_SELF_RSS_H
#define HPCT_SELF_RSS_H
#include <stdio.h>

/* VmRSS of /proc/self/status in kB, -1 if it cannot be read. */
static inline long hpct_self_rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

#endif
