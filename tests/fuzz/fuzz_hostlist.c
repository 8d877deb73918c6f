/* libFuzzer: node lists as Slurm and HPCT_HOSTS write them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/topo/hostlist.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	char *s = malloc(len + 1), err[256], **hosts = NULL;
	if (!s)
		return 0;
	memcpy(s, data, len);
	s[len] = 0;
	int n = 0;
	if (hpct__hostlist_parse(s, 4096, &hosts, &n, err, sizeof(err)) == 0)
		hpct__strv_free(hosts, n);
	free(s);
	return 0;
}
