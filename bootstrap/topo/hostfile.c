/* HPCT_HOSTFILE: a plain list of hosts or a table of "RANK HOST[:PORT]",
 * checked line by line with the file and line named in every message. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/topo/hostlist.h"
#include "bootstrap/topo/topo_internal.h"
#include "hpct/hpct.h"

/* Host table lines: "RANK HOST:PORT" and a comment fit easily. */
#define LINE_MAX_LEN 1024

static int file_fail(const char *path, int line, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static int file_fail(const char *path, int line, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (line > 0)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV, "HPCT_HOSTFILE=%s line %d: %s", path,
		                  line, msg);
	return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV, "HPCT_HOSTFILE=%s: %s", path, msg);
}

/* Splits "host", "host:port", "[v6]", "[v6]:port" or a bare IPv6 address
 * (no port) in place, after checking the token as written. */
static int split_host_port(char *tok, char **host_out, int *port_out, char *why, size_t whylen)
{
	char *host = tok, *port = NULL, *cut = NULL;
	if (tok[0] == '[') {
		host = tok + 1;
		cut = strchr(tok, ']');
		if (!cut) {
			snprintf(why, whylen, "unbalanced '[' in '%s'", tok);
			return -1;
		}
		if (cut[1] && cut[1] != ':') {
			snprintf(why, whylen, "text after ']' in '%s' is not ':PORT'", tok);
			return -1;
		}
		port = cut[1] ? cut + 2 : NULL;
	} else {
		char *colon = strchr(tok, ':');
		/* Two colons or more: a bare IPv6 address, which cannot carry a port. */
		if (colon && !strchr(colon + 1, ':'))
			cut = colon, port = colon + 1;
	}
	if (host == cut) {
		snprintf(why, whylen, "empty host in '%s'", tok);
		return -1;
	}
	long p = 0;
	if (port) {
		char *end;
		errno = 0;
		p = strtol(port, &end, 10);
		if (errno || *port < '0' || *port > '9' || *end || p < 1 || p > 65535) {
			snprintf(why, whylen, "port '%s' in '%s' is not in 1..65535", port, tok);
			return -1;
		}
	}
	if (cut)
		*cut = 0;
	*host_out = host;
	*port_out = (int)p;
	return 0;
}

/* Host name -> node index, so a table of 100,000 ranks stays linear. */
struct hostmap {
	int *slot; /* node index + 1; 0 = empty */
	size_t mask;
};

static int hostmap_get(struct hostmap *m, struct hpct_topo *t, const char *host)
{
	size_t i = (size_t)hpct__hash(host, strlen(host), 0) & m->mask;
	for (; m->slot[i]; i = (i + 1) & m->mask)
		if (strcmp(t->hosts[m->slot[i] - 1], host) == 0)
			return m->slot[i] - 1;
	if (!(t->hosts[t->nnodes] = strdup(host)))
		return -1;
	m->slot[i] = ++t->nnodes;
	return t->nnodes - 1;
}

struct table_ctx {
	const char *path;
	const char *size_src; /* the variable the world size came from */
	int *line_of;         /* rank -> line it was listed on, 0 = not yet */
	struct hostmap map;
};

static int table_line(struct table_ctx *c, struct hpct_topo *t, int line, char *rank_tok,
                      char *host_tok)
{
	char *end, *host;
	int port;
	errno = 0;
	long r = strtol(rank_tok, &end, 10);
	if (errno || *end || rank_tok[0] < '0' || rank_tok[0] > '9')
		return file_fail(c->path, line, "rank '%s' is not a number", rank_tok);
	if (r >= t->size)
		return file_fail(c->path, line, "rank %ld is not below the world size %d (from %s)",
		                 r, t->size, c->size_src);
	if (c->line_of[r])
		return file_fail(c->path, line, "rank %ld listed twice (first at line %d)", r,
		                 c->line_of[r]);
	char why[LINE_MAX_LEN + 64];
	if (split_host_port(host_tok, &host, &port, why, sizeof(why)))
		return file_fail(c->path, line, "rank %ld: %s", r, why);
	int node = hostmap_get(&c->map, t, host);
	if (node < 0)
		return hpct__topo_no_memory(t->size);
	c->line_of[r] = line;
	t->node_of[r] = node;
	t->port_of[r] = port;
	return 0;
}

