/* The fake environment the topology tests read (test_topo.c,
 * test_topo_hosts.c): never the process's own. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/topo/topo.h"
#include "hpct/hpct.h"
#include "tests/topo_env.h"

#define MAX_VARS 64

static struct {
	const char *name[MAX_VARS];
	char *value[MAX_VARS];
	int n;
} vars;
static char tmp_path[64];

static const char *fake_get(void *ctx, const char *name)
{
	(void)ctx;
	for (int i = 0; i < vars.n; i++)
		if (strcmp(vars.name[i], name) == 0)
			return vars.value[i];
	return NULL;
}

const struct hpct_env topo_fake_env = { fake_get, NULL };

void topo_env_set(const char *name, const char *value)
{
	for (int i = 0; i < vars.n; i++) {
		if (strcmp(vars.name[i], name) == 0) {
			free(vars.value[i]);
			vars.value[i] = strdup(value);
			return;
		}
	}
	cr_assert_lt(vars.n, MAX_VARS);
	vars.name[vars.n] = name;
	vars.value[vars.n++] = strdup(value);
}

void topo_env_unset(const char *name)
{
	for (int i = 0; i < vars.n; i++) {
		if (strcmp(vars.name[i], name) == 0) {
			free(vars.value[i]);
			vars.name[i] = vars.name[--vars.n];
			vars.value[i] = vars.value[vars.n];
			return;
		}
	}
}

void topo_env_set_int(const char *name, long v)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "%ld", v);
	topo_env_set(name, buf);
}

void topo_env_reset(void)
{
	while (vars.n)
		topo_env_unset(vars.name[0]);
	tmp_path[0] = 0;
}

void topo_env_cleanup(void)
{
	if (tmp_path[0])
		unlink(tmp_path);
	topo_env_reset();
}

/* Writes text to a temporary file and points HPCT_HOSTFILE at it. */
const char *topo_env_hostfile(const char *text)
{
	if (!tmp_path[0]) {
		snprintf(tmp_path, sizeof(tmp_path), "/tmp/hpct-topo-XXXXXX");
		int fd = mkstemp(tmp_path);
		cr_assert(fd >= 0);
		close(fd);
	}
	FILE *f = fopen(tmp_path, "w");
	cr_assert(f);
	fputs(text, f);
	fclose(f);
	topo_env_set("HPCT_HOSTFILE", tmp_path);
	return tmp_path;
}

void topo_read_ok(struct hpct_topo *t)
{
	int rc = hpct__topo_read(&topo_fake_env, t);
	cr_assert_eq(rc, 0, "rc %s: %s", hpct_errname(rc), hpct_last_error());
}

/* Expects code and `text` in the message, and nothing left allocated. */
void topo_read_bad(int code, const char *text)
{
	struct hpct_topo t;
	memset(&t, 0x5a, sizeof(t));
	int rc = hpct__topo_read(&topo_fake_env, &t);
	cr_assert_eq(rc, code, "rc %s, expected %s; message: %s", hpct_errname(rc),
	             hpct_errname(code), hpct_last_error());
	cr_assert(strstr(hpct_last_error(), text), "message '%s' lacks '%s'", hpct_last_error(),
	          text);
	cr_assert(!t.hosts && !t.node_of && !t.local_of && !t.port_of && !t.master_addr &&
	                  !t.ifname && t.nnodes == 0,
	          "output not cleared on error");
}

void topo_env_world(int rank, int size)
{
	topo_env_set_int("RANK", rank);
	topo_env_set_int("WORLD_SIZE", size);
}
