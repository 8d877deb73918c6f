#include "bootstrap/base/wire.h"

#include <string.h>

#include <dlfcn.h>
#include <pthread.h>

#include "bootstrap/base/bytes.h"
#include "hpct/hpct.h"

void hpct__hello_encode(const struct hpct_hello *h, unsigned char out[HPCT_HELLO_LEN])
{
	hpct__put32(out, HPCT_WIRE_MAGIC);
	hpct__put16(out + 4, HPCT_WIRE_VERSION);
	hpct__put16(out + 6, h->type);
	hpct__put64(out + 8, h->job);
	hpct__put64(out + 16, h->epoch);
	hpct__put64(out + 24, h->group);
	hpct__put32(out + 32, h->src);
	hpct__put32(out + 36, h->dst);
	hpct__put32(out + 40, h->size);
	hpct__put32(out + 44, h->reason);
}

int hpct__hello_decode(const void *buf, size_t len, struct hpct_hello *h)
{
	return hpct__hello_decode_auth(buf, len, h, NULL, NULL);
}

int hpct__hello_decode_auth(const void *buf, size_t len, struct hpct_hello *h,
                            unsigned char nonce[HPCT_AUTH_NONCE], unsigned char mac[HPCT_AUTH_MAC])
{
	const unsigned char *p = buf;
	if ((len != HPCT_HELLO_LEN && len != HPCT_AUTH_LEN) || hpct__get32(p) != HPCT_WIRE_MAGIC ||
	    hpct__get16(p + 4) != HPCT_WIRE_VERSION)
		return HPCT_EPROTO;
	h->type = hpct__get16(p + 6);
	if (h->type < HPCT_HELLO || h->type > HPCT_HELLO_AUTH)
		return HPCT_EPROTO;
	if (nonce)
		memset(nonce, 0, HPCT_AUTH_NONCE);
	if (mac)
		memset(mac, 0, HPCT_AUTH_MAC);
	if (len == HPCT_AUTH_LEN && nonce)
		memcpy(nonce, p + HPCT_HELLO_LEN, HPCT_AUTH_NONCE);
	if (len == HPCT_AUTH_LEN && mac)
		memcpy(mac, p + HPCT_HELLO_LEN + HPCT_AUTH_NONCE, HPCT_AUTH_MAC);
	h->job = hpct__get64(p + 8);
	h->epoch = hpct__get64(p + 16);
	h->group = hpct__get64(p + 24);
	h->src = hpct__get32(p + 32);
	h->dst = hpct__get32(p + 36);
	h->size = hpct__get32(p + 40);
	h->reason = hpct__get32(p + 44);
	return 0;
}

const char *hpct__refuse_reason_str(uint32_t reason)
{
	switch (reason) {
	case HPCT_REFUSE_JOB:
		return "another job";
	case HPCT_REFUSE_EPOCH:
		return "another epoch";
	case HPCT_REFUSE_RANK:
		return "not the rank it was meant for";
	case HPCT_REFUSE_SIZE:
		return "another world size";
	case HPCT_REFUSE_DUP:
		return "source rank already connected";
	case HPCT_REFUSE_SRC:
		return "source rank out of range";
	case HPCT_REFUSE_AUTH:
		return "no proof of the shared secret, or a wrong one (HPCT_SECRET differs)";
	case HPCT_REFUSE_NOAUTH:
		return "it has no shared secret (HPCT_SECRET is set on one side only)";
	default:
		return "no reason given";
	}
}

void hpct__msg_hdr_encode(const struct hpct_msg_hdr *h, unsigned char out[HPCT_MSG_HDR_LEN])
{
	out[0] = h->type;
	out[1] = 0;
	hpct__put16(out + 2, h->round);
	hpct__put32(out + 4, h->seq);
	hpct__put64(out + 8, h->group);
}

