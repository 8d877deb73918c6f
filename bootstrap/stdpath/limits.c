/* The rendezvous server's bounds: its limits from the settings, the store's
 * room, refusals over a limit, and the connections that have not said HELLO
 * yet (closed when too many or too late). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/param.h"
#include "bootstrap/base/util.h"
#include "bootstrap/stdpath/server_internal.h"
#include "bootstrap/stdpath/stdpath.h"
#include "hpct/hpct.h"

/* The formulas are stdpath.h's, at struct hpct_std_limits. */
int hpct__std_limits_default(int nranks, struct hpct_std_limits *lim_out)
{
	const struct hpct_env *env = hpct__env_process();
	size_t n = nranks > 0 ? (size_t)nranks : 1;
	double hello_s;
	long mb, keys;
	int rc = hpct__env_seconds(env, "HPCT_TIMEOUT", &hello_s, NULL);
	if (rc == 0)
		rc = hpct__env_int(env, "HPCT_STD_STORE_MB", 1, 1L << 24, 128 + 2 * (long)n, &mb,
		                   NULL);
	if (rc == 0)
		rc = hpct__env_int(env, "HPCT_STD_STORE_KEYS", 1, 1L << 40,
		                   4 * ((long)n + 32) * ((long)n + 32), &keys, NULL);
	if (rc)
		return rc;
	lim_out->hello_s = hello_s;
	lim_out->mget_keys = (uint32_t)n + 64;
	lim_out->mget_key_bytes = ((size_t)n + 64) * 512;
	lim_out->store_bytes = (size_t)mb << 20;
	lim_out->rank_bytes = lim_out->store_bytes / 2;
	lim_out->store_keys = (size_t)keys;
	lim_out->early_conns = 2 * n + 256;
	return 0;
}

void hpct__stdsrv_over_limit(struct conn *c, int code, const char *fmt, ...)
{
	char msg[512], w[HPCT_ADDRSTRLEN + 24];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	HPCT_WARN(HPCT_SUB_STD, "rendezvous %s: refused a request from %s: %s", c->s->addr,
	          hpct__stdsrv_who(c, w, sizeof(w)), msg);
	hpct__stdsrv_reply_err(c, code, msg);
}

int hpct__stdsrv_store_room(struct conn *c, size_t more, char *why, size_t len)
{
	const struct hpct_std_server *s = c->s;
	size_t used = s->tab.bytes + s->inflight;
	if (used + more > s->lim.store_bytes) {
		snprintf(why, len,
		         "the store holds %zu of its %zu bytes (HPCT_STD_STORE_MB; values being "
		         "received included)",
		         used, s->lim.store_bytes);
		return HPCT_ENOMEM;
	}
	if (c->rank >= 0 && s->tab.owned[c->rank] + more > s->lim.rank_bytes) {
		snprintf(why, len,
		         "rank %d's keys hold %zu of the %zu bytes one rank may keep (half of "
		         "HPCT_STD_STORE_MB)",
		         c->rank, s->tab.owned[c->rank], s->lim.rank_bytes);
		return HPCT_ENOMEM;
	}
	return 0;
}

/* ---- connections before HELLO ---- */

static void early_close(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void early_close(struct conn *c, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	HPCT_WARN(HPCT_SUB_STD, "rendezvous %s: closing the connection from %s: %s", c->s->addr,
	          c->peer, msg);
	hpct__stdsrv_conn_close(c);
}

static const char *early_state(const struct conn *c)
{
	if (c->rx == 0)
		return "it sent nothing";
	if (!c->admitted)
		return "it did not finish proving the shared secret (HPCT_SECRET)";
	return "its HELLO is incomplete";
}

void hpct__stdsrv_early_add(struct conn *c)
{
	struct hpct_std_server *s = c->s;
	c->early = 1;
	c->hello_by = hpct__now() + s->lim.hello_s;
	c->eprev = s->early_tail;
	c->enext = NULL;
	if (s->early_tail)
		s->early_tail->enext = c;
	else
		s->early = c;
	s->early_tail = c;
	if (++s->nearly > s->lim.early_conns) {
		/* A job says HELLO at once: the oldest is the likeliest idle. */
		struct conn *old = s->early;
		early_close(old,
		            "%zu connections have not said HELLO, over the limit of %zu (2 x world "
		            "size + 256); this is the oldest, %.1f s old (%s)",
		            s->nearly, s->lim.early_conns,
		            hpct__now() - (old->hello_by - s->lim.hello_s), early_state(old));
	}
}

void hpct__stdsrv_early_done(struct conn *c)
{
	struct hpct_std_server *s = c->s;
	if (!c->early)
		return;
	if (c->eprev)
		c->eprev->enext = c->enext;
	else
		s->early = c->enext;
	if (c->enext)
		c->enext->eprev = c->eprev;
	else
		s->early_tail = c->eprev;
	c->eprev = c->enext = NULL;
	c->early = 0;
	s->nearly--;
}

double hpct__stdsrv_early_expire(struct hpct_std_server *s, double now)
{
	while (s->early && s->early->hello_by <= now)
		early_close(s->early, "no HELLO within %.1f s of connecting (HPCT_TIMEOUT): %s",
		            s->lim.hello_s, early_state(s->early));
	return s->early ? s->early->hello_by : 0;
}
