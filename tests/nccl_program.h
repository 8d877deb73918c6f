/* What the NCCL programs of the tests (nccl_job.c, nccl_first.c) share:
 * NCCL's types and calls as a program that includes nccl.h sees them (the
 * tests do not need nccl.h), and whether a root thread of NCCL's runs. */
#ifndef HPCT_TESTS_NCCL_PROGRAM_H
#define HPCT_TESTS_NCCL_PROGRAM_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>

typedef struct {
	char internal[128];
} ncclUniqueId;
int ncclGetVersion(int *version);
int ncclGetUniqueId(ncclUniqueId *id);
int ncclCommInitRankConfig(void **comm, int nranks, ncclUniqueId id, int rank, void *config);
int ncclCommInitRankScalable(void **comm, int nranks, int rank, int nid, ncclUniqueId *ids,
                             void *config);
int ncclCommDestroy(void *comm);

/* NCCL names its root thread "NCCL BootstrapR" (NCCL_SET_THREAD_NAME=1). */
static inline int root_thread(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int found = 0;
	while (d && (e = readdir(d))) {
		char p[300], name[64] = "";
		snprintf(p, sizeof(p), "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(p, "r");
		if (f && fgets(name, sizeof(name), f) && strncmp(name, "NCCL BootstrapR", 15) == 0)
			found = 1;
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return found;
}

#endif
