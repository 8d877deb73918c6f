/* Internal functions libhpct.so exports under its HPCT_PRIVATE version node,
 * for hpct's own other libraries (libhpct_gloo.so, libhpct_preload.so, hpct-bench) only: no
 * stability promise, not in any installed header. */
#ifndef HPCT_PRIVATE_API_H
#define HPCT_PRIVATE_API_H

#if defined(HPCT_BUILDING)
#define HPCT_PRIVATE __attribute__((visibility("default")))
#else
#define HPCT_PRIVATE
#endif

#endif
