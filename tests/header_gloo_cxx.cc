/* include/hpct/gloo.h as a C++ user sees it ('header-gloo-cxx'). */
#include "hpct/gloo.h"

int header_gloo_cxx();
int header_gloo_cxx()
{
	hpct_gloo_dtype t = HPCT_GLOO_I32;
	int (*barrier)(hpct_gloo_context *) = hpct_gloo_barrier;
	return static_cast<int>(t) + (barrier != nullptr);
}
