/* libFuzzer: fabric messages as the OFI transport receives them (SYN,
 * SYNACK, DATA pieces, FIN, PING: the 24-byte header of ofi.c, then a
 * payload), through ofi_conn.c's own completion path, on an endpoint whose
 * fabric is a fake of this file: sends complete at the next read of the
 * completion queue, receives are what the input says arrived.  The input is
 * records: one action byte, two bytes of length (big-endian), that many
 * bytes.  Actions: 0, 1: the bytes arrive as one fabric message; 2: the
 * engine closes the conn in slot bytes[0], or gives it room (identified);
 * 3: sends are refused (-FI_EAGAIN) until the next 3.  Each record ends
 * with one progress() pass and a check of the bounds (check_bounds).  One conn of ours (id
 * 0x100001, to 127.0.0.1:1) is connecting from the start. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "hpct/hpct.h"
#include "transport/ofi_internal.h"
#include "transport/transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);
int LLVMFuzzerInitialize(int *argc, char ***argv);

enum { MAX_SENT = 4096 };

static struct {
	void *sent[MAX_SENT]; /* contexts of sends not completed yet */
	size_t nsent;
	int refuse;    /* sends say -FI_EAGAIN */
	size_t rx_len; /* a message waits in receive slot 0 */
	int rx_ready;
	fi_addr_t next_addr;
} fab;

static int f_close(struct fid *fid)
{
	(void)fid;
	return 0;
}

static int f_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr,
                    uint64_t flags, void *context)
{
	(void)av, (void)addr, (void)flags, (void)context;
	for (size_t i = 0; i < count; i++)
		fi_addr[i] = fab.next_addr++;
	return (int)count;
}

static int f_remove(struct fid_av *av, fi_addr_t *fi_addr, size_t count, uint64_t flags)
{
	(void)av, (void)fi_addr, (void)count, (void)flags;
	return 0;
}

static ssize_t f_send(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest,
                      void *context)
{
	(void)ep, (void)buf, (void)desc, (void)dest;
	if (len > FRAG)
		__builtin_trap(); /* a fabric message is never longer */
	if (fab.refuse || fab.nsent == MAX_SENT)
		return -FI_EAGAIN;
	fab.sent[fab.nsent++] = context;
	return 0;
}

static ssize_t f_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src,
                      void *context)
{
	(void)ep, (void)buf, (void)len, (void)desc, (void)src, (void)context;
	return 0;
}

static ssize_t f_read(struct fid_cq *cq, void *buf, size_t count)
{
	(void)cq;
	struct fi_cq_msg_entry *e = buf;
	size_t n = 0;
	if (fab.rx_ready && n < count) {
		fab.rx_ready = 0;
		e[n++] = (struct fi_cq_msg_entry){ .op_context = (void *)(intptr_t)1,
			                           .flags = FI_RECV | FI_MSG,
			                           .len = fab.rx_len };
	}
	while (n < count && fab.nsent)
		e[n++] = (struct fi_cq_msg_entry){ .op_context = fab.sent[--fab.nsent],
			                           .flags = FI_SEND | FI_MSG };
	return n ? (ssize_t)n : -FI_EAGAIN;
}

static ssize_t f_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags)
{
	(void)cq, (void)buf, (void)flags;
	return -FI_EAGAIN;
}

static ssize_t f_sread(struct fid_cq *cq, void *buf, size_t count, const void *cond, int timeout)
{
	(void)cond, (void)timeout;
	return f_read(cq, buf, count);
}

static struct fi_ops fid_ops = { .size = sizeof(struct fi_ops), .close = f_close };
static struct fi_ops_av av_ops = { .size = sizeof(struct fi_ops_av),
	                           .insert = f_insert,
	                           .remove = f_remove };
static struct fi_ops_msg msg_ops = { .size = sizeof(struct fi_ops_msg),
	                             .send = f_send,
	                             .recv = f_recv };
static struct fi_ops_cq cq_ops = {
	.size = sizeof(struct fi_ops_cq), .read = f_read, .readerr = f_readerr, .sread = f_sread
};
static struct fid_av av = { .fid = { .ops = &fid_ops }, .ops = &av_ops };
static struct fid_ep ep = { .fid = { .ops = &fid_ops }, .msg = &msg_ops };
static struct fid_cq cq = { .fid = { .ops = &fid_ops }, .ops = &cq_ops };

/* The engine's part: a stranger gets room for a handshake only; whatever
 * is handed on must fit the room the conn was given. */
