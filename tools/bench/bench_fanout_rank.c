/* The rank side of hpct-bench --scenario fanout (bench_fanout.c, which
 * launches the ranks with the environment read here): a rank joins the
 * world, makes its C buffers (and C - 1 more worlds, a fan-out each), and
 * runs the phases, each a world barrier, C fan-outs at once, a check of
 * every byte received and one report (time, VmHWM, descriptors, the
 * fan-out's stats and the process's in-flight budget). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hpct/fanout.h"
#include "hpct/hpct.h"
#include "tools/bench/bench.h"
#include "tools/common/bench_rank.h"

static const char *const plan_name[] = {
	[HPCT_FANOUT_WAVES] = "waves",
	[HPCT_FANOUT_PULL] = "pull",
	[HPCT_FANOUT_TREE] = "tree",
};

static size_t env_size(const char *name, size_t dflt)
{
	const char *v = getenv(name);
	return v && *v ? (size_t)strtoull(v, NULL, 10) : dflt;
}

/* This process's open descriptors (the directory's own left out). */
static long count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	long n = 0;
	struct dirent *e;
	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n - 1;
}

struct sampler {
	pthread_t t;
	atomic_int stop;
	long max;
};

static void *sample_fds(void *arg)
{
	struct sampler *s = arg;
	struct timespec ms = { 0, 1000000 };
	while (!atomic_load(&s->stop)) {
		long n = count_fds();
		if (n > s->max)
			s->max = n;
		nanosleep(&ms, NULL);
	}
	return NULL;
}

/* One fan-out of a phase: its group, buffer and outcome. */
struct fan_job {
	hpct_group *g;
	char name[32];
	uint64_t want, held;
	void *buf;
	size_t len;
	struct hpct_fanout_opts opts;
	struct hpct_fanout_stats st;
	int rc;
};

static void *fan_run(void *arg)
{
	struct fan_job *j = arg;
	j->rc = hpct_fanout(j->g, j->name, j->want, j->held, j->buf, j->len, &j->opts, &j->st);
	if (j->rc)
		fprintf(stderr, "hpct-bench: rank %d: fan-out %s (%s, %zu bytes): %s\n",
		        hpct_group_rank(j->g), j->name, plan_name[j->opts.plan], j->len,
		        hpct_last_error());
	return NULL;
}

/* Rank j * n / s for j < s is a source. */
static int is_source(int me, int n, int s)
{
	for (int j = 0; j < s; j++)
		if ((long)j * n / s == me)
			return 1;
	return 0;
}

/* World c > 0 of a rank's C: the launcher's, moved c blocks of ports up
 * (HPCT_BENCH_FANOUT_STRIDE), a job of its own; 0 or an error. */
static int extra_world(int c, hpct_world **out)
{
	static char job[128];
	static long master;
	if (!job[0]) {
		snprintf(job, sizeof(job), "%s",
		         getenv("HPCT_JOB_ID") ? getenv("HPCT_JOB_ID") : "");
		master = atol(getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "0");
	}
	long stride = (long)env_size("HPCT_BENCH_FANOUT_STRIDE", 0);
	char v[160];
	snprintf(v, sizeof(v), "%s-%d", job, c);
	setenv("HPCT_JOB_ID", v, 1);
	snprintf(v, sizeof(v), "%ld", master + c * stride);
	setenv("MASTER_PORT", v, 1);
	snprintf(v, sizeof(v), "%ld", master + c * stride + 1);
	setenv("HPCT_PORT_BASE", v, 1);
	return stride > 0 ? hpct_world_create(out) : HPCT_EBADENV;
}

