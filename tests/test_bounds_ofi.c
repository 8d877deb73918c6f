/* What a stranger on the fabric can make a rank of the OFI transport hold
 * (transport/ofi_internal.h has the figures).  Each test runs a job of
 * NRANKS ranks, allgathering (each result checked) over and over, and a
 * stranger: a raw libfabric endpoint of its own (tcp;ofi_rxm on loopback)
 * that speaks the transport's wire to rank 0 and tries one exhaustion.
 * Rank 0 stops the job when its log (HPCT_DEBUG_FILE) shows the refusal
 * naming the stranger's address and the stranger said it is done; the test
 * then checks that the refusal was logged once, that rank 0's resident
 * memory grew by less than RSS_GROWTH_KB during the attack, and that every
 * collective succeeded.  Order comes from pipes and the log; the only clocks
 * are deadlines that name what hung. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "hpct/hpct.h"
#include "tests/harness.h"
#include "transport/ofi_internal.h" /* the wire and the bounds' figures */

TestSuite(bounds_ofi, .timeout = 240);

enum { NRANKS = 2, STRANGER = NRANKS, MAX_IDS = 1024, SRX = 16 };
/* rank 0's resident memory may grow by this much during an attack (a few
 * hundred conns and their provider connections; a claimed 256 MB is not) */
#define RSS_GROWTH_KB (8 * 1024)
#define DEADLINE_S    120.0
/* inside a slot (HPCT_TEST_PORT_STRIDE, 200 or more), past the ranks' ports */
#define STRANGER_PORT 100 /* the stranger's endpoint */
#define FORGED_PORT   150 /* what its forged names claim; nobody listens there */
/* AddressSanitizer keeps freed memory in quarantine (256 MB): the bound on
 * memory is checked in plain builds only (the figure is printed always) */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif
#define HPCT_STR_(x) #x
#define HPCT_STR(x)  HPCT_STR_(x)

struct bcfg {
	int port; /* the slot's first port: ranks from + 1, the stranger at + STRANGER_PORT */
	const char *attack; /* what the stranger does */
	const char *what;   /* the refusal rank 0 must log ('|' between alternatives) ... */
	char who[64];       /* ... naming this address */
	int info;           /* rank 0 logs at INFO (the engine's own closes) */
	char log[256];
	int addr_pipe[2], done_pipe[2], bye_pipe[2];
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* What the children say (why they failed, the figures): on stderr and in
 * a file the test reads back into its result, since the test's own output
 * is not kept by the runner. */
static char diag_path[256];

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fputs(line, stderr);
	FILE *fp = fopen(diag_path, "a");
	if (fp) {
		fputs(line, fp);
		fclose(fp);
	}
}

/* ------------------------------------------------------------ the stranger */

struct fab {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	unsigned char name[128];
	size_t name_len;
	fi_addr_t victim;
	unsigned char rx[SRX][1024];
	uint32_t their_id[MAX_IDS]; /* a SYNACK's sender's conn id, by ours */
};

static void post_rx(struct fab *f, int slot)
{
	while (fi_recv(f->ep, f->rx[slot], sizeof(f->rx[slot]), NULL, FI_ADDR_UNSPEC,
	               (void *)(intptr_t)(slot + 1)) == -FI_EAGAIN)
		fi_cq_read(f->cq, NULL, 0);
}

/* Takes completions: answers to our conns are noted, sends freed. */
static void drain(struct fab *f)
{
	struct fi_cq_msg_entry e[16];
	for (;;) {
		ssize_t n = fi_cq_read(f->cq, e, 16);
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry er = { 0 };
			if (fi_cq_readerr(f->cq, &er, 0) <= 0)
				return;
			if (er.flags & FI_RECV)
				post_rx(f, (int)(intptr_t)er.op_context - 1);
			else
				free(er.op_context);
			continue;
		}
		if (n <= 0)
			return;
		for (ssize_t i = 0; i < n; i++) {
			if (!(e[i].flags & FI_RECV)) {
				free(e[i].op_context);
				continue;
			}
			int slot = (int)(intptr_t)e[i].op_context - 1;
			const unsigned char *m = f->rx[slot];
			uint32_t dst = get32(m + 4), src = get32(m + 8);
			if (e[i].len >= HDR && dst < MAX_IDS && m[0] == W_SYNACK)
				f->their_id[dst] = src;
			post_rx(f, slot);
		}
	}
}

