/* libFuzzer: the reports NCCL's ranks send hpct's NCCL root, of every
 * release's wire (8-byte magic, socket type, size, then 64 bytes for
 * 2.19-2.22, 172 for 2.23-2.28, 176 with ncclCommGrow's offset for
 * 2.29-2.32), the input cut into connections as the root reads them: a
 * header, then as many bytes as a known size says.  Seeds of each wire in
 * corpus/nccl_root (wire_2_19, wire_2_23, wire_2_29, grow_2_29,
 * mixed_wires). */
#include <stdint.h>

#include "bootstrap/nccl/nccl_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	hpct__nccl_root_fuzz_one(data, len);
	return 0;
}
