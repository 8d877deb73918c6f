/* libFuzzer: every datagram a stranger can send a rank's exchange service
 * or an exchange's fetching socket (bootstrap/xchg/datagram.c), decoded
 * with no secret and with one: a payload handed back must lie inside the
 * datagram and its length within the largest item. */
#include <stdint.h>
#include <string.h>

#include "bootstrap/xchg/xchg_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	static const unsigned char secret[] = "fuzz-secret";
	struct hpct_auth_key none = { 0 }, keyed = { secret, sizeof(secret) - 1, 0 };
	const struct hpct_auth_key *keys[] = { NULL, &none, &keyed };
	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
		struct xw_hdr h;
		const unsigned char *p = NULL;
		if (hpct__xw_decode(data, len, keys[k], &h, &p) != 0)
			continue;
		if (h.len > HPCT_XCHG_MAX_ITEM || (h.len && (!p || p < data || p + h.len > data + len)))
			__builtin_trap();
	}
	return 0;
}