int hpct__msg_hdr_decode(const void *buf, size_t len, struct hpct_msg_hdr *h)
{
	const unsigned char *p = buf;
	if (len < HPCT_MSG_HDR_LEN || p[0] < HPCT_MSG_DATA || p[0] > HPCT_MSG_PONG || p[1] != 0)
		return HPCT_EPROTO;
	h->type = p[0];
	h->round = hpct__get16(p + 2);
	h->seq = hpct__get32(p + 4);
	h->group = hpct__get64(p + 8);
	return 0;
}

size_t hpct__abort_encode(const struct hpct_abort *a, unsigned char *out)
{
	hpct__put32(out, (uint32_t)a->code);
	hpct__put32(out + 4, a->origin);
	hpct__put32(out + 8, (uint32_t)a->culprit);
	size_t n = strnlen(a->text, sizeof(a->text) - 1);
	memcpy(out + 12, a->text, n);
	return 12 + n;
}

int hpct__abort_decode(const void *buf, size_t len, struct hpct_abort *a)
{
	const unsigned char *p = buf;
	if (len < 12 || len > 12 + sizeof(a->text) - 1)
		return HPCT_EPROTO;
	a->code = (int32_t)hpct__get32(p);
	a->origin = hpct__get32(p + 4);
	a->culprit = (int32_t)hpct__get32(p + 8);
	memcpy(a->text, p + 12, len - 12);
	a->text[len - 12] = 0;
	return 0;
}

/* OpenSSL's libcrypto, loaded on first use: only ranks given a secret pay
 * for it. */
static struct {
	pthread_once_t once;
	unsigned char *(*hmac)(const void *md, const void *key, int keylen, const unsigned char *d,
	                       size_t n, unsigned char *out, unsigned int *outlen);
	const void *(*sha256)(void);
	int (*memcmp)(const void *a, const void *b, size_t n);
} crypto = { .once = PTHREAD_ONCE_INIT };

static void load_crypto(void)
{
	void *h = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return;
	*(void **)&crypto.hmac = dlsym(h, "HMAC");
	*(void **)&crypto.sha256 = dlsym(h, "EVP_sha256");
	*(void **)&crypto.memcmp = dlsym(h, "CRYPTO_memcmp");
}

int hpct__auth_available(void)
{
	pthread_once(&crypto.once, load_crypto);
	return crypto.hmac && crypto.sha256 && crypto.memcmp;
}

int hpct__auth_equal(const unsigned char *a, const unsigned char *b)
{
	return hpct__auth_available() && crypto.memcmp(a, b, HPCT_AUTH_MAC) == 0;
}

int hpct__auth_hmac(const void *secret, size_t slen, const void *data, size_t len,
                    unsigned char mac[HPCT_AUTH_MAC])
{
	unsigned int n = 0;
	if (!hpct__auth_available() ||
	    !crypto.hmac(crypto.sha256(), secret, (int)slen, data, len, mac, &n) ||
	    n != HPCT_AUTH_MAC)
		return HPCT_EINVAL;
	return 0;
}

int hpct__auth_mac(const void *secret, size_t slen, char who, const unsigned char *own_nonce,
                   const unsigned char *peer_nonce, const struct hpct_hello *h, uint32_t connector,
                   uint32_t acceptor, unsigned char mac[HPCT_AUTH_MAC])
{
	if (!hpct__auth_available())
		return HPCT_EINVAL;
	unsigned char msg[8 + 2 * HPCT_AUTH_NONCE + 32], *p = msg;
	memcpy(p, "hpct-au", 7);
	p[7] = (unsigned char)who;
	p += 8;
	memcpy(p, own_nonce, HPCT_AUTH_NONCE);
	memcpy(p + HPCT_AUTH_NONCE, peer_nonce, HPCT_AUTH_NONCE);
	p += 2 * HPCT_AUTH_NONCE;
	hpct__put64(p, h->job);
	hpct__put64(p + 8, h->epoch);
	hpct__put64(p + 16, h->group);
	hpct__put32(p + 24, connector);
	hpct__put32(p + 28, acceptor);
	unsigned int n = 0;
	if (!crypto.hmac(crypto.sha256(), secret, (int)slen, msg, sizeof(msg), mac, &n) ||
	    n != HPCT_AUTH_MAC)
		return HPCT_EINVAL;
	return 0;
}
