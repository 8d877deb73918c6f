/* Client of the standard path's rendezvous: a blocking socket where every
 * send and receive waits in poll() with the caller's deadline. */
#include "bootstrap/stdpath/stdpath.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/base/bytes.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/base/util.h"
#include "hpct/hpct.h"

#define RBUF      65536
#define KEY_SHOWN 120 /* bytes of a key quoted in a message */

struct hpct_std_client {
	int fd, rank;
	int broken;    /* a reply may still be owed, or the stream is gone */
	char why[256]; /* what broke it */
	char addr[HPCT_ADDRSTRLEN];
	size_t rpos, rlen;
	unsigned char rbuf[RBUF];
};

/* 0, HPCT_ETIMEDOUT or -errno. */
static int send_iov(struct hpct_std_client *c, struct iovec *iov, int niov, double deadline)
{
	while (niov > 0) {
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)niov };
		ssize_t r = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r < 0) {
			int again = hpct__sock_again(c->fd, POLLOUT, deadline);
			if (again)
				return again;
			continue;
		}
		size_t n = (size_t)r;
		while (niov > 0 && n >= iov->iov_len) {
			n -= iov->iov_len;
			iov++;
			niov--;
		}
		if (niov > 0) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= n;
		}
	}
	return 0;
}

/* Reads exactly len bytes (into buf, or discards them when buf is NULL).
 * 0, HPCT_ETIMEDOUT, HPCT_EPEERDEAD at end of stream, or -errno. */
static int recv_exact(struct hpct_std_client *c, void *buf, size_t len, double deadline)
{
	unsigned char *p = buf;
	while (len > 0) {
		if (c->rpos < c->rlen) {
			size_t n = c->rlen - c->rpos < len ? c->rlen - c->rpos : len;
			if (p) {
				memcpy(p, c->rbuf + c->rpos, n);
				p += n;
			}
			c->rpos += n;
			len -= n;
			continue;
		}
		/* Large reads skip the buffer; small ones fill it to save syscalls. */
		int direct = p && len >= RBUF;
		ssize_t r = direct ? recv(c->fd, p, len, MSG_DONTWAIT)
		                   : recv(c->fd, c->rbuf, RBUF, MSG_DONTWAIT);
		if (r == 0)
			return HPCT_EPEERDEAD;
		if (r < 0) {
			int again = hpct__sock_again(c->fd, POLLIN, deadline);
			if (again)
				return again;
			continue;
		}
		if (direct) {
			p += r;
			len -= (size_t)r;
		} else {
			c->rpos = 0;
			c->rlen = (size_t)r;
		}
	}
	return 0;
}

/* Turns a failed send/receive into the message and code the caller returns;
 * the stream is out of step from here on. */
static void set_broken(struct hpct_std_client *c)
{
	/* Close now: the server then drops our parked request, which would
	 * otherwise still count as a read of a key with readers. */
	c->broken = 1;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

static int io_fail(struct hpct_std_client *c, int rc, const char *what, double t0)
{
	set_broken(c);
	if (rc == HPCT_ETIMEDOUT) {
		snprintf(c->why, sizeof(c->why), "timed out");
		return hpct__fail(rc, HPCT_SUB_STD,
		                  "rank %d: no answer from the rendezvous at %s to %s after %.1f s",
		                  c->rank, c->addr, what, hpct__now() - t0);
	}
	snprintf(c->why, sizeof(c->why), "%s",
	         rc == HPCT_EPEERDEAD ? "closed by the server" : strerror(-rc));
	if (rc == HPCT_EPEERDEAD || rc == -ECONNRESET || rc == -EPIPE)
		return hpct__fail(
		        HPCT_EPEERDEAD, HPCT_SUB_STD,
		        "rank %d: the rendezvous at %s closed the connection during %s (%s%s)",
		        c->rank, c->addr, what,
		        rc == HPCT_EPEERDEAD ? "server gone?" : strerror(-rc),
		        strcmp(what, "HELLO") == 0
		                ? "; it also closes connections that have not said HELLO within "
		                  "its HPCT_TIMEOUT, or the oldest when too many have not: its log "
		                  "names this one"
		                : "");
	return hpct__fail(rc, HPCT_SUB_STD, "rank %d: %s at the rendezvous %s failed (%s)", c->rank,
	                  what, c->addr, strerror(-rc));
}

static int check_usable(struct hpct_std_client *c, const char *what)
{
	if (!c)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_STD, "%s: no rendezvous client", what);
	if (c->broken)
		return hpct__fail(HPCT_ESTATE, HPCT_SUB_STD,
		                  "rank %d: %s: the connection to the rendezvous at %s is unusable "
		                  "since an earlier failure (%s)",
		                  c->rank, what, c->addr, c->why);
	return 0;
}

