/* libFuzzer: bytes from one client's connection to the standard path's
 * rendezvous server (4 ranks of HPCT_STD_FUZZ_JOB), through a socket-free
 * hook that parses them as the server thread does. */
#include <stdint.h>

#include "bootstrap/stdpath/stdpath.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	hpct__std_fuzz_one(data, len);
	return 0;
}