static int table_start(struct table_ctx *c, struct hpct_topo *t)
{
	size_t n = (size_t)t->size;
	size_t cap = 16;
	while (cap < 2 * n)
		cap *= 2;
	c->map.mask = cap - 1;
	c->map.slot = calloc(cap, sizeof(int));
	c->line_of = calloc(n, sizeof(int));
	t->hosts = calloc(n, sizeof(char *));
	t->node_of = malloc(n * sizeof(int));
	t->local_of = malloc(n * sizeof(int));
	t->port_of = calloc(n, sizeof(int));
	if (!c->map.slot || !c->line_of || !t->hosts || !t->node_of || !t->local_of || !t->port_of)
		return hpct__topo_no_memory(t->size);
	return 0;
}

static int table_finish(struct table_ctx *c, struct hpct_topo *t, int lines)
{
	for (int r = 0; r < t->size; r++)
		if (!c->line_of[r])
			return file_fail(
			        c->path, 0,
			        "rank %d is not listed (the table must list ranks 0..%d once "
			        "each; %d lines read)",
			        r, t->size - 1, lines);
	int *tasks = malloc((size_t)t->nnodes * sizeof(int));
	if (!tasks)
		return hpct__topo_no_memory(t->size);
	hpct__topo_count_locals(t, tasks);
	free(tasks);
	return 0;
}

/* Either a table (fills t) or plain lines (*plain_out, *nplain_out). */
int hpct__topo_read_hostfile(const char *path, const char *size_src, struct hpct_topo *t,
                             char ***plain_out, int *nplain_out)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return file_fail(path, 0, "cannot open (%s)", strerror(errno));
	struct table_ctx c = { path, size_src, NULL, { NULL, 0 } };
	char **plain = NULL;
	int nplain = 0, cap = 0, line = 0, first = 0, is_table = 0, rc = 0;
	char buf[LINE_MAX_LEN];
	while (fgets(buf, sizeof(buf), f)) {
		line++;
		size_t len = strlen(buf);
		int ch = len == sizeof(buf) - 1 && buf[len - 1] != '\n' ? getc(f) : EOF;
		if (ch != EOF) {
			rc = file_fail(path, line, "longer than %d characters", LINE_MAX_LEN - 2);
			goto out;
		}
		buf[strcspn(buf, "#")] = 0;
		char *save, *tok[3];
		int ntok = 0;
		for (char *p = strtok_r(buf, " \t\r\n", &save); p && ntok < 3;
		     p = strtok_r(NULL, " \t\r\n", &save))
			tok[ntok++] = p;
		if (ntok == 0)
			continue;
		if (!first && ntok > 2) {
			rc = file_fail(path, line, "expected one host or 'RANK HOST[:PORT]'");
			goto out;
		}
		if (!first) {
			first = line;
			is_table = ntok == 2;
			if (is_table && (rc = table_start(&c, t)))
				goto out;
		}
		if (ntok != (is_table ? 2 : 1)) {
			rc = file_fail(path, line, "expected %s (as on line %d)",
			               is_table ? "'RANK HOST[:PORT]'" : "one host", first);
			goto out;
		}
		if (is_table) {
			if ((rc = table_line(&c, t, line, tok[0], tok[1])))
				goto out;
			continue;
		}
		char *host, why[LINE_MAX_LEN + 64];
		int port;
		if (split_host_port(tok[0], &host, &port, why, sizeof(why))) {
			rc = file_fail(path, line, "%s", why);
			goto out;
		}
		if (port) {
			rc = file_fail(path, line, "a port needs the 'RANK HOST:PORT' form");
			goto out;
		}
		if (nplain == t->size) {
			rc = file_fail(path, line,
			               "more hosts than the %d ranks of the world (from %s)",
			               t->size, size_src);
			goto out;
		}
		if (nplain == cap) {
			cap = cap ? 2 * cap : 64;
			if (cap > t->size)
				cap = t->size;
			char **p = realloc(plain, (size_t)cap * sizeof(*p));
			if (!p) {
				rc = hpct__topo_no_memory(t->size);
				goto out;
			}
			plain = p;
		}
		if (!(plain[nplain] = strdup(host))) {
			rc = hpct__topo_no_memory(t->size);
			goto out;
		}
		nplain++;
	}
	if (ferror(f))
		rc = file_fail(path, 0, "read error after line %d", line);
	else if (!first)
		rc = file_fail(path, 0, "no hosts in the file");
	else if (is_table)
		rc = table_finish(&c, t, line);
out:
	fclose(f);
	free(c.map.slot);
	free(c.line_of);
	if (rc || is_table) {
		hpct__strv_free(plain, nplain);
		return rc;
	}
	*plain_out = plain;
	*nplain_out = nplain;
	return 0;
}
