#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "hpct/hpct.h"

HPCT_API const char *hpct_strerror(int err)
{
	if (err == 0)
		return "success";
	switch (err) {
#define HPCT_ERROR_MSG(name, value, msg) \
	case HPCT_##name:                \
		return msg;
		HPCT_ERROR_MAP(HPCT_ERROR_MSG)
#undef HPCT_ERROR_MSG
	}
	if (err < 0 && err > -4096)
		return strerror(-err); /* glibc: static strings for known codes */
	return "unknown error";
}

HPCT_API const char *hpct_errname(int err)
{
	if (err == 0)
		return "OK";
	switch (err) {
#define HPCT_ERROR_NAME(name, value, msg) \
	case HPCT_##name:                 \
		return "HPCT_" #name;
		HPCT_ERROR_MAP(HPCT_ERROR_NAME)
#undef HPCT_ERROR_NAME
	}
	if (err < 0 && err > -4096) {
		const char *n = strerrorname_np(-err);
		if (n)
			return n;
	}
	return "UNKNOWN";
}

HPCT_API const char *hpct_version(void)
{
	return HPCT_VERSION_STRING;
}