static int fab_open(struct fab *f, int port)
{
	/* what the transport sets for itself (transport/ofi.c, load()) */
	setenv("FI_OFI_RXM_BUFFER_SIZE", "1024", 0);
	setenv("FI_OFI_RXM_RX_SIZE", "64", 0);
	setenv("FI_OFI_RXM_TX_SIZE", "64", 0);
	struct fi_info *hints = fi_allocinfo();
	hints->caps = FI_MSG;
	hints->ep_attr->type = FI_EP_RDM;
	hints->tx_attr->msg_order = FI_ORDER_SAS;
	hints->rx_attr->msg_order = FI_ORDER_SAS;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->fabric_attr->prov_name = strdup("tcp;ofi_rxm");
	char service[16];
	snprintf(service, sizeof(service), "%d", port);
	int rc = fi_getinfo(FI_VERSION(1, 5), "127.0.0.1", service, FI_SOURCE, hints, &f->info);
	fi_freeinfo(hints);
	if (rc) {
		note("stranger: fi_getinfo at 127.0.0.1:%d: %s\n", port, fi_strerror(-rc));
		return 20;
	}
	struct fi_av_attr av = { .type = FI_AV_TABLE };
	struct fi_cq_attr cq = { .format = FI_CQ_FORMAT_MSG, .size = 1024 };
	if ((rc = fi_fabric(f->info->fabric_attr, &f->fabric, NULL)) ||
	    (rc = fi_domain(f->fabric, f->info, &f->domain, NULL)) ||
	    (rc = fi_av_open(f->domain, &av, &f->av, NULL)) ||
	    (rc = fi_cq_open(f->domain, &cq, &f->cq, NULL)) ||
	    (rc = fi_endpoint(f->domain, f->info, &f->ep, NULL)) ||
	    (rc = fi_ep_bind(f->ep, &f->av->fid, 0)) ||
	    (rc = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (rc = fi_enable(f->ep))) {
		note("stranger: its endpoint at 127.0.0.1:%d: %s\n", port, fi_strerror(-rc));
		return 21;
	}
	f->name_len = sizeof(f->name);
	if (fi_getname(&f->ep->fid, f->name, &f->name_len)) {
		note("stranger: fi_getname failed\n");
		return 22;
	}
	for (int i = 0; i < SRX; i++)
		post_rx(f, i);
	return 0;
}

static void fab_close(struct fab *f)
{
	if (f->ep)
		fi_close(&f->ep->fid);
	if (f->cq)
		fi_close(&f->cq->fid);
	if (f->av)
		fi_close(&f->av->fid);
	if (f->domain)
		fi_close(&f->domain->fid);
	if (f->fabric)
		fi_close(&f->fabric->fid);
	if (f->info)
		fi_freeinfo(f->info);
}

/* One fabric message of the transport's wire to rank 0. */
static int wire_send(struct fab *f, int type, uint32_t dst, uint32_t src, uint32_t seq,
                     uint32_t total, uint32_t off, const void *payload, size_t plen)
{
	unsigned char *m = calloc(1, HDR + plen);
	m[0] = (unsigned char)type;
	put32(m + 4, dst);
	put32(m + 8, src);
	put32(m + 12, seq);
	put32(m + 16, total);
	put32(m + 20, off);
	if (plen)
		memcpy(m + HDR, payload, plen);
	double deadline = now_s() + 30;
	for (;;) {
		ssize_t rc = fi_send(f->ep, m, HDR + plen, NULL, f->victim, m);
		if (rc == 0)
			return 0;
		if (rc != -FI_EAGAIN) {
			note("stranger: fi_send: %s\n", fi_strerror((int)-rc));
			free(m);
			return 23;
		}
		drain(f);
		if (now_s() > deadline) {
			note("stranger: rank 0 took no message for 30 s\n");
			free(m);
			return 24;
		}
	}
}

/* Waits for rank 0's SYNACK to our conn id (noted by drain). */
static int wait_synack(struct fab *f, uint32_t id)
{
	double deadline = now_s() + 60;
	while (!f->their_id[id]) {
		drain(f);
		if (now_s() > deadline) {
			note("stranger: no SYNACK from rank 0 within 60 s\n");
			return 25;
		}
	}
	return 0;
}

static int syn(struct fab *f, uint32_t id, const void *name, size_t len)
{
	return wire_send(f, W_SYN, 0, id, 0, 0, 0, name, len);
}

/* A conn of ours, answered. */
static int open_conn(struct fab *f, uint32_t id)
{
	int rc = syn(f, id, f->name, f->name_len);
	return rc ? rc : wait_synack(f, id);
}

static int attack(struct fab *f, const struct bcfg *c)
{
	int rc;
	const char *a = c->attack;
	if (strcmp(a, "overlap") == 0) {
		/* 24 + 16 bytes of a 40-byte message, the second over the first:
		 * as many bytes as the message, 16 of them never sent */
		unsigned char x[24];
		memset(x, 'x', sizeof(x));
		if ((rc = open_conn(f, 1)) ||
		    (rc = wire_send(f, W_DATA, f->their_id[1], 1, 1, 40, 0, x, 24)) ||
		    (rc = wire_send(f, W_DATA, f->their_id[1], 1, 1, 40, 0, x, 16)))
			return rc;
		return 0;
	}
	if (strcmp(a, "parts") == 0) {
		/* message 1 never comes: 2, 3, ... wait for it, each incomplete */
		if ((rc = open_conn(f, 1)))
			return rc;
		for (uint32_t s = 2; s < 2 + MAX_PARTS + 8; s++)
			if ((rc = wire_send(f, W_DATA, f->their_id[1], 1, s, 2, 0, "p", 1)))
				return rc;
		return 0;
	}
	if (strcmp(a, "conns") == 0) {
		for (uint32_t id = 1; id <= MAX_PENDING + 64; id++)
			if ((rc = syn(f, id, f->name, f->name_len)))
				return rc;
		return 0;
	}
	if (strcmp(a, "av") == 0) {
		/* SYNs naming 200 addresses nobody listens at */
		for (uint32_t id = 1; id <= MAX_STRANGER_AV + 72; id++) {
			struct sockaddr_in sa = { .sin_family = AF_INET,
				                  .sin_port = htons(
				                          (uint16_t)(c->port + FORGED_PORT)) };
			sa.sin_addr.s_addr =
			        htonl(0x7f000000u | (1u + id / 200) << 8 | (1u + id % 200));
			if ((rc = syn(f, id, &sa, sizeof(sa))))
				return rc;
		}
		return 0;
	}
	if (strcmp(a, "huge") == 0) {
		unsigned char x[100] = { 0 };
		if ((rc = open_conn(f, 1)) ||
		    (rc = wire_send(f, W_DATA, f->their_id[1], 1, 1, 256u << 20, 0, x, sizeof(x))))
			return rc;
		return 0;
	}
	if (strcmp(a, "silence") == 0)
		return open_conn(f, 1); /* and then nothing */
	note("stranger: no attack '%s'\n", a);
	return 26;
}

static int stranger_main(struct bcfg *c)
{
	close(c->addr_pipe[1]);
	close(c->done_pipe[0]);
	close(c->bye_pipe[1]);
	char victim[64] = "";
	struct pollfd pfd = { .fd = c->addr_pipe[0], .events = POLLIN };
	ssize_t n =
	        poll(&pfd, 1, 60000) == 1 ? read(c->addr_pipe[0], victim, sizeof(victim) - 1) : 0;
	if (n <= 0) {
		note("stranger: rank 0 gave no address within 60 s\n");
		return 27;
	}
	victim[n] = 0;
	char *colon = strrchr(victim, ':');
	if (!colon)
		return 28;
	*colon = 0;
	struct sockaddr_in sa = { .sin_family = AF_INET,
		                  .sin_port = htons((uint16_t)atoi(colon + 1)) };
	inet_pton(AF_INET, victim, &sa.sin_addr);
	struct fab *f = calloc(1, sizeof(*f));
	int rc = fab_open(f, c->port + STRANGER_PORT);
	if (rc == 0 && fi_av_insert(f->av, &sa, 1, &f->victim, 0, NULL) != 1)
		rc = 29;
	if (rc == 0)
		rc = attack(f, c);
	if (write(c->done_pipe[1], rc ? "x" : "1", 1) != 1)
		rc = 30;
	/* still an endpoint rank 0 can send to, until rank 0 is done */
	fcntl(c->bye_pipe[0], F_SETFL, O_NONBLOCK);
	double deadline = now_s() + DEADLINE_S;
	char b;
	while (read(c->bye_pipe[0], &b, 1) != 1 && now_s() < deadline)
		if (f->cq)
			drain(f);
	fab_close(f);
	free(f);
	return rc;
}

/* ------------------------------------------------------------ the job */

/* 1 when line holds one of the '|'-separated strings of what. */
static int has_any(const char *line, const char *what)
{
	char alt[256];
	for (const char *p = what; *p;) {
		const char *bar = strchr(p, '|');
		size_t n = bar ? (size_t)(bar - p) : strlen(p);
		snprintf(alt, sizeof(alt), "%.*s", (int)n, p);
		if (strstr(line, alt))
			return 1;
		p += n + (bar != NULL);
	}
	return 0;
}

/* Lines of rank 0's log holding both strings, read as the log grows
 * (at INFO it grows with every collective). */
struct logscan {
	FILE *fp;
	int n;
};

static int log_count(const struct bcfg *c, struct logscan *ls)
{
	char line[2048];
	if (!ls->fp && !(ls->fp = fopen(c->log, "r")))
		return ls->n;
	for (;;) {
		long at = ftell(ls->fp);
		if (!fgets(line, sizeof(line), ls->fp)) {
			clearerr(ls->fp);
			break;
		}
		size_t len = strlen(line);
		if (len && line[len - 1] != '\n' && len + 1 < sizeof(line)) {
			fseek(ls->fp, at, SEEK_SET); /* the rest is still being written */
			break;
		}
		ls->n += has_any(line, c->what) && strstr(line, c->who);
	}
	return ls->n;
}

static int rank_main(int r, void *arg)
{
	struct bcfg *c = arg;
	if (r == STRANGER)
		return stranger_main(c);
	close(c->addr_pipe[0]);
	close(c->done_pipe[1]);
	close(c->bye_pipe[0]);
	hpct_world *w;
	if (hpct_world_create(&w) != 0) {
		note("rank %d: %s\n", r, hpct_last_error());
		return 2;
	}
	hpct_group *g = hpct_world_group(w);
	int rc = 0, seen = 0, done = 0, stop = 0;
	long base_kb = 0, peak_kb = 0;
	uint32_t iter = 0;
	struct logscan ls = { 0 };
	double deadline = now_s() + DEADLINE_S;
	fcntl(c->done_pipe[0], F_SETFL, O_NONBLOCK);
	for (; !stop && rc == 0; iter++) {
		uint32_t item[3] = { (uint32_t)r, iter, 0 }, all[NRANKS][3];
		if (r == 0 && iter == 1) { /* the job is up: now the stranger */
			char addr[HPCT_ADDRSTRLEN];
			base_kb = peak_kb = ht_rss_kb();
			if (hpct_world_peer_addr(w, 0, addr) != 0 ||
			    write(c->addr_pipe[1], addr, strlen(addr)) <= 0)
				item[2] = 2;
		} else if (r == 0 && iter > 1) {
			char b;
			long kb = ht_rss_kb();
			peak_kb = kb > peak_kb ? kb : peak_kb;
			seen = seen || log_count(c, &ls) > 0;
			/* waits a moment on the stranger (a pace for the loop: the job
			 * need not spin two cores while the attack goes on) */
			struct pollfd pfd = { .fd = c->done_pipe[0], .events = POLLIN };
			if (poll(&pfd, 1, 1) == 1 && !done && read(c->done_pipe[0], &b, 1) == 1)
				done = b == '1' ? 1 : -1;
			if (seen && done)
				item[2] = 1;
			else if (now_s() > deadline)
				item[2] = 2;
		}
		if ((rc = hpct_allgather(g, item, sizeof(item), all)) != 0) {
			note("rank %d: allgather %u during '%s': %s\n", r, iter, c->attack,
			     hpct_last_error());
			rc = 3;
			break;
		}
		for (int k = 0; k < NRANKS; k++)
			if (all[k][0] != (uint32_t)k || all[k][1] != iter) {
				note("rank %d: allgather %u: rank %d's item is %u/%u\n", r, iter, k,
				     all[k][0], all[k][1]);
				rc = 4;
			}
		stop = (int)all[0][2];
	}
	if (r == 0 && rc == 0) {
		int lines = log_count(c, &ls);
		note("rank 0: '%s': %u allgathers; resident %ld kB before the stranger, at most "
		     "%ld kB during (+%ld kB); %d log line(s) naming %s\n",
		     c->attack, iter, base_kb, peak_kb, peak_kb - base_kb, lines, c->who);
		if (stop == 2) {
			note("rank 0: within %.0f s: %s log line with '%s' naming %s; the "
			     "stranger "
			     "%s\n",
			     DEADLINE_S, seen ? "a" : "NO", c->what, c->who,
			     done > 0   ? "was done"
			     : done < 0 ? "FAILED"
			                : "was NOT done");
			rc = 5;
		} else if (done < 0) {
			rc = 6; /* the stranger says why */
		} else if (lines != 1) {
			note("rank 0: the refusal logged %d times, not once\n", lines);
			rc = 7;
		} else if (!SANITIZED && peak_kb - base_kb > RSS_GROWTH_KB) {
			note("rank 0: resident memory grew by %ld kB (bound %d kB)\n",
			     peak_kb - base_kb, RSS_GROWTH_KB);
			rc = 8;
		}
	}
	if (ls.fp)
		fclose(ls.fp);
	if (r == 0 && write(c->bye_pipe[1], "b", 1) != 1)
		rc = rc ? rc : 9;
	hpct_world_destroy(w);
	return rc;
}

static void env_cb(int r, void *arg)
{
	struct bcfg *c = arg;
	ht_setenv_world(r < NRANKS ? r : 0, NRANKS, 1, c->port, 1, 20);
	setenv("HPCT_TRANSPORT", "ofi", 1);
	unsetenv("HPCT_OFI_PROVIDER");
	unsetenv("HPCT_OFI_EXCHANGE");
	if (r == 0) {
		setenv("HPCT_DEBUG_FILE", c->log, 1);
		if (c->info) {
			setenv("HPCT_DEBUG", "INFO", 1);
			setenv("HPCT_DEBUG_SUBSYS", "NET", 1);
		}
	}
}

/* who: the stranger's own address, or any address at FORGED_PORT */
enum who { STRANGER_ADDR, FORGED_ADDR };

static void run(int slot, const char *attack, const char *what, enum who who, int info)
{
	struct bcfg c = {
		.port = hpct_test_ports(slot), .attack = attack, .what = what, .info = info
	};
	if (who == STRANGER_ADDR)
		snprintf(c.who, sizeof(c.who), "127.0.0.1:%d", c.port + STRANGER_PORT);
	else
		snprintf(c.who, sizeof(c.who), ":%d", c.port + FORGED_PORT);
	snprintf(c.log, sizeof(c.log), "/tmp/hpct-bounds-ofi-%d-%s.log", (int)getpid(), attack);
	snprintf(diag_path, sizeof(diag_path), "/tmp/hpct-bounds-ofi-%d-%s.diag", (int)getpid(),
	         attack);
	unlink(c.log);
	unlink(diag_path);
	cr_assert(pipe(c.addr_pipe) == 0 && pipe(c.done_pipe) == 0 && pipe(c.bye_pipe) == 0);
	int codes[NRANKS + 1];
	int bad = ht_spawn(NRANKS + 1, env_cb, rank_main, &c, DEADLINE_S + 60, NULL, codes);
	for (int i = 0; i < 2; i++) {
		close(c.addr_pipe[i]);
		close(c.done_pipe[i]);
		close(c.bye_pipe[i]);
	}
	if (bad) {
		FILE *fp = fopen(c.log, "r");
		char line[2048];
		note("rank 0's log (%s):\n", c.log);
		while (fp && fgets(line, sizeof(line), fp))
			note("%s", line);
		if (fp)
			fclose(fp);
	}
	unlink(c.log);
	char said[4096] = "";
	FILE *fp = fopen(diag_path, "r");
	if (fp) {
		said[fread(said, 1, sizeof(said) - 1, fp)] = 0;
		fclose(fp);
	}
	unlink(diag_path);
	cr_expect_eq(bad, 0, "'%s' (rank %d is the stranger): %s\n%s", attack, STRANGER,
	             ht_describe(codes, NRANKS + 1), said);
	cr_log_info("%s", said);
}

/* Pieces that overlap: as many bytes as the message, not all of it
 * covered; refused, the conn closed, nothing handed on. */
Test(bounds_ofi, overlapping_pieces_refused)
{
	run(0, "overlap", "overlapping bytes already received", STRANGER_ADDR, 0);
}

/* Messages 2, 3, ... each incomplete while message 1 never comes: the conn
 * is closed at MAX_PARTS in reassembly. */
Test(bounds_ofi, endless_parts_capped)
{
	run(1, "parts", "others are incomplete (capped at " HPCT_STR(MAX_PARTS) " per connection)",
	    STRANGER_ADDR, 0);
}

/* SYN after SYN, never a handshake: at MAX_PENDING the oldest goes. */
Test(bounds_ofi, endless_connections_capped)
{
	run(2, "conns", "not yet identified (capped at " HPCT_STR(MAX_PENDING) ")", STRANGER_ADDR,
	    0);
}

/* SYNs naming ever new addresses: at MAX_STRANGER_AV such address-vector
 * entries, a SYN from a new name is refused. */
Test(bounds_ofi, endless_address_vector_entries_capped)
{
	run(3, "av",
	    "address-vector entries are named by connections not yet identified (capped "
	    "at " HPCT_STR(MAX_STRANGER_AV) ")",
	    FORGED_ADDR, 0);
}

/* A message claiming 256 MB, 100 bytes of it sent: refused for its size
 * (a stranger has room for a handshake, HPCT_AUTH_LEN = 112 bytes), nothing
 * allocated for it. */
Test(bounds_ofi, huge_claimed_total_refused)
{
	run(4, "huge", "of 268435456 bytes, more than the 112 it may send yet", STRANGER_ADDR, 0);
}

/* A SYN, then silence: the conn is closed, naming the stranger.  The
 * engine closes it after its handshake timeout (HPCT_TIMEOUT 20 s: 10 s),
 * the transport after PENDING_AFTER (30 s), whichever comes first. */
Test(bounds_ofi, silent_connection_closed)
{
	run(5, "silence", "sent no handshake within|not identified within", STRANGER_ADDR, 1);
}
