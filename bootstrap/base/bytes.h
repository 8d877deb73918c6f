/* Big-endian (network order) integers in byte buffers: the one definition
 * for hpct's wire formats (the engine's frames, the standard path, the store,
 * the libfabric transport's headers).  Header-only, includes nothing of hpct,
 * so transport/ may use it too. */
#ifndef HPCT_BYTES_H
#define HPCT_BYTES_H

#include <stdint.h>

static inline void hpct__put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)(v >> 8);
	p[1] = (unsigned char)v;
}

static inline void hpct__put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

static inline void hpct__put64(unsigned char *p, uint64_t v)
{
	hpct__put32(p, (uint32_t)(v >> 32));
	hpct__put32(p + 4, (uint32_t)v);
}

static inline uint16_t hpct__get16(const unsigned char *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t hpct__get32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t hpct__get64(const unsigned char *p)
{
	return (uint64_t)hpct__get32(p) << 32 | hpct__get32(p + 4);
}

#endif