static void on_event(void *arg, const struct hpct_tevent *ev)
{
	(void)arg;
	switch (ev->type) {
	case HPCT_TEV_ACCEPTED:
		hpct_transport_ofi.set_max_msg(ev->conn, 100);
		break;
	case HPCT_TEV_MESSAGE: {
		struct ofi_conn *c = (struct ofi_conn *)ev->conn;
		if (ev->len > c->max_msg || (ev->len && !ev->data))
			__builtin_trap();
		volatile unsigned char sum = 0;
		for (size_t i = 0; i < ev->len; i++)
			sum ^= ((const unsigned char *)ev->data)[i];
		(void)sum;
		/* a first byte of 0xEE is a handshake the engine takes */
		if (ev->len && ((const unsigned char *)ev->data)[0] == 0xEE)
			hpct_transport_ofi.set_max_msg(ev->conn, HPCT_TRANSPORT_MAX_MSG);
		else if (ev->len && ((const unsigned char *)ev->data)[0] == 0xCC)
			hpct_transport_ofi.close(ev->conn);
		break;
	}
	default:
		break;
	}
}

static void print_line(const char *line)
{
	fprintf(stderr, "%s\n", line);
}

/* FUZZ_OFI_LOG=1: the transport's refusals on stderr (to see what a seed
 * reaches); otherwise they are dropped. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *v = getenv("FUZZ_OFI_LOG");
	if (v && *v == '1')
		hpct__transport_set_log(print_line);
	return 0;
}

/* The bounds, after every record: each message in reassembly is runs of
 * covered bytes, sorted and apart, inside it, summing to what it counts as
 * received, its buffer within REASM_WINDOW of that; the caps hold. */
static void check_bounds(const struct ofi_ctx *x)
{
	unsigned pending = 0;
	for (uint32_t i = 0; i < x->nconns; i++) {
		const struct ofi_conn *c = x->conns[i];
		if (!c)
			continue;
		pending += c->pending != 0;
		unsigned nparts = 0;
		for (const struct part *q = c->parts; q; q = q->next) {
			uint64_t sum = 0, last = 0;
			for (unsigned k = 0; k < q->nranges; k++) {
				if (q->ranges[k].lo >= q->ranges[k].hi ||
				    q->ranges[k].hi > q->total || (k && q->ranges[k].lo <= last))
					__builtin_trap();
				sum += q->ranges[k].hi - q->ranges[k].lo;
				last = q->ranges[k].hi;
			}
			if (sum != q->got || q->nranges > MAX_RANGES || q->cap > q->total ||
			    q->cap > (uint64_t)q->got + REASM_WINDOW)
				__builtin_trap();
			nparts++;
		}
		if (nparts != c->nparts || nparts > MAX_PARTS)
			__builtin_trap();
	}
	if (pending != x->npending || pending > MAX_PENDING || x->nstranger > MAX_STRANGER_AV)
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	struct ofi_ctx *x = calloc(1, sizeof(*x));
	if (!x)
		return 0;
	memset(&fab, 0, sizeof(fab));
	x->av = &av;
	x->ep = &ep;
	x->cq = &cq;
	struct sockaddr_in self = { .sin_family = AF_INET, .sin_port = htons(2) };
	self.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	memcpy(x->name, &self, sizeof(self));
	x->name_len = sizeof(self);
	x->rxbuf = malloc((size_t)NRX * FRAG);
	struct sockaddr_in peer = self;
	peer.sin_port = htons(1);
	struct hpct_tconn *ours;
	if (!x->rxbuf || hpct_transport_ofi.connect(x, (struct sockaddr *)&peer, sizeof(peer), NULL,
	                                            &ours) != 0) {
		hpct_transport_ofi.destroy(x);
		return 0;
	}
	while (len >= 3) {
		int action = data[0] & 3;
		size_t n = (size_t)data[1] << 8 | data[2];
		data += 3;
		len -= 3;
		if (n > len)
			n = len;
		if (action <= 1) {
			memcpy(x->rxbuf, data, n < FRAG ? n : FRAG);
			fab.rx_len = n < FRAG ? n : FRAG;
			fab.rx_ready = 1;
		} else if (action == 2 && n >= 1) {
			uint32_t slot = data[0];
			struct ofi_conn *c = slot < x->nconns ? x->conns[slot] : NULL;
			if (c && n >= 2 && data[1] & 1)
				hpct_transport_ofi.close(&c->base);
			else if (c)
				hpct_transport_ofi.set_max_msg(&c->base, HPCT_TRANSPORT_MAX_MSG);
		} else if (action == 3) {
			fab.refuse = !fab.refuse;
		}
		data += n;
		len -= n;
		hpct_transport_ofi.progress(x, 0, on_event, NULL);
		check_bounds(x);
	}
	fab.refuse = 0;
	for (int i = 0; i < 4 && (fab.nsent || x->backlog); i++)
		hpct_transport_ofi.progress(x, 0, on_event, NULL);
	hpct_transport_ofi.destroy(x);
	/* the fabric still holds what was sent last (a FIN of a close) */
	for (size_t i = 0; i < fab.nsent; i++)
		free(fab.sent[i]);
	return 0;
}
