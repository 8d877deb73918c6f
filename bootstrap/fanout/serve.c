/* The server of one member in one fan-out: a thread that answers the
 * receivers pulling from this member, from the chunks it holds, until
 * every receiver it must wait for is done or dead (fanout_internal.h).
 * It never takes from the in-flight budget: the receiver took the bytes
 * of each GET before asking. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/base/bytes.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/fanout/fanout_internal.h"

void (*hpct__fo_served_hook)(int member, uint32_t chunk);

struct conn {
	int fd;
	int member;     /* -1 until HELLO */
	uint32_t ahead; /* a WAIT parked: answer once have > ahead - 1; 0: none */
	int bye;
};

int hpct__fo_first_source(const struct fo *f, int j)
{
	return f->m[j].held == f->want;
}

void hpct__fo_encode(const struct fo_msg *m, unsigned char *p)
{
	memset(p, 0, FO_HDR);
	hpct__put32(p, FO_MAGIC);
	p[4] = m->type;
	hpct__put32(p + 8, m->a);
	hpct__put32(p + 12, m->b);
	hpct__put64(p + 16, m->c);
}

int hpct__fo_decode(const unsigned char *p, struct fo_msg *m)
{
	if (hpct__get32(p) != FO_MAGIC || p[4] < FO_HELLO || p[4] > FO_DEAD)
		return HPCT_EPROTO;
	m->type = p[4];
	m->a = hpct__get32(p + 8);
	m->b = hpct__get32(p + 12);
	m->c = hpct__get64(p + 16);
	return 0;
}

int hpct__fo_send_msg(const struct fo *f, int fd, uint8_t type, uint32_t a, uint32_t b, uint64_t c,
                      double deadline)
{
	unsigned char p[FO_HDR];
	struct fo_msg m = { type, a, b, c };
	hpct__fo_encode(&m, p);
	return f->xo->send(fd, p, FO_HDR, deadline);
}

void hpct__fo_wake(struct fo *f)
{
	char b = 1;
	ssize_t w = write(f->wake[1], &b, 1);
	(void)w; /* a full pipe wakes as well */
}

void hpct__fo_tell(struct fo *f, int j, uint8_t type, uint32_t who)
{
	double dl = hpct__now() + (f->timeout_s < 5 ? f->timeout_s : 5);
	int fd = f->xo->connect(&f->m[j].addr, f->m[j].addrlen, dl);
	if (fd < 0)
		return; /* gone: it waits for nobody */
	if (hpct__fo_send_msg(f, fd, FO_HELLO, (uint32_t)f->me, 0, f->id, dl) == 0)
		hpct__fo_send_msg(f, fd, type, who, 0, 0, dl);
	f->xo->close(fd);
}

/* Every receiver this member must wait for is done or dead: the ones the
 * plan gave it, and, on a first source, every receiver (a receiver whose
 * source died comes to a first source for the rest). */
static int all_done(const struct fo *f)
{
	int first = hpct__fo_first_source(f, f->me);
	for (int j = 0; j < f->n; j++)
		if ((f->src[j] == f->me || (first && !hpct__fo_first_source(f, j))) &&
		    f->status[j] == FO_PENDING)
			return 0;
	return 1;
}

/* Member j's connection ended without BYE: it died (or gave up); the
 * first sources stop waiting for it. */
static void lost(struct fo *f, int j)
{
	if (j < 0 || f->status[j] != FO_PENDING)
		return;
	f->status[j] = FO_GONE;
	HPCT_INFO(HPCT_SUB_COLL, "rank %d: fan-out '%s': member %d (rank %d) left without BYE",
	          f->m[f->me].world_rank, f->name, j, f->m[j].world_rank);
	for (int k = 0; k < f->n; k++) {
		pthread_mutex_lock(&f->mu); /* the receiving side writes dead[] */
		int dead = f->dead[k];
		pthread_mutex_unlock(&f->mu);
		if (k != f->me && hpct__fo_first_source(f, k) && !dead)
			hpct__fo_tell(f, k, FO_DEAD, (uint32_t)j);
	}
}