/* Sends a request and reads the reply's status.  On an error reply, reads
 * the server's reason and returns its code with a message naming `what`. */
static int rpc(struct hpct_std_client *c, struct iovec *iov, int niov, const char *what, double t0,
               double deadline)
{
	unsigned char st[4];
	int rc = send_iov(c, iov, niov, deadline);
	if (rc == 0)
		rc = recv_exact(c, st, 4, deadline);
	if (rc != 0)
		return io_fail(c, rc, what, t0);
	int status = (int)hpct__get32(st);
	if (status == 0)
		return 0;
	if (hpct__auth_is_frame(st, 4)) { /* a REFUSE: it wants a proof */
		set_broken(c);
		snprintf(c->why, sizeof(c->why), "refused: no shared secret here");
		return hpct__fail(
		        HPCT_EREFUSED, HPCT_SUB_STD,
		        "rank %d: the rendezvous at %s refused %s: it has a shared secret "
		        "(HPCT_SECRET) and this rank has none",
		        c->rank, c->addr, what);
	}
	char msg[1024];
	unsigned char lb[4];
	rc = recv_exact(c, lb, 4, deadline);
	uint32_t len = rc == 0 ? hpct__get32(lb) : 0;
	if (rc == 0)
		rc = recv_exact(c, len < sizeof(msg) ? msg : NULL, len, deadline);
	if (rc != 0)
		return io_fail(c, rc, what, t0);
	if (len >= sizeof(msg))
		snprintf(msg, sizeof(msg), "(a %u-byte reason)", len);
	else
		msg[len] = 0;
	if (status == HPCT_EPROTO || status == HPCT_EREFUSED) {
		/* The server closes after these. */
		set_broken(c);
		snprintf(c->why, sizeof(c->why), "%.200s", msg);
	}
	if (status > -1001 || status < -1099)
		status = HPCT_EPROTO; /* only our own codes are expected */
	if (status == HPCT_EPEERDEAD)
		/* Another rank is gone and the server's reason names it; the
		 * reply was read whole, so this connection stays in step. */
		return hpct__fail(status, HPCT_SUB_STD,
		                  "rank %d: %s at the rendezvous %s cannot complete: %s", c->rank,
		                  what, c->addr, msg);
	return hpct__fail(status, HPCT_SUB_STD, "rank %d: the rendezvous at %s refused %s: %s",
	                  c->rank, c->addr, what, msg);
}

static void describe(char *buf, size_t len, const char *op, const char *const *keys, int n)
{
	int o = snprintf(buf, len, "%s", op);
	for (int i = 0; i < n && i < 3 && o > 0 && (size_t)o < len; i++)
		o += snprintf(buf + o, len - (size_t)o, "%s'%.*s'", i ? ", " : " of ", KEY_SHOWN,
		              keys[i]);
	if (n > 3 && o > 0 && (size_t)o < len)
		snprintf(buf + o, len - (size_t)o, " and %d more keys", n - 3);
}

