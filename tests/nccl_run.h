/* What the tests that launch NCCL programs share (test_preload.c: the shim
 * before a GPU is reached; test_nccl_ranks.c: real ranks through the
 * stand-in driver): the release under test, a run's folder, the ranks'
 * environment, hpct-run over loopback nodes, and the ranks' logs.  Paths
 * come from the environment: HPCT_RUN_BIN, HPCT_PRELOAD (and
 * HPCT_PRELOAD_FIRST, the sanitizer runtime that must come before the shim
 * in an instrumented build), HPCT_STANDIN_DIR (the stand-in driver's
 * folder). */
#ifndef HPCT_TESTS_NCCL_RUN_H
#define HPCT_TESTS_NCCL_RUN_H

#include <stddef.h>

/* The release hpct loads here (its ncclGetVersion code), and the folder
 * it is in. */
int nr_nccl_version(char *dir, size_t len);

/* A fresh folder under $TMPDIR; removed by nr_tmpdir_done once its files
 * are read (a failed assertion leaves it, to be looked at). */
char *nr_tmpdir(char *buf, size_t len, const char *what);
void nr_tmpdir_done(const char *dir);

/* The whole of a small file into buf ("" if none). */
void nr_slurp(const char *path, char *buf, size_t len);
/* How often needle occurs in hay. */
int nr_count(const char *hay, const char *needle);

/* "env ..." for a rank: `extra` (-u options first), the shim under
 * LD_PRELOAD (after the sanitizer's runtime), this release first on the
 * library path, and with `standin` the stand-in driver before it and the
 * NCCL settings its README lists. */
void nr_job_env(char *buf, size_t len, const char *extra, int standin);

/* Runs `what` (a command line after hpct-run's --) on n ranks over 2
 * nodes, hpct's ports from `port`, HPCT_TIMEOUT `timeout` s (hpct-run's
 * guard 20 s later), hpct-run's `opts` ("" or e.g. --keep-going); its
 * output in <dir>/run.out.  hpct-run's exit status (-1 if it did not
 * exit). */
int nr_run(const char *dir, int n, int port, int timeout, const char *extra, int standin,
           const char *opts, const char *what);

/* What nccl_job's rank r wrote to <dir>/rank.<r>; 0 when all of it was
 * read, else -1. */
struct nr_saw {
	int version, getid, derived, root_thread, init, ports_free, root_after;
	double init_ms;
	char host[64];
	unsigned port;
};
int nr_read_saw(const char *dir, int r, struct nr_saw *saw);

/* Every <dir>/<prefix>* one after the other into log (the ranks'
 * HPCT_DEBUG_FILE, NCCL_DEBUG_FILE). */
void nr_logs(const char *dir, const char *prefix, char *log, size_t len);

#endif
