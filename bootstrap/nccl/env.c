/* Showing NCCL one variable, in one thread, for one lookup.
 *
 * NCCL 2.28.7 and later ask an env plugin for every variable they read
 * (NCCL_ENV_PLUGIN names the library; 2.28.7 looks up its
 * ncclEnvPlugin_v1, 2.30.7 and later ncclEnvPlugin_v2 first, whose init
 * also gets NCCL's logger).  libhpct is such a plugin, both versions from
 * the same code: it answers from the process environment, except that a
 * thread inside hpct__nccl_comm_id_begin/_end sees NCCL_COMM_ID set to the
 * text it gave, for NCCL's next lookup of it only.  NCCL's one-time init
 * (which would choose its interface by that address) is run before the
 * window opens, so the lookup that sees it is the one that starts the root
 * on the comm's rank 0.  Nobody else, the process environment included,
 * ever sees the value.  Before 2.28.7 NCCL calls getenv itself: only the
 * preload shim, which interposes getenv, can show it the value. */
#include "bootstrap/nccl/nccl_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/param.h"

/* The first release that asks an env plugin. */
#define ENV_PLUGIN_VERSION 22807

/* NCCL's ncclDebugLogger_t: level, subsystem flags, file, line, format. */
typedef void (*nccl_logger)(int level, unsigned long flags, const char *file, int line,
                            const char *fmt, ...);

struct nccl_env_v1 {
	const char *name;
	int (*init)(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix);
	int (*finalize)(void);
	const char *(*get_env)(const char *name);
};

struct nccl_env_v2 {
	const char *name;
	int (*init)(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix,
	            nccl_logger log);
	int (*finalize)(void);
	const char *(*get_env)(const char *name);
};

static _Thread_local const char *comm_id_shown; /* the value, while the window is open */
static _Thread_local int comm_id_left;          /* lookups that may still see it */
static atomic_int plugin_used;                  /* 0, or the version NCCL initialised */
static atomic_int getenv_route;                 /* the preload shim interposes getenv */

static int env_init_as(int which, uint8_t major, uint8_t minor, uint8_t patch)
{
	HPCT_INFO(HPCT_SUB_NCCL, "NCCL %u.%u.%u consults hpct's env plugin (ncclEnvPlugin_v%d)",
	          major, minor, patch, which);
	atomic_store(&plugin_used, which);
	return 0;
}

static int env_init_v1(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix)
{
	(void)suffix;
	return env_init_as(1, major, minor, patch);
}

static int env_init_v2(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix,
                       nccl_logger log)
{
	(void)suffix;
	(void)log; /* hpct logs through its own HPCT_DEBUG */
	return env_init_as(2, major, minor, patch);
}

int hpct__nccl_env_plugin_used(void)
{
	return atomic_load(&plugin_used);
}

static int env_finalize(void)
{
	return 0;
}

/* NCCL's connect retries to a peer that refuses (a root or ring peer that
 * died) last NCCL_SOCKET_RETRY_CNT (34) times growing sleeps of
 * NCCL_SOCKET_RETRY_SLEEP_MSEC (100 ms): about 60 s.  Once hpct drives an
 * NCCL init in the process, and unless the user set it, NCCL is shown the
 * count whose sleeps fit HPCT_TIMEOUT, so that no rank retries past the
 * deadline every other wait of hpct's keeps.  NCCL reads it once a
 * process. */
static atomic_int retry_armed;
static char retry_cnt[16]; /* "" when NCCL's own default is shorter */
static pthread_once_t retry_once = PTHREAD_ONCE_INIT;

static void retry_compute(void)
{
	double t = 0, unit = 100;
	if (hpct__env_seconds(hpct__env_process(), "HPCT_TIMEOUT", &t, NULL) != 0 || t <= 0)
		return;
	const char *ms = hpct__env_str(hpct__env_process(), "NCCL_SOCKET_RETRY_SLEEP_MSEC");
	if (ms && atoi(ms) > 0)
		unit = atoi(ms);
	int c = 0;
	while (c < 34 && unit * (c + 1) * (c + 2) / 2 <= t * 1000)
		c++;
	if (c < 34)
		snprintf(retry_cnt, sizeof(retry_cnt), "%d", c > 0 ? c : 1);
}

