#include "bootstrap/base/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#include "bootstrap/base/util.h"
#include "hpct/hpct.h"

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int log_level = HPCT_LOG_WARN;
static int log_subsys = HPCT_SUB_ALL;
static FILE *log_file;
static char log_host[64];
/* written by the rank's thread, read by the store's server thread too */
static _Atomic int log_rank = -1;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

/* A forked child logs too: a line another thread was writing at the fork
 * leaves the lock free there, the only thread left. */
static void child_lock(void)
{
	pthread_mutex_init(&log_lock, NULL);
}

__attribute__((constructor)) static void fork_safe(void)
{
	pthread_atfork(NULL, NULL, child_lock);
}
static _Thread_local char last_error[1024];

static int subsys_bit(const char *name, size_t len)
{
	static const struct {
		const char *name;
		int bit;
	} map[] = { { "INIT", HPCT_SUB_INIT }, { "ENV", HPCT_SUB_ENV }, { "NET", HPCT_SUB_NET },
		    { "COLL", HPCT_SUB_COLL }, { "STD", HPCT_SUB_STD }, { "NCCL", HPCT_SUB_NCCL },
		    { "ALL", HPCT_SUB_ALL } };
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strlen(map[i].name) == len && strncasecmp(name, map[i].name, len) == 0)
			return map[i].bit;
	return 0;
}

static void parse_subsys(const char *s)
{
	int exclude = s[0] == '^';
	int mask = 0;
	for (const char *p = s + exclude; *p;) {
		size_t len = strcspn(p, ",");
		int bit = subsys_bit(p, len);
		if (!bit && len > 0) {
			/* a typo must not silently hide every warning */
			fprintf(stderr,
			        "%s:%d HPCT WARN HPCT_DEBUG_SUBSYS=%s: unknown subsystem '%.*s' "
			        "(have INIT, ENV, NET, COLL, STD, ALL); showing ALL\n",
			        log_host, (int)getpid(), s, (int)len, p);
			log_subsys = HPCT_SUB_ALL;
			return;
		}
		mask |= bit;
		p += len;
		if (*p == ',')
			p++;
	}
	log_subsys = exclude ? (HPCT_SUB_ALL & ~mask) : mask;
}

/* Expands %h and %p in HPCT_DEBUG_FILE. */
static void open_file(const char *pattern)
{
	char path[512], pid[16];
	size_t o = 0;
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	for (const char *p = pattern; *p && o + 1 < sizeof(path); p++) {
		const char *put = NULL;
		if (p[0] == '%' && p[1] == 'h')
			put = log_host;
		else if (p[0] == '%' && p[1] == 'p')
			put = pid;
		if (put) {
			/* never past the buffer, however long the host name */
			size_t n = strnlen(put, sizeof(path) - 1 - o);
			memcpy(path + o, put, n);
			o += n;
			p++;
		} else {
			path[o++] = *p;
		}
	}
	path[o] = 0;
	log_file = fopen(path, "a");
	if (log_file)
		setvbuf(log_file, NULL, _IOLBF, 0);
	else
		fprintf(stderr, "%s:%d HPCT WARN cannot open HPCT_DEBUG_FILE=%s: %s\n", log_host,
		        (int)getpid(), path, strerror(errno));
}

static void log_setup(void)
{
	gethostname(log_host, sizeof(log_host) - 1);
	const char *lvl = getenv("HPCT_DEBUG");
	if (lvl && *lvl) {
		if (strcasecmp(lvl, "NONE") == 0)
			log_level = HPCT_LOG_NONE;
		else if (strcasecmp(lvl, "WARN") == 0)
			log_level = HPCT_LOG_WARN;
		else if (strcasecmp(lvl, "INFO") == 0)
			log_level = HPCT_LOG_INFO;
		else if (strcasecmp(lvl, "TRACE") == 0)
			log_level = HPCT_LOG_TRACE;
		else
			fprintf(stderr,
			        "%s:%d HPCT WARN HPCT_DEBUG='%s' is not NONE, WARN, INFO or TRACE; "
			        "using WARN\n",
			        log_host, (int)getpid(), lvl);
	}
	const char *sub = getenv("HPCT_DEBUG_SUBSYS");
	if (sub && *sub)
		parse_subsys(sub);
	const char *file = getenv("HPCT_DEBUG_FILE");
	if (file && *file)
		open_file(file);
}

void hpct__log_init(void)
{
	pthread_once(&log_once, log_setup);
}

void hpct__log_set_rank(int rank)
{
	hpct__log_init();
	log_rank = rank;
}

int hpct__log_enabled(int level, int subsys)
{
	hpct__log_init();
	return level <= log_level && (subsys & log_subsys);
}

static const char *level_name(int level)
{
	switch (level) {
	case HPCT_LOG_WARN:
		return "WARN";
	case HPCT_LOG_INFO:
		return "INFO";
	default:
		return "TRACE";
	}
}

static void emit(int level, const char *msg)
{
	char rank[24] = "";
	int r = log_rank;
	if (r >= 0)
		snprintf(rank, sizeof(rank), " [%d]", r);
	pthread_mutex_lock(&log_lock);
	fprintf(log_file ? log_file : stderr, "%s:%d%s HPCT %s %s\n", log_host, (int)getpid(), rank,
	        level_name(level), msg);
	pthread_mutex_unlock(&log_lock);
}

void hpct__log(int level, int subsys, const char *fmt, ...)
{
	if (!hpct__log_enabled(level, subsys))
		return;
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	emit(level, msg);
}

int hpct__fail(int err, int subsys, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	if (hpct__log_enabled(HPCT_LOG_WARN, subsys))
		emit(HPCT_LOG_WARN, last_error);
	return err;
}

void hpct__set_last_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
}

HPCT_API const char *hpct_last_error(void)
{
	return last_error;
}

int hpct__log_burst_ok(struct hpct_log_burst *b, unsigned long *quiet_out)
{
	double now = hpct__now();
	if (now - b->since >= 1.0) {
		b->since = now;
		b->lines = 0;
	}
	if (b->lines >= HPCT_LOG_BURST) {
		b->quiet++;
		return 0;
	}
	b->lines++;
	*quiet_out = b->quiet;
	b->quiet = 0;
	return 1;
}
