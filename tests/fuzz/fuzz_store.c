/* libFuzzer: bytes from one connection to a rank's rootless store, under
 * small caps (64 keys, 16 KiB): no crash, never more held than the caps,
 * and the accounting back to nothing once the keys are forgotten. */
#include <stdint.h>
#include <stdlib.h>

#include "bootstrap/store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	if (hpct__store_fuzz_one(data, len) != 0)
		abort();
	return 0;
}
