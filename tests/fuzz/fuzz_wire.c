/* libFuzzer: every frame a peer can send the engine: handshakes (with and
 * without a proof of the secret), message headers, ABORT payloads. */
#include <stdint.h>
#include <string.h>

#include "bootstrap/wire.h"

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
	return 0;
}
