#include <string.h>

#include "transport/transport.h"

static const struct hpct_transport_ops *const transports[] = {
	&hpct_transport_tcp,
#ifdef HPCT_HAVE_OFI
	&hpct_transport_ofi,
#endif
};

const struct hpct_transport_ops *hpct_transport_find(const char *name)
{
	for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++)
		if (strcmp(transports[i]->name, name) == 0)
			return transports[i];
	return NULL;
}

const char *hpct_transport_names(void)
{
#ifdef HPCT_HAVE_OFI
	return "tcp, ofi";
#else
	return "tcp";
#endif
}
