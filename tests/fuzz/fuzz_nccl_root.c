/* libFuzzer: the reports NCCL's ranks send hpct's NCCL root (8-byte magic,
 * socket type, size, then rank, nranks, iroot, nroots, an address and ring
 * info), each 188-byte slice of the input as one connection's bytes. */
#include <stdint.h>

#include "bootstrap/nccl/nccl_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	hpct__nccl_root_fuzz_one(data, len);
	return 0;
}
