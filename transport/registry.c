#include <stdarg.h>
#include <stdio.h>
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

static hpct_transport_log_fn log_fn, info_fn;

void hpct__transport_set_log(hpct_transport_log_fn fn)
{
	log_fn = fn;
}

void hpct__transport_set_info(hpct_transport_log_fn fn)
{
	info_fn = fn;
}

int hpct__transport_info_on(void)
{
	return info_fn != NULL;
}

static void vsay(hpct_transport_log_fn fn, const char *fmt, va_list ap)
{
	char line[512];
	vsnprintf(line, sizeof(line), fmt, ap);
	fn(line);
}

void hpct__transport_log(const char *fmt, ...)
{
	if (!log_fn)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsay(log_fn, fmt, ap);
	va_end(ap);
}

void hpct__transport_info(const char *fmt, ...)
{
	if (!info_fn)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsay(info_fn, fmt, ap);
	va_end(ap);
}
