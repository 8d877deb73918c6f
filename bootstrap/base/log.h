/* Logging in the manner of NCCL's: HPCT_DEBUG=WARN|INFO|TRACE (default WARN),
 * HPCT_DEBUG_SUBSYS=INIT,ENV,NET,COLL,STD,NCCL (or ALL; ^X excludes),
 * HPCT_DEBUG_FILE=path with %h (host) and %p (pid).  Prefix "host:pid [rank]".
 * The level is checked before anything is formatted. */
#ifndef HPCT_LOG_H
#define HPCT_LOG_H

#include "bootstrap/base/private_api.h"

#include <stdarg.h>

enum hpct_log_level { HPCT_LOG_NONE = 0, HPCT_LOG_WARN = 1, HPCT_LOG_INFO = 2, HPCT_LOG_TRACE = 3 };

enum hpct_log_subsys {
	HPCT_SUB_INIT = 1 << 0,
	HPCT_SUB_ENV = 1 << 1,
	HPCT_SUB_NET = 1 << 2,
	HPCT_SUB_COLL = 1 << 3,
	HPCT_SUB_STD = 1 << 4,
	HPCT_SUB_NCCL = 1 << 5,
	HPCT_SUB_ALL = 0xff,
};

/* Reads HPCT_DEBUG* once per process (first call wins; thread-safe). */
void hpct__log_init(void);
/* Sets the rank shown in the prefix (-1: none). */
void hpct__log_set_rank(int rank);
HPCT_PRIVATE int hpct__log_enabled(int level, int subsys);
HPCT_PRIVATE void hpct__log(int level, int subsys, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* A refusal a hostile peer can repeat at will is logged at most
 * HPCT_LOG_BURST times a second of its kind: hpct__log_burst_ok() says
 * whether a line may go out now, and *quiet_out how many were held back
 * since the last one (to be said with it).  Zero-initialised; not locked. */
#define HPCT_LOG_BURST 8
struct hpct_log_burst {
	double since;
	int lines;
	unsigned long quiet;
};
HPCT_PRIVATE int hpct__log_burst_ok(struct hpct_log_burst *b, unsigned long *quiet_out);

/* Logs a failure once at WARN, keeps the message for hpct_last_error() and
 * returns err, so callers write `return hpct__fail(err, SUB, "...")`. */
HPCT_PRIVATE int hpct__fail(int err, int subsys, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* Keeps a message for hpct_last_error() without logging it. */
void hpct__set_last_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define HPCT_INFO(sub, ...)                                           \
	do {                                                          \
		if (hpct__log_enabled(HPCT_LOG_INFO, (sub)))          \
			hpct__log(HPCT_LOG_INFO, (sub), __VA_ARGS__); \
	} while (0)
#define HPCT_TRACE(sub, ...)                                           \
	do {                                                           \
		if (hpct__log_enabled(HPCT_LOG_TRACE, (sub)))          \
			hpct__log(HPCT_LOG_TRACE, (sub), __VA_ARGS__); \
	} while (0)
#define HPCT_WARN(sub, ...)                                           \
	do {                                                          \
		if (hpct__log_enabled(HPCT_LOG_WARN, (sub)))          \
			hpct__log(HPCT_LOG_WARN, (sub), __VA_ARGS__); \
	} while (0)

#endif
