/* What the tests that launch NCCL programs share: see nccl_run.h. */
#include "tests/nccl_run.h"

#include <criterion/criterion.h>

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "hpct/nccl.h"
#include "tests/nccl_release.h"

int nr_nccl_version(char *dir, size_t len)
{
	const struct hpct_nccl_lib *l = hpct__nccl_lib();
	cr_assert_not_null(l, "%s", hpct_last_error());
	Dl_info di;
	cr_assert(dladdr(*(void **)&l->get_version, &di) && di.dli_fname, "where is NCCL?");
	snprintf(dir, len, "%s", di.dli_fname);
	char *slash = strrchr(dir, '/');
	cr_assert_not_null(slash, "NCCL at %s", di.dli_fname);
	*slash = 0;
	return l->version;
}

char *nr_tmpdir(char *buf, size_t len, const char *what)
{
	const char *t = getenv("TMPDIR");
	snprintf(buf, len, "%s/hpct-%s.XXXXXX", t && *t ? t : "/tmp", what);
	cr_assert_not_null(mkdtemp(buf), "mkdtemp: %s", strerror(errno));
	return buf;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(path);
}

void nr_tmpdir_done(const char *dir)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void nr_slurp(const char *path, char *buf, size_t len)
{
	buf[0] = 0;
	FILE *f = fopen(path, "r");
	if (f) {
		buf[fread(buf, 1, len - 1, f)] = 0;
		fclose(f);
	}
}

int nr_count(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* The NCCL settings a rank through the stand-in takes (tests/standin/
 * README.md): sockets on loopback, no InfiniBand probe; SHM stays on. */
static const char standin_knobs[] = "NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1";

void nr_job_env(char *buf, size_t len, const char *extra, int standin)
{
	char lib[4096];
	nr_nccl_version(lib, sizeof(lib));
	const char *first = getenv("HPCT_PRELOAD_FIRST"), *path = getenv("LD_LIBRARY_PATH");
	const char *sdir = getenv("HPCT_STANDIN_DIR");
	if (standin)
		cr_assert(sdir && *sdir, "HPCT_STANDIN_DIR is not set");
	/* NCCL_ENV_PLUGIN: set here by loading NCCL; a rank starts without it */
	/* with the stand-in, its yield library after the shim: many ranks
	 * that poll their sockets on 2 cores give the processor away */
	snprintf(buf, len,
	         "env -u NCCL_ENV_PLUGIN %s LD_PRELOAD='%s%s%s%s%s%s' LD_LIBRARY_PATH='%s%s%s%s%s' "
	         "%s",
	         extra, first ? first : "", first ? " " : "", getenv("HPCT_PRELOAD"),
	         standin ? " " : "", standin ? sdir : "", standin ? "/libstandin_yield.so" : "",
	         standin ? sdir : "", standin ? ":" : "", lib, path ? ":" : "", path ? path : "",
	         standin ? standin_knobs : "");
}

int nr_run(const char *dir, int n, int port, int timeout, const char *extra, int standin,
           const char *opts, const char *what)
{
	char env[8192], cmd[16384];
	nr_job_env(env, sizeof(env), extra, standin);
	snprintf(cmd, sizeof(cmd),
	         "%s NCCL_SET_THREAD_NAME=1 HPCT_PORT_BASE=%d HPCT_PORT_RANGE=8 "
	         "HPCT_JOB_ID=preload-test HPCT_TIMEOUT=%d '%s' -n %d --nodes 2 --timeout %d %s -- "
	         "%s "
	         "> '%s/run.out' 2>&1",
	         env, port, timeout, getenv("HPCT_RUN_BIN"), n, timeout + 20, opts, what, dir);
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void nr_logs(const char *dir, const char *prefix, char *log, size_t len)
{
	char path[512];
	size_t at = 0;
	log[0] = 0;
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		FILE *f = fopen(path, "r");
		if (f) {
			at += fread(log + at, 1, len - 1 - at, f);
			log[at] = 0;
			fclose(f);
		}
	}
	if (d)
		closedir(d);
}

int nr_read_saw(const char *dir, int r, struct nr_saw *saw)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/rank.%d", dir, r);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	int got = fscanf(f,
	                 "version=%d getid=%d derived=%d host=%63s port=%u root_thread=%d init=%d "
	                 "ports_free=%d init_ms=%lf root_after=%d",
	                 &saw->version, &saw->getid, &saw->derived, saw->host, &saw->port,
	                 &saw->root_thread, &saw->init, &saw->ports_free, &saw->init_ms,
	                 &saw->root_after);
	fclose(f);
	return got == 10 ? 0 : -1;
}
