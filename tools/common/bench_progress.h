/* A long run says where it is: bench_progress_at names what runs now, and
 * while that one thing lasts 10 s or more a thread says so on stderr every
 * 10 s ("PROG: still at WHAT, N s into it"), so that no one wonders
 * whether a benchmark hung. */
#ifndef HPCT_BENCH_PROGRESS_H
#define HPCT_BENCH_PROGRESS_H

/* Starts the thread; `prog` prefixes its lines ("hpct-bench"). */
void bench_progress_start(const char *prog);
/* What runs from now on (printf-style). */
void bench_progress_at(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Stops the thread (and says nothing more). */
void bench_progress_stop(void);

#endif
