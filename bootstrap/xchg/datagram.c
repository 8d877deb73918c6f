/* The exchange's datagrams (layout in xchg_internal.h). */
#include <string.h>

#include "bootstrap/base/bytes.h"
#include "bootstrap/xchg/xchg_internal.h"

int hpct__xw_encode(const struct xw_hdr *h, const void *payload, const struct hpct_auth_key *key,
                    unsigned char *buf)
{
	int tagged = key && key->secret;
	hpct__put32(buf, XW_MAGIC);
	buf[4] = h->type;
	buf[5] = tagged ? 1 : 0;
	hpct__put16(buf + 6, 0);
	hpct__put64(buf + 8, h->job);
	hpct__put64(buf + 16, h->epoch);
	hpct__put64(buf + 24, h->xid);
	hpct__put64(buf + 32, h->version);
	hpct__put32(buf + 40, h->from);
	hpct__put32(buf + 44, h->to);
	hpct__put64(buf + 48, h->nonce);
	hpct__put32(buf + 56, h->len);
	hpct__put32(buf + 60, h->item_size);
	if (h->len)
		memcpy(buf + XW_HDR, payload, h->len);
	size_t n = XW_HDR + h->len;
	if (tagged) {
		if (hpct__auth_hmac(key->secret, key->len, buf, n, buf + n) != 0)
			return HPCT_EINVAL;
		n += HPCT_AUTH_MAC;
	}
	return (int)n;
}

int hpct__xw_decode(const unsigned char *buf, size_t n, const struct hpct_auth_key *key,
                    struct xw_hdr *h, const unsigned char **payload_out)
{
	if (n < XW_HDR || hpct__get32(buf) != XW_MAGIC)
		return HPCT_EPROTO;
	h->type = buf[4];
	h->flags = buf[5];
	h->job = hpct__get64(buf + 8);
	h->epoch = hpct__get64(buf + 16);
	h->xid = hpct__get64(buf + 24);
	h->version = hpct__get64(buf + 32);
	h->from = hpct__get32(buf + 40);
	h->to = hpct__get32(buf + 44);
	h->nonce = hpct__get64(buf + 48);
	h->len = hpct__get32(buf + 56);
	h->item_size = hpct__get32(buf + 60);
	size_t tag = (h->flags & 1) ? HPCT_AUTH_MAC : 0;
	if (h->len > HPCT_XCHG_MAX_ITEM || n != XW_HDR + h->len + tag)
		return HPCT_EPROTO;
	if (key && key->secret) {
		unsigned char want[HPCT_AUTH_MAC];
		if (!tag ||
		    hpct__auth_hmac(key->secret, key->len, buf, XW_HDR + h->len, want) != 0 ||
		    !hpct__auth_equal(want, buf + XW_HDR + h->len))
			return HPCT_EREFUSED;
	}
	*payload_out = buf + XW_HDR;
	return 0;
}