int hpct__std_client_connect(const char *host, int port, int rank, int size, uint64_t job,
                             const struct hpct_auth_key *key, double deadline,
                             struct hpct_std_client **client_out)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	double t0 = hpct__now();
	if (!host || port <= 0 || port > 65535 || size < 1 || rank < 0 || rank >= size)
		return hpct__fail(
		        HPCT_EINVAL, HPCT_SUB_STD,
		        "rank %d: bad rendezvous arguments (host '%s', port %d, world size %d)",
		        rank, host ? host : "(null)", port, size);
	int rc = hpct__resolve(host, port, AF_UNSPEC, &ss, &sl);
	if (rc)
		return rc;
	struct hpct_std_client *c = calloc(1, sizeof(*c));
	if (!c)
		return hpct__fail(HPCT_ENOMEM, HPCT_SUB_STD, "rank %d: out of memory", rank);
	c->rank = rank;
	hpct__addr_str((struct sockaddr *)&ss, c->addr, sizeof(c->addr));

	unsigned int seed = (unsigned int)(rank * 2654435761u) ^ (unsigned int)getpid() ^
	                    (unsigned int)(t0 * 1e6);
	double backoff = 0.001;
	int attempts = 0, err = 0;
	for (;;) {
		attempts++;
		c->fd = hpct__sock_connect(&ss, sl, deadline);
		if (c->fd >= 0)
			break;
		if (c->fd != HPCT_ETIMEDOUT)
			err = -c->fd; /* the last OS error, not our own deadline */
		else if (!err)
			err = ETIMEDOUT;
		double now = hpct__now();
		if (!hpct__sock_retryable(err) || now >= deadline || c->fd == HPCT_ETIMEDOUT) {
			rc = hpct__fail(
			        hpct__sock_retryable(err) ? HPCT_ETIMEDOUT : -err, HPCT_SUB_STD,
			        "rank %d: no rendezvous at %s after %.1f s and %d attempts (%s)",
			        rank, c->addr, now - t0, attempts, strerror(err));
			goto free_client;
		}
		/* Jitter (+-20%) keeps a thousand ranks from retrying in step. */
		double jitter = 0.8 + 0.4 * (double)rand_r(&seed) / RAND_MAX;
		double nap = backoff * jitter;
		hpct__sleep(nap < deadline - now ? nap : deadline - now);
		backoff = backoff * 2 < 0.1 ? backoff * 2 : 0.1;
	}
	HPCT_TRACE(HPCT_SUB_STD, "rank %d: connected to the rendezvous at %s after %d attempts",
	           rank, c->addr, attempts);
	if (key && key->secret) {
		struct hpct_auth_id id = { .job = job,
			                   .epoch = key->epoch,
			                   .service = HPCT_AUTH_SERVICE_STDPATH,
			                   .client = (uint32_t)rank,
			                   .server = 0,
			                   .size = (uint32_t)size };
		char who[HPCT_ADDRSTRLEN + 40];
		snprintf(who, sizeof(who), "rank %d: the rendezvous at %s", rank, c->addr);
		if ((rc = hpct__auth_client(c->fd, key->secret, key->len, &id, deadline, who)) != 0)
			goto close_fd;
	}

	unsigned char hello[21];
	hello[0] = HPCT_STD_HELLO;
	hpct__put32(hello + 1, (uint32_t)rank);
	hpct__put32(hello + 5, HPCT_STD_MAGIC);
	hpct__put32(hello + 9, (uint32_t)size);
	hpct__put64(hello + 13, job);
	struct iovec iov = { .iov_base = hello, .iov_len = sizeof(hello) };
	rc = rpc(c, &iov, 1, "HELLO", t0, deadline);
	/* a world started past epoch 0 (a replacement): its waits are the new
	 * epoch's, which a rank lost at the old one does not fail */
	if (rc == 0 && key && key->epoch > 0)
		rc = hpct__std_client_epoch(c, key->epoch, deadline);
	if (rc)
		goto close_fd;
	*client_out = c;
	return 0;

close_fd:
	if (c->fd >= 0)
		close(c->fd);
free_client:
	free(c);
	return rc;
}

int hpct__std_client_epoch(struct hpct_std_client *c, uint64_t epoch, double deadline)
{
	double t0 = hpct__now();
	int rc = check_usable(c, "EPOCH");
	if (rc)
		return rc;
	unsigned char req[13];
	req[0] = HPCT_STD_EPOCH;
	hpct__put32(req + 1, (uint32_t)c->rank);
	hpct__put64(req + 5, epoch);
	struct iovec iov = { .iov_base = req, .iov_len = sizeof(req) };
	char what[48];
	snprintf(what, sizeof(what), "EPOCH %llu", (unsigned long long)epoch);
	return rpc(c, &iov, 1, what, t0, deadline);
}

