#include "bootstrap/base/wire.h"

#include <string.h>

#include <dlfcn.h>
#include <pthread.h>

#include "hpct/hpct.h"

static void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)(v >> 8);
	p[1] = (unsigned char)v;
}

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (24 - 8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}

static uint16_t get16(const unsigned char *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get32(const unsigned char *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t get64(const unsigned char *p)
{
	return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

void hpct__hello_encode(const struct hpct_hello *h, unsigned char out[HPCT_HELLO_LEN])
{
	put32(out, HPCT_WIRE_MAGIC);
	put16(out + 4, HPCT_WIRE_VERSION);
	put16(out + 6, h->type);
	put64(out + 8, h->job);
	put64(out + 16, h->epoch);
	put64(out + 24, h->group);
	put32(out + 32, h->src);
	put32(out + 36, h->dst);
	put32(out + 40, h->size);
	put32(out + 44, h->reason);
}

int hpct__hello_decode(const void *buf, size_t len, struct hpct_hello *h)
{
	return hpct__hello_decode_auth(buf, len, h, NULL, NULL);
}

int hpct__hello_decode_auth(const void *buf, size_t len, struct hpct_hello *h,
                            unsigned char nonce[HPCT_AUTH_NONCE], unsigned char mac[HPCT_AUTH_MAC])
{
	const unsigned char *p = buf;
	if ((len != HPCT_HELLO_LEN && len != HPCT_AUTH_LEN) || get32(p) != HPCT_WIRE_MAGIC ||
	    get16(p + 4) != HPCT_WIRE_VERSION)
		return HPCT_EPROTO;
	h->type = get16(p + 6);
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
	h->job = get64(p + 8);
	h->epoch = get64(p + 16);
	h->group = get64(p + 24);
	h->src = get32(p + 32);
	h->dst = get32(p + 36);
	h->size = get32(p + 40);
	h->reason = get32(p + 44);
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
	put16(out + 2, h->round);
	put32(out + 4, h->seq);
	put64(out + 8, h->group);
}

int hpct__msg_hdr_decode(const void *buf, size_t len, struct hpct_msg_hdr *h)
{
	const unsigned char *p = buf;
	if (len < HPCT_MSG_HDR_LEN ||
	    p[0] < HPCT_MSG_DATA || p[0] > HPCT_MSG_PONG || p[1] != 0)
		return HPCT_EPROTO;
	h->type = p[0];
	h->round = get16(p + 2);
	h->seq = get32(p + 4);
	h->group = get64(p + 8);
	return 0;
}

size_t hpct__abort_encode(const struct hpct_abort *a, unsigned char *out)
{
	put32(out, (uint32_t)a->code);
	put32(out + 4, a->origin);
	put32(out + 8, (uint32_t)a->culprit);
	size_t n = strnlen(a->text, sizeof(a->text) - 1);
	memcpy(out + 12, a->text, n);
	return 12 + n;
}

int hpct__abort_decode(const void *buf, size_t len, struct hpct_abort *a)
{
	const unsigned char *p = buf;
	if (len < 12 || len > 12 + sizeof(a->text) - 1)
		return HPCT_EPROTO;
	a->code = (int32_t)get32(p);
	a->origin = get32(p + 4);
	a->culprit = (int32_t)get32(p + 8);
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
	put64(p, h->job);
	put64(p + 8, h->epoch);
	put64(p + 16, h->group);
	put32(p + 24, connector);
	put32(p + 28, acceptor);
	unsigned int n = 0;
	if (!crypto.hmac(crypto.sha256(), secret, (int)slen, msg, sizeof(msg), mac, &n) ||
	    n != HPCT_AUTH_MAC)
		return HPCT_EINVAL;
	return 0;
}
