/* Plays PyTorch's part with NCCL, and knows nothing of hpct: rank 0 gets an
 * id and hands it to the others (through a file in the directory argv[1],
 * standing in for the store), then every rank calls
 * ncclCommInitRankConfig.  Each rank writes what it saw to <dir>/rank.<r>:
 * the id's address and whether it carries hpct's marker, whether a root
 * thread of NCCL's runs in the process, and NCCL's result (no GPU here:
 * NCCL's own error).  Exit 0 when it got that far. */
#include <arpa/inet.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
	char internal[128];
} ncclUniqueId;
int ncclGetUniqueId(ncclUniqueId *id);
int ncclCommInitRankConfig(void **comm, int nranks, ncclUniqueId id, int rank, void *config);

/* NCCL names its root thread "NCCL BootstrapR". */
static int root_thread(void)
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

int main(int argc, char **argv)
{
	if (argc != 2 || !getenv("RANK") || !getenv("WORLD_SIZE"))
		return 2;
	int rank = atoi(getenv("RANK")), n = atoi(getenv("WORLD_SIZE"));
	setenv("NCCL_SET_THREAD_NAME", "1", 1); /* so its root thread can be seen */
	char path[512], tmp[512];
	snprintf(path, sizeof(path), "%s/id", argv[1]);
	ncclUniqueId id;
	int got = -1;
	if (rank == 0) {
		got = ncclGetUniqueId(&id);
		snprintf(tmp, sizeof(tmp), "%s/id.tmp", argv[1]);
		FILE *f = fopen(tmp, "w");
		if (!f || fwrite(&id, sizeof(id), 1, f) != 1 || fclose(f) != 0 ||
		    rename(tmp, path) != 0)
			return 3;
	} else {
		for (int i = 0; i < 6000; i++) { /* the "store": a poll, 60 s a hang guard */
			FILE *f = fopen(path, "r");
			if (f && fread(&id, sizeof(id), 1, f) == 1) {
				fclose(f);
				got = 0;
				break;
			}
			if (f)
				fclose(f);
			usleep(10000);
		}
		if (got != 0)
			return 4;
	}
	int roots = root_thread();
	void *comm = NULL;
	int init = ncclCommInitRankConfig(&comm, n, id, rank, NULL);
	unsigned short fam, port;
	memcpy(&fam, id.internal + 8, 2);
	memcpy(&port, id.internal + 10, 2);
	char host[64] = "?";
	if (fam == AF_INET)
		inet_ntop(AF_INET, id.internal + 12, host, sizeof(host));
	snprintf(path, sizeof(path), "%s/rank.%d", argv[1], rank);
	FILE *f = fopen(path, "w");
	if (!f)
		return 5;
	fprintf(f, "getid=%d derived=%d host=%s port=%u root_thread=%d init=%d\n", got,
	        memcmp(id.internal + 120, "hpct", 4) == 0, host, ntohs(port), roots, init);
	return fclose(f) == 0 ? 0 : 6;
}
