/* Admission by shared secret on hpct's own byte streams (see auth.h). */
#include "bootstrap/base/auth.h"

#include <stdio.h>
#include <string.h>

#include "bootstrap/base/bytes.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/sock.h"
#include "bootstrap/base/util.h"
#include "hpct/hpct.h"

static void frame(unsigned char out[HPCT_AUTH_LEN], uint16_t type, const struct hpct_auth_id *id,
                  uint32_t reason, const unsigned char *nonce, const unsigned char *mac)
{
	struct hpct_hello h = { .type = type,
		                .job = id->job,
		                .epoch = id->epoch,
		                .group = id->service,
		                .src = id->client,
		                .dst = id->server,
		                .size = id->size,
		                .reason = reason };
	hpct__hello_encode(&h, out);
	memset(out + HPCT_HELLO_LEN, 0, HPCT_AUTH_NONCE + HPCT_AUTH_MAC);
	if (nonce)
		memcpy(out + HPCT_HELLO_LEN, nonce, HPCT_AUTH_NONCE);
	if (mac)
		memcpy(out + HPCT_HELLO_LEN + HPCT_AUTH_NONCE, mac, HPCT_AUTH_MAC);
}

static int proof(const void *secret, size_t slen, char who, const unsigned char *own,
                 const unsigned char *peer, const struct hpct_auth_id *id,
                 unsigned char mac[HPCT_AUTH_MAC])
{
	struct hpct_hello h = { .job = id->job, .epoch = id->epoch, .group = id->service };
	return hpct__auth_mac(secret, slen, who, own, peer, &h, id->client, id->server, mac);
}

int hpct__auth_not_hello(const unsigned char *data, size_t len)
{
	return len >= 4 && hpct__get32(data) != HPCT_WIRE_MAGIC;
}

int hpct__auth_is_frame(const unsigned char *data, size_t len)
{
	return len >= 4 && hpct__get32(data) == HPCT_WIRE_MAGIC;
}

/* ------------------------------------------------------------ client */

static int client_fail(int rc, const char *who, const char *what)
{
	const char *how = rc == HPCT_EPEERDEAD   ? "closed the connection"
	                  : rc == HPCT_ETIMEDOUT ? "did not answer in time"
	                                         : hpct_strerror(rc);
	return hpct__fail(
	        rc == HPCT_EPEERDEAD || rc == HPCT_ETIMEDOUT ? rc : HPCT_EPEERDEAD, HPCT_SUB_NET,
	        "%s %s %s (does it have HPCT_SECRET? it must, as this rank does)", who, how, what);
}

int hpct__auth_client(int fd, const void *secret, size_t slen, const struct hpct_auth_id *id,
                      double deadline, const char *who)
{
	if (!hpct__auth_available())
		return hpct__fail(
		        HPCT_EBADENV, HPCT_SUB_NET,
		        "HPCT_SECRET is set but libcrypto.so.3 (OpenSSL) cannot be loaded: "
		        "install libssl3");
	unsigned char nonce[HPCT_AUTH_NONCE], buf[HPCT_AUTH_LEN], mac[HPCT_AUTH_MAC],
	        want[HPCT_AUTH_MAC], peer_nonce[HPCT_AUTH_NONCE];
	hpct__random(nonce, sizeof(nonce));
	frame(buf, HPCT_HELLO, id, 0, nonce, NULL);
	int rc = hpct__sock_send_all(fd, buf, sizeof(buf), deadline);
	if (rc == 0)
		rc = hpct__sock_recv_all(fd, buf, sizeof(buf), deadline);
	if (rc)
		return client_fail(rc, who, "before proving the shared secret");
	struct hpct_hello h;
	if (hpct__hello_decode_auth(buf, sizeof(buf), &h, peer_nonce, mac) < 0)
		return hpct__fail(HPCT_EPROTO, HPCT_SUB_NET,
		                  "%s answered our HELLO with something that is not a handshake",
		                  who);
	if (h.type == HPCT_HELLO_REFUSE)
		return hpct__fail(HPCT_EREFUSED, HPCT_SUB_NET, "%s refused us: %s", who,
		                  hpct__refuse_reason_str(h.reason));
	if (h.type != HPCT_HELLO_CHALLENGE || h.job != id->job || h.epoch != id->epoch ||
	    h.group != id->service || h.src != id->client || h.dst != id->server ||
	    proof(secret, slen, 'A', peer_nonce, nonce, id, want) != 0 ||
	    !hpct__auth_equal(mac, want))
		return hpct__fail(HPCT_EREFUSED, HPCT_SUB_NET,
		                  "%s gave a wrong proof of the shared secret (HPCT_SECRET differs "
		                  "there?)",
		                  who);
	if (proof(secret, slen, 'C', nonce, peer_nonce, id, mac) != 0)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_NET, "HMAC-SHA256 failed in libcrypto");
	frame(buf, HPCT_HELLO_AUTH, id, 0, NULL, mac);
	rc = hpct__sock_send_all(fd, buf, sizeof(buf), deadline);
	if (rc == 0)
		rc = hpct__sock_recv_all(fd, buf, sizeof(buf), deadline);
	if (rc)
		return client_fail(rc, who, "after our proof");
	if (hpct__hello_decode_auth(buf, sizeof(buf), &h, NULL, NULL) < 0 ||
	    (h.type != HPCT_HELLO_ACK && h.type != HPCT_HELLO_REFUSE))
		return hpct__fail(HPCT_EPROTO, HPCT_SUB_NET,
		                  "%s answered our proof with something that is not a handshake",
		                  who);
	if (h.type == HPCT_HELLO_REFUSE)
		return hpct__fail(HPCT_EREFUSED, HPCT_SUB_NET, "%s refused our proof: %s", who,
		                  hpct__refuse_reason_str(h.reason));
	return 0;
}

