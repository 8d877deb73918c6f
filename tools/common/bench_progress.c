/* bench_progress.h: one thread a process, woken every second, speaking only
 * when the thing named has run 10 s and 10 s have passed since it spoke. */
#include "tools/common/bench_progress.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#define EVERY_S 10.0

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thread;
	int running, stop;
	const char *prog;
	char what[256];
	double since, said;
} st = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER };

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *heartbeat(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&st.mu);
	while (!st.stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&st.cv, &st.mu, &ts);
		double now = mono_s();
		if (!st.stop && st.what[0] && now - st.since >= EVERY_S &&
		    now - st.said >= EVERY_S) {
			fprintf(stderr, "%s: still at %s, %.0f s into it\n", st.prog, st.what,
			        now - st.since);
			st.said = now;
		}
	}
	pthread_mutex_unlock(&st.mu);
	return NULL;
}

void bench_progress_start(const char *prog)
{
	pthread_mutex_lock(&st.mu);
	st.prog = prog;
	st.stop = 0;
	st.what[0] = 0;
	if (!st.running)
		st.running = pthread_create(&st.thread, NULL, heartbeat, NULL) == 0;
	pthread_mutex_unlock(&st.mu);
}

void bench_progress_at(const char *fmt, ...)
{
	va_list ap;
	pthread_mutex_lock(&st.mu);
	va_start(ap, fmt);
	vsnprintf(st.what, sizeof(st.what), fmt, ap);
	va_end(ap);
	st.since = st.said = mono_s();
	pthread_mutex_unlock(&st.mu);
}

void bench_progress_stop(void)
{
	pthread_mutex_lock(&st.mu);
	int was = st.running;
	st.stop = 1;
	st.running = 0;
	pthread_cond_signal(&st.cv);
	pthread_mutex_unlock(&st.mu);
	if (was)
		pthread_join(st.thread, NULL);
}
