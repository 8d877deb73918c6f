#include "wire.h"

#include <string.h>

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
	const unsigned char *p = buf;
	if (len != HPCT_HELLO_LEN || get32(p) != HPCT_WIRE_MAGIC ||
	    get16(p + 4) != HPCT_WIRE_VERSION)
		return HPCT_EPROTO;
	h->type = get16(p + 6);
	if (h->type < HPCT_HELLO || h->type > HPCT_HELLO_REFUSE)
		return HPCT_EPROTO;
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
	    (p[0] != HPCT_MSG_DATA && p[0] != HPCT_MSG_ABORT && p[0] != HPCT_MSG_EPOCH) || p[1] != 0)
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