/* One phase: the barrier, the C fan-outs, the check; its record. */
static int phase(hpct_world *w, struct fan_job *jobs, int conc, int source, int sample,
                 struct record *rec)
{
	hpct_group *world = hpct_world_group(w);
	struct sampler smp = { .max = 0 };
	for (int c = 0; c < conc && source; c++) /* the phase's version, not timed */
		bench_pattern_fill(jobs[c].buf, jobs[c].len,
		                   jobs[c].want * BENCH_FANOUT_MAX_CONC + (uint64_t)c);
	hpct_self_hwm_reset();
	if (sample && pthread_create(&smp.t, NULL, sample_fds, &smp) != 0)
		sample = 0;
	int rc = hpct_barrier(world);
	rec->start = mono();
	pthread_t t[BENCH_FANOUT_MAX_CONC];
	int started = 1;
	for (; started < conc && rc == 0; started++)
		if (pthread_create(&t[started], NULL, fan_run, &jobs[started]) != 0) {
			rc = HPCT_ENOMEM;
			break;
		}
	if (rc == 0)
		fan_run(&jobs[0]);
	for (int c = 1; c < started; c++)
		pthread_join(t[c], NULL);
	rec->done = mono();
	if (sample) {
		atomic_store(&smp.stop, 1);
		pthread_join(smp.t, NULL);
	}
	rec->fds = sample ? smp.max : count_fds();
	for (int c = 0; c < conc && rc == 0; c++) {
		rc = jobs[c].rc;
		size_t bad = rc || source
		                     ? 0
		                     : bench_pattern_check(jobs[c].buf, jobs[c].len,
		                                           jobs[c].want * BENCH_FANOUT_MAX_CONC +
		                                                   (uint64_t)c);
		if (bad) {
			fprintf(stderr,
			        "hpct-bench: rank %d: fan-out %s (%s) delivered wrong "
			        "bytes at %zu\n",
			        hpct_group_rank(world), jobs[c].name, plan_name[jobs[c].opts.plan],
			        bad - 1);
			rc = HPCT_EPROTO;
		}
		if (jobs[c].st.waves > rec->waves)
			rec->waves = jobs[c].st.waves;
		rec->peers += jobs[c].st.peers;
		rec->bytes_exchanged += (long)jobs[c].st.bytes_recv;
	}
	struct hpct_inflight_stats in;
	if (hpct_inflight_get_stats(&in) == 0) {
		rec->inflight_peak = (long)in.bytes_peak;
		rec->inflight_waits = (long)in.waits;
	}
	rec->rss_kb = hpct_self_status_kb("VmHWM");
	rec->rc = rc;
	rec->conns = conns_of(w);
	return rc;
}

int bench_fanout_rank(hpct_world *w)
{
	hpct_group *world = hpct_world_group(w);
	int n = hpct_group_size(world), me = hpct_group_rank(world);
	size_t len = env_size("HPCT_BENCH_FANOUT_BYTES", 0);
	int s = (int)env_size("HPCT_BENCH_FANOUT_SOURCES", 1);
	int conc = (int)env_size("HPCT_BENCH_FANOUT_CONC", 1);
	int phases = (int)env_size("HPCT_BENCH_FANOUT_PHASES", 0);
	int sample = (int)env_size("HPCT_BENCH_FANOUT_SAMPLE", 0);
	const char *order = getenv("HPCT_BENCH_FANOUT_PLANS"); /* "012": plan per phase, cycled */
	size_t chunk = env_size("HPCT_BENCH_FANOUT_CHUNK", 4u << 20);
	if (!len || !order || !*order || conc < 1 || conc > BENCH_FANOUT_MAX_CONC || phases < 1)
		return settle(w, HPCT_EBADENV);
	int source = is_source(me, n, s), rc = 0;
	struct fan_job jobs[BENCH_FANOUT_MAX_CONC];
	hpct_world *worlds[BENCH_FANOUT_MAX_CONC] = { w };
	memset(jobs, 0, sizeof(jobs));
	for (int c = 0; c < conc && rc == 0; c++) {
		if (c > 0) /* a world each: the fan-outs run at once */
			rc = extra_world(c, &worlds[c]);
		jobs[c].g = rc == 0 ? hpct_world_group(worlds[c]) : NULL;
		jobs[c].len = len;
		jobs[c].buf = rc == 0 ? malloc(len) : NULL;
		if (rc == 0 && !jobs[c].buf)
			rc = HPCT_ENOMEM;
		if (rc == 0) /* resident from the start, in every plan alike */
			memset(jobs[c].buf, 0, len);
	}
	int ran = 0;
	for (int p = 0; p < phases && rc == 0; p++, ran++) {
		struct record rec = { .rc = 0 };
		for (int c = 0; c < conc; c++) {
			struct fan_job *j = &jobs[c];
			j->opts = (struct hpct_fanout_opts){
				.chunk = chunk,
				.plan = (enum hpct_fanout_plan)(order[p % strlen(order)] - '0'),
			};
			snprintf(j->name, sizeof(j->name), "bench-fan-%d", c);
			j->want = (uint64_t)p + 1;
			j->held = source ? j->want : 0;
			memset(&j->st, 0, sizeof(j->st));
			j->rc = 0;
		}
		rc = phase(w, jobs, conc, source, sample, &rec);
		if (report_record(&rec) != 0)
			rc = 3;
	}
	if (rc && !ran) /* no phase reported: the launcher learns it here */
		report(rc, 0, 0);
	wait_release();
	for (int c = 0; c < conc; c++) {
		free(jobs[c].buf);
		if (c > 0)
			hpct_world_destroy(worlds[c]);
	}
	return rc;
}