void hpct__std_client_close(struct hpct_std_client *c)
{
	if (!c)
		return;
	if (!c->broken) {
		unsigned char bye[5] = { HPCT_STD_BYE, 0, 0, 0, 0 };
		hpct__put32(bye + 1, (uint32_t)c->rank);
		struct iovec iov = { .iov_base = bye, .iov_len = sizeof(bye) };
		send_iov(c, &iov, 1, hpct__now() + 1.0);
	}
	if (c->fd >= 0)
		close(c->fd);
	free(c);
}

static int check_key(struct hpct_std_client *c, const char *key, const char *op)
{
	if (!key || strlen(key) > HPCT_STD_MAX_KEY)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_STD,
		                  "rank %d: %s of a key of %zu bytes (limit %u): '%.*s...'",
		                  c->rank, op, key ? strlen(key) : 0, HPCT_STD_MAX_KEY, KEY_SHOWN,
		                  key ? key : "(null)");
	return 0;
}

/* Requests whose body is one key and a trailing fixed field. */
static int key_rpc(struct hpct_std_client *c, uint8_t op, const char *key, const void *tail,
                   size_t tlen, const void *val, size_t vlen, const char *what, double t0,
                   double deadline)
{
	unsigned char hdr[9];
	uint32_t klen = (uint32_t)strlen(key);
	hdr[0] = op;
	hpct__put32(hdr + 1, (uint32_t)c->rank);
	hpct__put32(hdr + 5, klen);
	struct iovec iov[4] = {
		{ hdr, 9 }, { (void *)key, klen }, { (void *)tail, tlen }, { (void *)val, vlen }
	};
	return rpc(c, iov, vlen ? 4 : 3, what, t0, deadline);
}

int hpct__std_set(struct hpct_std_client *c, const char *key, const void *val, size_t len,
                  int readers, double deadline)
{
	double t0 = hpct__now();
	int rc = check_usable(c, "SET");
	if (rc || (rc = check_key(c, key, "SET")))
		return rc;
	if (len > HPCT_STD_MAX_VALUE || readers < 0 || (len && !val))
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_STD,
		                  "rank %d: SET of '%.*s': %zu bytes (limit %u), %d readers",
		                  c->rank, KEY_SHOWN, key, len, HPCT_STD_MAX_VALUE, readers);
	char what[KEY_SHOWN + 32];
	describe(what, sizeof(what), "SET", &key, 1);
	unsigned char tail[8];
	hpct__put32(tail, (uint32_t)readers);
	hpct__put32(tail + 4, (uint32_t)len);
	return key_rpc(c, HPCT_STD_SET, key, tail, 8, val, len, what, t0, deadline);
}

int hpct__std_add(struct hpct_std_client *c, const char *key, int64_t delta, int64_t *value_out,
                  double deadline)
{
	double t0 = hpct__now();
	int rc = check_usable(c, "ADD");
	if (rc || (rc = check_key(c, key, "ADD")))
		return rc;
	char what[KEY_SHOWN + 32];
	describe(what, sizeof(what), "ADD", &key, 1);
	unsigned char tail[8];
	hpct__put64(tail, (uint64_t)delta);
	rc = key_rpc(c, HPCT_STD_ADD, key, tail, 8, NULL, 0, what, t0, deadline);
	if (rc)
		return rc;
	rc = recv_exact(c, tail, 8, deadline);
	if (rc)
		return io_fail(c, rc, what, t0);
	if (value_out)
		*value_out = (int64_t)hpct__get64(tail);
	return 0;
}

int hpct__std_wait_ge(struct hpct_std_client *c, const char *key, int64_t value, double deadline)
{
	double t0 = hpct__now();
	int rc = check_usable(c, "WAITGE");
	if (rc || (rc = check_key(c, key, "WAITGE")))
		return rc;
	char what[KEY_SHOWN + 64];
	describe(what, sizeof(what), "WAITGE", &key, 1);
	snprintf(what + strlen(what), sizeof(what) - strlen(what), " >= %lld", (long long)value);
	unsigned char tail[8];
	hpct__put64(tail, (uint64_t)value);
	return key_rpc(c, HPCT_STD_WAITGE, key, tail, 8, NULL, 0, what, t0, deadline);
}

/* MGET's reply: with lens, value i must be lens[i] bytes and lands in
 * bufs[i]; without, each value is malloc'd into ((void **)bufs)[i] and its
 * length stored in got[i]. */
