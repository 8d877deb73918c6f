/* libFuzzer: the launcher's environment as hpct reads it.  The input is
 * "NAME=VALUE" lines; a line "HOSTFILE:" turns the rest of the input into
 * the contents of the host table that HPCT_HOSTFILE names. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/param.h"
#include "bootstrap/topo/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define MAX_VARS 32

struct vars {
	int n;
	char *name[MAX_VARS], *value[MAX_VARS];
};

static const char *get(void *ctx, const char *name)
{
	struct vars *v = ctx;
	for (int i = v->n - 1; i >= 0; i--)
		if (strcmp(v->name[i], name) == 0)
			return v->value[i];
	return NULL;
}

static char hostfile[64];

static void remove_hostfile(void)
{
	unlink(hostfile);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	setenv("HPCT_DEBUG", "NONE", 1); /* failures are the point, not their log lines */
	snprintf(hostfile, sizeof(hostfile), "/tmp/hpct-fuzz-hosts-%d", (int)getpid());
	atexit(remove_hostfile);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	char *text = malloc(len + 1);
	if (!text)
		return 0;
	memcpy(text, data, len);
	text[len] = 0;
	struct vars v = { 0 };
	char *table = strstr(text, "HOSTFILE:\n");
	if (table) {
		*table = 0;
		table += strlen("HOSTFILE:\n");
		FILE *f = fopen(hostfile, "w");
		if (f) {
			fputs(table, f);
			fclose(f);
		}
	}
	for (char *line = text, *next; line && *line && v.n < MAX_VARS; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		char *eq = strchr(line, '=');
		if (!eq)
			continue;
		*eq = 0;
		/* files are the table's business only */
		if (strcmp(line, "HPCT_HOSTFILE") == 0 || strcmp(line, "HPCT_SECRET_FILE") == 0)
			continue;
		v.name[v.n] = line;
		v.value[v.n++] = eq + 1;
	}
	if (table && v.n < MAX_VARS) {
		v.name[v.n] = "HPCT_HOSTFILE";
		v.value[v.n++] = hostfile;
	}
	struct hpct_env env = { .get = get, .ctx = &v };
	struct hpct_topo t;
	if (hpct__topo_read(&env, &t) == 0)
		hpct__topo_free(&t);
	free(text);
	return 0;
}