/* The process environment's value, read without getenv: the preload shim
 * interposes getenv, and asks this file first. */
extern char **environ;
static int env_has(const char *name)
{
	size_t len = strlen(name);
	for (char **e = environ; e && *e; e++)
		if (strncmp(*e, name, len) == 0 && (*e)[len] == '=')
			return 1;
	return 0;
}

void hpct__nccl_env_arm(void)
{
	pthread_once(&retry_once, retry_compute);
	atomic_store(&retry_armed, 1);
}

const char *hpct__nccl_comm_id_peek(const char *name)
{
	if (comm_id_shown && comm_id_left > 0 && strcmp(name, "NCCL_COMM_ID") == 0) {
		comm_id_left--;
		return comm_id_shown;
	}
	if (atomic_load(&retry_armed) && retry_cnt[0] &&
	    strcmp(name, "NCCL_SOCKET_RETRY_CNT") == 0 && !env_has(name))
		return retry_cnt;
	return NULL;
}

void hpct__nccl_getenv_route(void)
{
	atomic_store(&getenv_route, 1);
}

static const char *env_get(const char *name)
{
	const char *v = hpct__nccl_comm_id_peek(name);
	return v ? v : getenv(name);
}

/* NCCL looks these up by name in the library NCCL_ENV_PLUGIN names. */
HPCT_API const struct nccl_env_v1 ncclEnvPlugin_v1 = {
	.name = "hpct",
	.init = env_init_v1,
	.finalize = env_finalize,
	.get_env = env_get,
};

HPCT_API const struct nccl_env_v2 ncclEnvPlugin_v2 = {
	.name = "hpct",
	.init = env_init_v2,
	.finalize = env_finalize,
	.get_env = env_get,
};

void hpct__nccl_env_prepare(void)
{
	if (getenv("NCCL_ENV_PLUGIN"))
		return; /* the user's choice: hpct's plugin is then not asked */
	Dl_info info;
	if (dladdr((const void *)&ncclEnvPlugin_v1, &info) && info.dli_fname &&
	    info.dli_fname[0] == '/')
		setenv("NCCL_ENV_PLUGIN", info.dli_fname, 0);
}

int hpct__nccl_comm_id_possible(const struct hpct_nccl_lib *l)
{
	/* NCCL's one-time init, with nothing shown: ncclGetUniqueId(NULL)
	 * runs it and then refuses the NULL, starting no root */
	(void)l->get_unique_id(NULL);
	return atomic_load(&plugin_used) || atomic_load(&getenv_route);
}

int hpct__nccl_comm_id_begin(const struct hpct_nccl_lib *l, const char *text)
{
	if (!hpct__nccl_comm_id_possible(l)) {
		const char *plugin = getenv("NCCL_ENV_PLUGIN");
		int v = l->version;
		if (v < ENV_PLUGIN_VERSION)
			return hpct__fail(
			        HPCT_ESTATE, HPCT_SUB_NCCL,
			        "NCCL %d.%d.%d reads its variables with getenv and asks no "
			        "env plugin (2.28.7 and later do; NCCL_ENV_PLUGIN=%s): "
			        "NCCL_COMM_ID can be shown to one call only under the "
			        "preload shim, which interposes getenv",
			        v / 10000, v / 100 % 100, v % 100, plugin ? plugin : "(unset)");
		return hpct__fail(HPCT_ESTATE, HPCT_SUB_NCCL,
		                  "NCCL %d.%d.%d does not consult hpct's env plugin "
		                  "(NCCL_ENV_PLUGIN=%s; it is read once, before NCCL's first "
		                  "call): NCCL_COMM_ID cannot be shown to one call",
		                  v / 10000, v / 100 % 100, v % 100, plugin ? plugin : "(unset)");
	}
	comm_id_shown = text;
	comm_id_left = 1;
	return 0;
}

void hpct__nccl_comm_id_end(void)
{
	/* NCCL may fail before it asks (no GPU: at cudaGetDevice, before its
	 * root), which is worth a line when wondering why no root ran */
	if (comm_id_shown && comm_id_left > 0)
		HPCT_INFO(HPCT_SUB_NCCL,
		          "NCCL returned without looking up NCCL_COMM_ID (%s was not shown to it)",
		          comm_id_shown);
	comm_id_shown = NULL;
	comm_id_left = 0;
}