static int mget(struct hpct_std_client *c, const char *const *keys, int n, void *const *bufs,
                const size_t *lens, size_t *got, double deadline)
{
	double t0 = hpct__now();
	int rc = check_usable(c, "MGET");
	if (rc)
		return rc;
	if (n < 0 || (uint32_t)n > HPCT_STD_MAX_KEYS)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_STD, "rank %d: MGET of %d keys (limit %u)",
		                  c->rank, n, HPCT_STD_MAX_KEYS);
	if (n == 0)
		return 0;
	size_t total = 9;
	for (int i = 0; i < n; i++) {
		if ((rc = check_key(c, keys[i], "MGET")))
			return rc;
		total += 4 + strlen(keys[i]);
	}
	unsigned char *req = malloc(total);
	if (!req)
		return hpct__fail(HPCT_ENOMEM, HPCT_SUB_STD,
		                  "rank %d: out of memory for an MGET of %d keys", c->rank, n);
	req[0] = HPCT_STD_MGET;
	hpct__put32(req + 1, (uint32_t)c->rank);
	hpct__put32(req + 5, (uint32_t)n);
	size_t o = 9;
	for (int i = 0; i < n; i++) {
		uint32_t kl = (uint32_t)strlen(keys[i]);
		hpct__put32(req + o, kl);
		memcpy(req + o + 4, keys[i], kl);
		o += 4 + kl;
	}
	char what[3 * KEY_SHOWN + 64];
	describe(what, sizeof(what), "MGET", keys, n);
	struct iovec iov = { .iov_base = req, .iov_len = total };
	rc = rpc(c, &iov, 1, what, t0, deadline);
	free(req);
	if (rc)
		return rc;
	int bad = -1;
	uint32_t bad_len = 0;
	for (int i = 0; i < n; i++) {
		unsigned char lb[4];
		if ((rc = recv_exact(c, lb, 4, deadline)))
			return io_fail(c, rc, what, t0);
		uint32_t len = hpct__get32(lb);
		if (len > HPCT_STD_MAX_VALUE) {
			set_broken(c);
			snprintf(c->why, sizeof(c->why), "a %u-byte value in a reply", len);
			return hpct__fail(HPCT_EPROTO, HPCT_SUB_STD,
			                  "rank %d: the rendezvous at %s answered %s with a "
			                  "%u-byte value for '%.*s'",
			                  c->rank, c->addr, what, len, KEY_SHOWN, keys[i]);
		}
		void *dst;
		if (lens) {
			int fits = len == lens[i];
			if (!fits && bad < 0) {
				bad = i;
				bad_len = len;
			}
			dst = fits ? bufs[i] : NULL;
		} else {
			/* one byte more: a zero-length value is still a buffer */
			dst = ((void **)bufs)[i] = malloc((size_t)len + 1);
			got[i] = len;
			if (!dst) {
				set_broken(c);
				return hpct__fail(HPCT_ENOMEM, HPCT_SUB_STD,
				                  "rank %d: out of memory for a %u-byte value",
				                  c->rank, len);
			}
		}
		if ((rc = recv_exact(c, dst, len, deadline)))
			return io_fail(c, rc, what, t0);
	}
	if (bad >= 0)
		return hpct__fail(
		        HPCT_EPROTO, HPCT_SUB_STD,
		        "rank %d: key '%.*s' at the rendezvous %s holds %u bytes, expected %zu",
		        c->rank, KEY_SHOWN, keys[bad], c->addr, bad_len, lens[bad]);
	return 0;
}

int hpct__std_mget(struct hpct_std_client *c, const char *const *keys, int n, void *const *bufs,
                   const size_t *lens, double deadline)
{
	return mget(c, keys, n, bufs, lens, NULL, deadline);
}

int hpct__std_get(struct hpct_std_client *c, const char *key, void **val_out, size_t *len_out,
                  double deadline)
{
	void *val = NULL;
	size_t len = 0;
	int rc = mget(c, &key, 1, (void *const *)&val, NULL, &len, deadline);
	if (rc) {
		free(val);
		return rc;
	}
	*val_out = val;
	*len_out = len;
	return 0;
}
