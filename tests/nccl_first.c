/* The smallest NCCL program: its very first statement is ncclGetUniqueId,
 * before it reads or sets any variable, and it knows nothing of hpct.  It
 * writes to <dir>/first.<RANK> (RANK unset: first.0) whether the id carries
 * hpct's marker (bytes 120.. "hpct") and whether a root thread of NCCL's
 * runs (named "NCCL BootstrapR" when NCCL_SET_THREAD_NAME=1 is in its
 * environment).  Exit 0 when it could say so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/nccl_program.h"

int main(int argc, char **argv)
{
	ncclUniqueId id;
	int rc = ncclGetUniqueId(&id);
	if (argc != 2)
		return 2;
	const char *rank = getenv("RANK");
	char path[512];
	snprintf(path, sizeof(path), "%s/first.%s", argv[1], rank ? rank : "0");
	FILE *f = fopen(path, "w");
	if (!f)
		return 3;
	fprintf(f, "rc=%d derived=%d root_thread=%d\n", rc,
	        rc == 0 && memcmp(id.internal + 120, "hpct", 4) == 0, root_thread());
	return fclose(f) == 0 ? 0 : 4;
}
