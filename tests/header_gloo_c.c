/* include/hpct/gloo.h on its own, as a C11 user sees it ('header-gloo-c'),
 * twice to check its guard. */
#include "hpct/gloo.h"

int header_gloo_c(void);
int header_gloo_c(void)
{
	enum hpct_gloo_dtype t = HPCT_GLOO_F64;
	enum hpct_gloo_op op = HPCT_GLOO_PROD;
	int (*ar)(hpct_gloo_context *, void *, size_t, enum hpct_gloo_dtype, enum hpct_gloo_op) =
	        hpct_gloo_allreduce;
	return (int)t + (int)op + (ar != 0);
}