/* One request on c; <0 closes it. */
static int handle(struct fo *f, struct conn *c, uint32_t have)
{
	unsigned char p[FO_HDR];
	struct fo_msg m;
	double dl = hpct__now() + f->timeout_s;
	int rc = f->xo->recv(c->fd, p, FO_HDR, dl);
	if (rc < 0)
		return rc;
	if (hpct__fo_decode(p, &m) < 0)
		return HPCT_EPROTO;
	if (c->member < 0 && m.type != FO_HELLO)
		return HPCT_EPROTO;
	switch (m.type) {
	case FO_HELLO:
		if (m.c != f->id || m.a >= (uint32_t)f->n)
			return HPCT_EPROTO; /* another fan-out's, or a stranger */
		c->member = (int)m.a;
		return 0;
	case FO_WAIT:
		if (m.a >= f->nchunks)
			return HPCT_EPROTO;
		if (have > m.a)
			return hpct__fo_send_msg(f, c->fd, FO_HAVE, have, 0, 0, dl);
		c->ahead = m.a + 1;
		return 0;
	case FO_GET: {
		if (m.a >= have)
			return HPCT_EPROTO; /* asked before it was told we hold it */
		size_t n = fo_chunk_len(f, m.a);
		rc = hpct__fo_send_msg(f, c->fd, FO_DATA, m.a, (uint32_t)n, 0, dl);
		if (rc == 0)
			rc = f->xo->send(c->fd, f->buf + (size_t)m.a * f->chunk, n, dl);
		if (rc == 0) {
			pthread_mutex_lock(&f->mu);
			f->bytes_sent += n;
			f->talked[c->member] = 1;
			pthread_mutex_unlock(&f->mu);
			if (hpct__fo_served_hook)
				hpct__fo_served_hook(f->me, m.a);
		}
		return rc;
	}
	case FO_BYE:
		c->bye = 1;
		if (f->status[c->member] == FO_PENDING)
			f->status[c->member] = FO_FINISHED;
		return HPCT_EPEERDEAD; /* closes: nothing more comes */
	case FO_DONE:
	case FO_DEAD:
		if (m.a < (uint32_t)f->n && f->status[m.a] == FO_PENDING)
			f->status[m.a] = m.type == FO_DONE ? FO_FINISHED : FO_GONE;
		c->bye = 1;
		return HPCT_EPEERDEAD;
	}
	return HPCT_EPROTO;
}

static int pending_text(const struct fo *f, char *buf, size_t len)
{
	int first = hpct__fo_first_source(f, f->me), k = -1;
	size_t o = 0;
	buf[0] = 0;
	for (int j = 0; j < f->n && o + 64 < len; j++)
		if ((f->src[j] == f->me || (first && !hpct__fo_first_source(f, j))) &&
		    f->status[j] == FO_PENDING) {
			if (k < 0)
				k = j;
			o += (size_t)snprintf(buf + o, len - o, "%s rank %d at %s", o ? "," : "",
			                      f->m[j].world_rank, f->m[j].text);
		}
	return k;
}

void *hpct__fo_serve(void *arg)
{
	pthread_setname_np(pthread_self(), "hpct-fanout"); /* in top, gdb, perf */
	struct fo *f = arg;
	int cap = f->n + 16, nc = 0;
	struct conn *cs = calloc((size_t)cap, sizeof(*cs));
	struct pollfd *pf = calloc((size_t)cap + 2, sizeof(*pf));
	int rc = cs && pf ? 0 : HPCT_ENOMEM;
	double idle_until = hpct__now() + f->timeout_s;
	while (rc == 0 && !all_done(f)) {
		pthread_mutex_lock(&f->mu);
		uint32_t have = f->have;
		int stop = f->stop;
		pthread_mutex_unlock(&f->mu);
		if (stop)
			break;
		for (int i = 0; i < nc; i++)
			if (cs[i].ahead && have >= cs[i].ahead) {
				cs[i].ahead = 0;
				if (hpct__fo_send_msg(f, cs[i].fd, FO_HAVE, have, 0, 0,
				                      hpct__now() + f->timeout_s) < 0) {
					f->xo->close(cs[i].fd);
					lost(f, cs[i].member);
					cs[i--] = cs[--nc];
				}
			}
		pf[0] = (struct pollfd){ .fd = f->wake[0], .events = POLLIN };
		pf[1] = (struct pollfd){ .fd = nc < cap ? f->lfd : -1, .events = POLLIN };
		for (int i = 0; i < nc; i++)
			pf[i + 2] = (struct pollfd){ .fd = cs[i].fd, .events = POLLIN };
		int r = poll(pf, (nfds_t)nc + 2, 1000);
		if (r < 0 && errno != EINTR) {
			rc = -errno;
			break;
		}
		double now = hpct__now();
		if (r <= 0) {
			if (now > idle_until) {
				char who[512];
				int k = pending_text(f, who, sizeof(who));
				rc = hpct__fail(
				        HPCT_ETIMEDOUT, HPCT_SUB_COLL,
				        "rank %d: fan-out '%s' of group %016llx, epoch %llu: "
				        "no word for %g s from%s (member %d first), which "
				        "this rank serves",
				        f->m[f->me].world_rank, f->name,
				        (unsigned long long)f->group, (unsigned long long)f->epoch,
				        f->timeout_s, who, k);
			}
			continue;
		}
		idle_until = now + f->timeout_s;
		if (pf[0].revents) {
			char b[64];
			while (read(f->wake[0], b, sizeof(b)) > 0)
				;
		}
		/* downwards: a closed one's slot takes the last, already seen */
		for (int i = nc - 1; i >= 0; i--) {
			if (!pf[i + 2].revents)
				continue;
			if (handle(f, &cs[i], have) < 0) {
				f->xo->close(cs[i].fd);
				if (!cs[i].bye)
					lost(f, cs[i].member);
				cs[i] = cs[--nc];
			}
		}
		if (pf[1].revents)
			for (int fd; nc < cap && (fd = f->xo->accept(f->lfd)) >= 0;)
				cs[nc++] = (struct conn){ fd, -1, 0, 0 };
	}
	for (int i = 0; i < nc; i++)
		f->xo->close(cs[i].fd);
	free(cs);
	free(pf);
	if (rc < 0)
		snprintf(f->serve_msg, sizeof(f->serve_msg), "%s", hpct_last_error());
	f->serve_rc = rc;
	return NULL;
}
