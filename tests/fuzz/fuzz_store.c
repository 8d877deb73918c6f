/* libFuzzer: bytes from one connection to a rank's rootless store. */
#include <stdint.h>

#include "bootstrap/store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	hpct__store_fuzz_one(data, len);
	return 0;
}