/* ------------------------------------------------------------ server */

int hpct__auth_server_gone(const struct hpct_auth_srv *a, char *why, size_t wlen)
{
	if (a->state != 1)
		return 0;
	snprintf(why, wlen,
	         "it claimed rank %u and left without proving the shared secret (HPCT_SECRET "
	         "differs there?)",
	         a->hello.src);
	return 1;
}

static int refuse(struct hpct_auth_srv *a, const struct hpct_auth_id *expect, uint32_t reason,
                  unsigned char out[HPCT_AUTH_LEN], size_t *outlen, char *why, size_t wlen,
                  const char *what)
{
	struct hpct_auth_id id = *expect;
	id.client = a->hello.src;
	frame(out, HPCT_HELLO_REFUSE, &id, reason, NULL, NULL);
	*outlen = HPCT_AUTH_LEN;
	snprintf(why, wlen, "%s", what);
	a->state = 3;
	return HPCT_AUTH_REFUSE;
}

int hpct__auth_server_feed(struct hpct_auth_srv *a, const void *secret, size_t slen,
                           const struct hpct_auth_id *expect, const unsigned char *data, size_t len,
                           size_t *used, unsigned char out[HPCT_AUTH_LEN], size_t *outlen,
                           char *why, size_t wlen)
{
	*used = 0;
	*outlen = 0;
	if (a->state == 2)
		return HPCT_AUTH_ADMIT;
	if (a->state > 2)
		return HPCT_AUTH_REFUSE;
	size_t take = HPCT_AUTH_LEN - a->have < len ? HPCT_AUTH_LEN - a->have : len;
	memcpy(a->in + a->have, data, take);
	a->have += take;
	*used = take;
	if (a->state == 0 && hpct__auth_not_hello(a->in, a->have)) {
		/* no frame at all: a client without the secret, or a stranger;
		 * hpct's clients know a REFUSE by its magic and say why */
		a->hello.src = 0;
		return refuse(a, expect, HPCT_REFUSE_AUTH, out, outlen, why, wlen,
		              "it sent no proof of the shared secret (no HPCT_SECRET there?)");
	}
	if (a->have < HPCT_AUTH_LEN)
		return HPCT_AUTH_MORE;
	a->have = 0;
	unsigned char mac[HPCT_AUTH_MAC], want[HPCT_AUTH_MAC];
	if (a->state == 0) {
		struct hpct_hello *h = &a->hello;
		if (hpct__hello_decode_auth(a->in, HPCT_AUTH_LEN, h, a->peer_nonce, NULL) < 0 ||
		    h->type != HPCT_HELLO) {
			snprintf(why, wlen, "it sent a malformed handshake");
			a->state = 3;
			return HPCT_AUTH_REFUSE;
		}
		char what[160];
		int other_epoch = h->epoch != expect->epoch &&
		                  !(expect->later_epochs && h->epoch > expect->epoch);
		snprintf(what, sizeof(what), "it claims rank %u of %s", h->src,
		         h->job != expect->job         ? "another job"
		         : other_epoch                 ? "another epoch"
		         : h->size != expect->size     ? "a world of another size"
		         : h->dst != expect->server    ? "this job, but meant another rank"
		         : h->group != expect->service ? "this job, but meant another service"
		                                       : "this job, out of range");
		uint32_t reason = h->job != expect->job     ? HPCT_REFUSE_JOB
		                  : other_epoch             ? HPCT_REFUSE_EPOCH
		                  : h->size != expect->size ? HPCT_REFUSE_SIZE
		                  : h->dst != expect->server || h->group != expect->service
		                          ? HPCT_REFUSE_RANK
		                  : h->src >= expect->size ? HPCT_REFUSE_SRC
		                                           : HPCT_REFUSE_NONE;
		if (reason != HPCT_REFUSE_NONE)
			return refuse(a, expect, reason, out, outlen, why, wlen, what);
		struct hpct_auth_id id = *expect;
		id.client = h->src;
		id.epoch = h->epoch;
		hpct__random(a->nonce, sizeof(a->nonce));
		if (proof(secret, slen, 'A', a->nonce, a->peer_nonce, &id, mac) != 0)
			return refuse(a, expect, HPCT_REFUSE_AUTH, out, outlen, why, wlen,
			              "HMAC-SHA256 failed in libcrypto");
		frame(out, HPCT_HELLO_CHALLENGE, &id, 0, a->nonce, mac);
		*outlen = HPCT_AUTH_LEN;
		a->state = 1;
		return HPCT_AUTH_MORE;
	}
	struct hpct_hello h;
	struct hpct_auth_id id = *expect;
	id.client = a->hello.src;
	id.epoch = a->hello.epoch;
	if (hpct__hello_decode_auth(a->in, HPCT_AUTH_LEN, &h, NULL, mac) < 0 ||
	    h.type != HPCT_HELLO_AUTH ||
	    proof(secret, slen, 'C', a->peer_nonce, a->nonce, &id, want) != 0 ||
	    !hpct__auth_equal(mac, want)) {
		char what[160];
		snprintf(
		        what, sizeof(what),
		        "it claims rank %u of this job but gave a wrong proof of the shared secret "
		        "(HPCT_SECRET differs there?)",
		        a->hello.src);
		return refuse(a, expect, HPCT_REFUSE_AUTH, out, outlen, why, wlen, what);
	}
	frame(out, HPCT_HELLO_ACK, &id, 0, NULL, NULL);
	*outlen = HPCT_AUTH_LEN;
	a->state = 2;
	return HPCT_AUTH_ADMIT;
}
