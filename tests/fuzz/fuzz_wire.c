/* libFuzzer: every frame a peer can send the engine: handshakes (with and
 * without a proof of the secret), message headers, ABORT payloads; and the
 * same bytes as a client's side of the secret's exchange on hpct's own
 * streams (auth.c's server side: HELLO, then AUTH), for job 1, epoch 2,
 * the store, server rank 3 of 4. */
#include <stdint.h>
#include <string.h>

#include "bootstrap/base/auth.h"
#include "bootstrap/base/wire.h"

static void auth_server(const uint8_t *data, size_t len)
{
	static const struct hpct_auth_id expect = {
		.job = 1, .epoch = 2, .service = HPCT_AUTH_SERVICE_STORE, .server = 3, .size = 4
	};
	struct hpct_auth_srv a;
	memset(&a, 0, sizeof(a));
	unsigned char out[HPCT_AUTH_LEN];
	char why[200];
	size_t used, outlen;
	for (;;) {
		int rc = hpct__auth_server_feed(&a, "fuzz", 4, &expect, data, len, &used, out,
		                                &outlen, why, sizeof(why));
		if (used > len || outlen > sizeof(out) ||
		    (rc == HPCT_AUTH_REFUSE && !memchr(why, 0, sizeof(why))))
			__builtin_trap();
		data += used;
		len -= used;
		if (rc != HPCT_AUTH_MORE || used == 0)
			return;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	struct hpct_hello h;
	unsigned char nonce[HPCT_AUTH_NONCE], mac[HPCT_AUTH_MAC];
	hpct__hello_decode_auth(data, len, &h, nonce, mac);
	struct hpct_msg_hdr m;
	hpct__msg_hdr_decode(data, len, &m);
	struct hpct_abort a;
	if (hpct__abort_decode(data, len, &a) == 0 && strlen(a.text) >= sizeof(a.text))
		__builtin_trap(); /* its text must come back NUL-terminated */
	auth_server(data, len);
	return 0;
}
