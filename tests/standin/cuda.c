/* tests/standin/cuda.c: a TEST-ONLY stand-in for the NVIDIA driver's
 * libcuda.so.1, for machines without a GPU.  Never installed.
 *
 * Owns the devices the process sees (standin.h, CUDA_VISIBLE_DEVICES),
 * contexts and the per-thread context stack, and the lookup of entry points
 * by name (cuGetProcAddress), through which cudart (inside libnccl.so.2, or
 * libcudart.so) reaches everything.  Names that no file implements resolve
 * to one no-op that returns CUDA_SUCCESS.  Memory, streams, events and
 * kernels live in cuda_memory.c, cudart's private tables in cuda_tables.c.
 * See README.md. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cuda_standin.h"
#include "standin.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <unistd.h>

static struct {
	pthread_once_t once;
	int ndev;                          /* devices the process sees */
	int physical[STANDIN_MAX_DEVICES]; /* ordinal -> device of standin.h */
	int default_dev;                   /* -1: no context is current until one is set */
	int debug;
	int version;
	atomic_ullong next_id;
	pthread_mutex_t lock; /* primary[].refs */
	struct standin_ctx primary[STANDIN_MAX_DEVICES];
} g = { .once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER };

static _Thread_local CUcontext ctx_stack[16];
static _Thread_local int ctx_depth;
static _Thread_local int capture_mode;

/* CUDA_VISIBLE_DEVICES as the driver reads it: indices up to the first
 * that is not one; unset, every device. */
static int visible(const char *s, int all, int *physical)
{
	int n = 0;
	if (s == NULL) {
		for (; n < all; n++)
			physical[n] = n;
		return n;
	}
	while (n < all) {
		char *end;
		long d = strtol(s, &end, 10);
		if (end == s || d < 0 || d >= all)
			break;
		physical[n++] = (int)d;
		if (*end != ',')
			break;
		s = end + 1;
	}
	return n;
}

static void init_once(void)
{
	g.ndev = visible(getenv("CUDA_VISIBLE_DEVICES"), standin_device_count(), g.physical);
	g.debug = standin_debug_level();
	/* the device a program that never picks one runs on: HPCT_STANDIN_DEVICE,
	 * else LOCAL_RANK (a launcher's ranks of one node, one device each) */
	const char *s = getenv("HPCT_STANDIN_DEVICE");
	if (s == NULL || *s == '\0')
		s = getenv("LOCAL_RANK");
	g.default_dev = s != NULL && *s != '\0' ? atoi(s) : -1;
	if (g.default_dev >= g.ndev)
		g.default_dev = -1;
	s = getenv("HPCT_STANDIN_DRIVER_VERSION");
	g.version = s != NULL && atoi(s) > 0 ? atoi(s) : 13000;
	for (int i = 0; i < STANDIN_MAX_DEVICES; i++) {
		g.primary[i].dev = i;
		g.primary[i].primary = 1;
		g.primary[i].id = (unsigned long long)i + 1;
	}
	atomic_store(&g.next_id, 1000);
	/* the default device's primary context is current without a retain */
	if (g.default_dev >= 0)
		g.primary[g.default_dev].refs = 1;
}

static void init(void)
{
	pthread_once(&g.once, init_once);
}

void standin_log(int level, const char *fmt, ...)
{
	init();
	if (g.debug < level)
		return;
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "hpct-standin[%d] cuda: %s\n", (int)getpid(), line);
}

unsigned long long standin_next_id(void)
{
	return atomic_fetch_add(&g.next_id, 1);
}

static int bad_dev(CUdevice dev)
{
	init();
	return dev < 0 || dev >= g.ndev;
}

CUcontext standin_current(void)
{
	init();
	if (ctx_depth > 0)
		return ctx_stack[ctx_depth - 1];
	return g.default_dev >= 0 ? &g.primary[g.default_dev] : NULL;
}

CUcontext standin_primary(CUdevice dev)
{
	return bad_dev(dev) ? NULL : &g.primary[dev];
}

/* ---- version, init, errors ---- */

CU_API(cuInit, unsigned flags)
{
	(void)flags;
	init();
	return g.ndev > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

/* 13000 (CUDA 13.0) unless HPCT_STANDIN_DRIVER_VERSION says otherwise: a
 * 13.0 driver serves every 12.x and 13.x runtime.  One fixed number, since
 * the integrity check in cuda_tables.c hashes the number cudart was told. */
CU_API(cuDriverGetVersion, int *version)
{
	init();
	*version = g.version;
	return CUDA_SUCCESS;
}

static const char *error_name(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
		return "CUDA_SUCCESS";
	case CUDA_ERROR_INVALID_VALUE:
		return "CUDA_ERROR_INVALID_VALUE";
	case CUDA_ERROR_OUT_OF_MEMORY:
		return "CUDA_ERROR_OUT_OF_MEMORY";
	case CUDA_ERROR_NO_DEVICE:
		return "CUDA_ERROR_NO_DEVICE";
	case CUDA_ERROR_INVALID_DEVICE:
		return "CUDA_ERROR_INVALID_DEVICE";
	case CUDA_ERROR_INVALID_CONTEXT:
		return "CUDA_ERROR_INVALID_CONTEXT";
	case CUDA_ERROR_INVALID_HANDLE:
		return "CUDA_ERROR_INVALID_HANDLE";
	case CUDA_ERROR_NOT_FOUND:
		return "CUDA_ERROR_NOT_FOUND";
	case CUDA_ERROR_NOT_SUPPORTED:
		return "CUDA_ERROR_NOT_SUPPORTED";
	default:
		return "CUDA_ERROR_UNKNOWN";
	}
}

CU_API(cuGetErrorName, CUresult r, const char **out)
{
	*out = error_name(r);
	return CUDA_SUCCESS;
}

CU_API(cuGetErrorString, CUresult r, const char **out)
{
	*out = error_name(r);
	return CUDA_SUCCESS;
}

/* ---- devices ---- */

CU_API(cuDeviceGetCount, int *count)
{
	init();
	*count = g.ndev;
	return CUDA_SUCCESS;
}

CU_API(cuDeviceGet, CUdevice *dev, int ordinal)
{
	if (bad_dev(ordinal))
		return CUDA_ERROR_INVALID_DEVICE;
	*dev = ordinal;
	return CUDA_SUCCESS;
}

CU_API(cuDeviceGetName, char *name, int len, CUdevice dev)
{
	if (bad_dev(dev) || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(name, (size_t)len, "%s", STANDIN_NAME);
	return CUDA_SUCCESS;
}

CU_API(cuDeviceGetUuid_v2, CUuuid *uuid, CUdevice dev)
{
	if (bad_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	standin_uuid(g.physical[dev], uuid->bytes);
	return CUDA_SUCCESS;
}

CU_API(cuDeviceGetUuid, CUuuid *uuid, CUdevice dev)
{
	return cuDeviceGetUuid_v2(uuid, dev);
}

CU_API(cuDeviceTotalMem_v2, size_t *bytes, CUdevice dev)
{
	if (bad_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*bytes = STANDIN_TOTAL_MEM;
	return CUDA_SUCCESS;
}

CU_API(cuDeviceGetPCIBusId, char *bus_id, int len, CUdevice dev)
{
	if (bad_dev(dev) || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	standin_bus_id(g.physical[dev], bus_id, (size_t)len);
	return CUDA_SUCCESS;
}

CU_API(cuDeviceGetByPCIBusId, CUdevice *dev, const char *bus_id)
{
	init();
	int physical = standin_device_of_bus_id(bus_id);
	for (int d = 0; d < g.ndev; d++) {
		if (physical >= 0 && g.physical[d] == physical) {
			*dev = d;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_DEVICE;
}

/* An H100-like device: compute capability 9.0; no VMM (102), memory pools
 * (115), GPUDirect RDMA (116), fabric handles (128) or multicast (132), so
 * that NCCL picks the plain paths.  Attributes not listed are 0. */
static const struct {
	int attr, value;
} attributes[] = {
	{ 1, 1024 },        /* threads per block */
	{ 2, 1024 },        /* block x */
	{ 3, 1024 },        /* block y */
	{ 4, 64 },          /* block z */
	{ 5, 2147483647 },  /* grid x */
	{ 6, 65535 },       /* grid y */
	{ 7, 65535 },       /* grid z */
	{ 8, 49152 },       /* shared memory per block */
	{ 9, 65536 },       /* constant memory */
	{ 10, 32 },         /* warp size */
	{ 11, 2147483647 }, /* max pitch */
	{ 12, 65536 },      /* registers per block */
	{ 13, 1980000 },    /* clock rate, kHz */
	{ 14, 512 },        /* texture alignment */
	{ 15, 1 },          /* copy and kernel overlap */
	{ 16, 132 },        /* multiprocessors */
	{ 19, 1 },          /* can map host memory */
	{ 30, 512 },        /* surface alignment */
	{ 31, 1 },          /* concurrent kernels */
	{ 36, 2619000 },    /* memory clock, kHz */
	{ 37, 5120 },       /* memory bus width */
	{ 38, 52428800 },   /* L2 size */
	{ 39, 2048 },       /* threads per SM */
	{ 40, 2 },          /* async engines */
	{ 41, 1 },          /* unified addressing */
	{ 75, 9 },          /* compute capability major */
	{ 76, 0 },          /* compute capability minor */
	{ 78, 1 },          /* stream priorities */
	{ 79, 1 },          /* global L1 cache */
	{ 80, 1 },          /* local L1 cache */
	{ 81, 233472 },     /* shared memory per SM */
	{ 82, 65536 },      /* registers per SM */
	{ 83, 1 },          /* managed memory */
	{ 87, 2 },          /* single to double precision ratio */
	{ 89, 1 },          /* concurrent managed access */
	{ 90, 1 },          /* compute preemption */
	{ 91, 1 },          /* host pointer for registered memory */
	{ 95, 1 },          /* cooperative launch */
	{ 97, 232448 },     /* shared memory per block, opt-in */
	{ 99, 1 },          /* host register */
	{ 106, 32 },        /* blocks per SM */
	{ 111, 1024 },      /* reserved shared memory per block */
	{ 120, 1 },         /* cluster launch */
	{ 131, -1 },        /* NUMA id of the device: none */
};

static int device_attribute(int attr, CUdevice dev)
{
	if (attr == 33) /* PCI bus; PCI domain (50) and device (34) are 0 */
		return standin_pci_bus(g.physical[dev]);
	for (size_t i = 0; i < sizeof(attributes) / sizeof(attributes[0]); i++)
		if (attributes[i].attr == attr)
			return attributes[i].value;
	return 0;
}

CU_API(cuDeviceGetAttribute, int *value, int attr, CUdevice dev)
{
	if (bad_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*value = device_attribute(attr, dev);
	return CUDA_SUCCESS;
}

CU_API(cuDeviceComputeCapability, int *major, int *minor, CUdevice dev)
{
	if (bad_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*major = 9;
	*minor = 0;
	return CUDA_SUCCESS;
}

/* No peer access: NCCL's P2P transport stays out. */
CU_API(cuDeviceCanAccessPeer, int *can, CUdevice dev, CUdevice peer)
{
	(void)dev;
	(void)peer;
	*can = 0;
	return CUDA_SUCCESS;
}

CU_API(cuDeviceGetP2PAttribute, int *value, int attr, CUdevice src, CUdevice dst)
{
	(void)attr;
	(void)src;
	(void)dst;
	*value = 0;
	return CUDA_SUCCESS;
}

CU_API(cuDeviceGetDefaultMemPool, void **pool, CUdevice dev)
{
	(void)pool;
	(void)dev;
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- contexts ---- */

CU_API(cuDevicePrimaryCtxRetain, CUcontext *pctx, CUdevice dev)
{
	if (bad_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&g.lock);
	g.primary[dev].refs++;
	pthread_mutex_unlock(&g.lock);
	*pctx = &g.primary[dev];
	return CUDA_SUCCESS;
}

CU_API(cuDevicePrimaryCtxRelease_v2, CUdevice dev)
{
	if (bad_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&g.lock);
	if (g.primary[dev].refs > 0)
		g.primary[dev].refs--;
	pthread_mutex_unlock(&g.lock);
	return CUDA_SUCCESS;
}

CU_API(cuDevicePrimaryCtxGetState, CUdevice dev, unsigned *flags, int *active)
{
	if (bad_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&g.lock);
	*flags = g.primary[dev].flags;
	*active = g.primary[dev].refs > 0;
	pthread_mutex_unlock(&g.lock);
	return CUDA_SUCCESS;
}

CU_API(cuDevicePrimaryCtxSetFlags_v2, CUdevice dev, unsigned flags)
{
	if (bad_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	g.primary[dev].flags = flags;
	return CUDA_SUCCESS;
}

CU_API(cuDevicePrimaryCtxReset_v2, CUdevice dev)
{
	return bad_dev(dev) ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

CU_API(cuCtxCreate_v2, CUcontext *pctx, unsigned flags, CUdevice dev)
{
	if (bad_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	CUcontext c = calloc(1, sizeof(*c));
	if (c == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->dev = dev;
	c->flags = flags;
	c->id = standin_next_id();
	if (ctx_depth < (int)(sizeof(ctx_stack) / sizeof(ctx_stack[0])))
		ctx_stack[ctx_depth++] = c;
	*pctx = c;
	return CUDA_SUCCESS;
}

CU_API(cuCtxDestroy_v2, CUcontext ctx)
{
	if (ctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < ctx_depth; i++)
		if (ctx_stack[i] == ctx)
			ctx_stack[i] = NULL;
	if (!ctx->primary)
		free(ctx);
	return CUDA_SUCCESS;
}

CU_API(cuCtxGetCurrent, CUcontext *pctx)
{
	*pctx = standin_current();
	return CUDA_SUCCESS;
}

CU_API(cuCtxSetCurrent, CUcontext ctx)
{
	if (ctx_depth > 0)
		ctx_stack[ctx_depth - 1] = ctx;
	else if (ctx != NULL)
		ctx_stack[ctx_depth++] = ctx;
	if (ctx == NULL && ctx_depth > 0)
		ctx_depth--;
	return CUDA_SUCCESS;
}

CU_API(cuCtxPushCurrent_v2, CUcontext ctx)
{
	if (ctx_depth >= (int)(sizeof(ctx_stack) / sizeof(ctx_stack[0])))
		return CUDA_ERROR_INVALID_VALUE;
	ctx_stack[ctx_depth++] = ctx;
	return CUDA_SUCCESS;
}

CU_API(cuCtxPopCurrent_v2, CUcontext *pctx)
{
	if (ctx_depth == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	CUcontext c = ctx_stack[--ctx_depth];
	if (pctx != NULL)
		*pctx = c;
	return CUDA_SUCCESS;
}

CU_API(cuCtxGetDevice, CUdevice *dev)
{
	CUcontext c = standin_current();
	if (c == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	*dev = c->dev;
	return CUDA_SUCCESS;
}

CU_API(cuCtxGetDevice_v2, CUdevice *dev, CUcontext ctx)
{
	if (ctx == NULL)
		return cuCtxGetDevice(dev);
	*dev = ctx->dev;
	return CUDA_SUCCESS;
}

CU_API(cuCtxGetId, CUcontext ctx, unsigned long long *id)
{
	if (ctx == NULL)
		ctx = standin_current();
	if (ctx == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	*id = ctx->id;
	return CUDA_SUCCESS;
}

CU_API(cuCtxGetFlags, unsigned *flags)
{
	CUcontext c = standin_current();
	*flags = c != NULL ? c->flags : 0;
	return CUDA_SUCCESS;
}

CU_API(cuCtxGetApiVersion, CUcontext ctx, unsigned *version)
{
	(void)ctx;
	init();
	*version = (unsigned)g.version;
	return CUDA_SUCCESS;
}

CU_API(cuCtxGetLimit, size_t *value, int limit)
{
	/* stack, printf FIFO, malloc heap, sync depth, pending launches, L2
	 * fetch granularity, persisting L2 */
	static const size_t limits[] = { 1024, 1 << 20, 8 << 20, 2, 2048, 64, 0 };
	*value = limit >= 0 && limit < 7 ? limits[limit] : 0;
	return CUDA_SUCCESS;
}

CU_API(cuCtxGetStreamPriorityRange, int *least, int *greatest)
{
	if (least != NULL)
		*least = 0;
	if (greatest != NULL)
		*greatest = -5;
	return CUDA_SUCCESS;
}

CU_API(cuThreadExchangeStreamCaptureMode, int *mode)
{
	int old = capture_mode;
	capture_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}

/* ---- entry points by name ---- */

static CUresult noop(void)
{
	return CUDA_SUCCESS;
}

CU_API(cuGetProcAddress_v2, const char *symbol, void **pfn, int version, unsigned long long flags,
       int *status);
CU_API(cuGetProcAddress, const char *symbol, void **pfn, int version, unsigned long long flags);

/* cuGetProcAddress takes a base name ("cuMemAlloc") and the CUDA version
 * whose flavour of it the caller wants; only the newest flavours are
 * implemented ("cuMemAlloc_v2"), and callers ask for no older ones, except
 * for cuGetProcAddress itself, whose flavours differ in arity. */
#define E(name)                        \
	{                              \
#name, 0, (void *)name \
	}
#define V(base, impl)                  \
	{                              \
#base, 0, (void *)impl \
	}
static const struct standin_entry entries[] = {
	E(cuInit),
	E(cuDriverGetVersion),
	E(cuGetErrorName),
	E(cuGetErrorString),
	E(cuGetExportTable),
	E(cuGetProcAddress),
	{ "cuGetProcAddress", 12000, (void *)cuGetProcAddress_v2 },
	E(cuDeviceGetCount),
	E(cuDeviceGet),
	E(cuDeviceGetName),
	V(cuDeviceGetUuid, cuDeviceGetUuid_v2),
	E(cuDeviceGetUuid_v2),
	V(cuDeviceTotalMem, cuDeviceTotalMem_v2),
	E(cuDeviceGetPCIBusId),
	E(cuDeviceGetByPCIBusId),
	E(cuDeviceGetAttribute),
	E(cuDeviceComputeCapability),
	E(cuDeviceCanAccessPeer),
	E(cuDeviceGetP2PAttribute),
	E(cuDeviceGetDefaultMemPool),
	E(cuDevicePrimaryCtxRetain),
	V(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2),
	E(cuDevicePrimaryCtxGetState),
	V(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags_v2),
	V(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2),
	V(cuCtxCreate, cuCtxCreate_v2),
	V(cuCtxDestroy, cuCtxDestroy_v2),
	E(cuCtxGetCurrent),
	E(cuCtxSetCurrent),
	V(cuCtxPushCurrent, cuCtxPushCurrent_v2),
	V(cuCtxPopCurrent, cuCtxPopCurrent_v2),
	E(cuCtxGetDevice),
	E(cuCtxGetDevice_v2),
	E(cuCtxGetId),
	E(cuCtxGetFlags),
	E(cuCtxGetApiVersion),
	E(cuCtxGetLimit),
	E(cuCtxGetStreamPriorityRange),
	E(cuThreadExchangeStreamCaptureMode),
};

static void *lookup(const struct standin_entry *table, size_t n, const char *symbol, int version)
{
	void *fn = NULL;
	for (size_t i = 0; i < n; i++)
		if (strcmp(table[i].name, symbol) == 0 && version >= table[i].since)
			fn = table[i].fn;
	return fn;
}

/* Names logged once each (HPCT_STANDIN_DEBUG=1): what was asked and is
 * answered by the no-op. */
static void log_unknown(const char *symbol, int version)
{
	static const char *seen[1024];
	static int nseen;
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	if (g.debug < 1)
		return;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < nseen; i++) {
		if (strcmp(seen[i], symbol) == 0) {
			pthread_mutex_unlock(&lock);
			return;
		}
	}
	if (nseen < 1024)
		seen[nseen++] = strdup(symbol);
	pthread_mutex_unlock(&lock);
	standin_log(1, "no-op for %s (asked for version %d)", symbol, version);
}

CU_API(cuGetProcAddress_v2, const char *symbol, void **pfn, int version, unsigned long long flags,
       int *status)
{
	(void)flags; /* per-thread default stream or not: one stream model here */
	init();
	if (status != NULL)
		*status = 0; /* CU_GET_PROC_ADDRESS_SUCCESS */
	void *fn = lookup(entries, sizeof(entries) / sizeof(entries[0]), symbol, version);
	if (fn == NULL)
		fn = lookup(standin_memory_entries, standin_memory_nentries, symbol, version);
	standin_log(3, "cuGetProcAddress %s version %d: %s", symbol, version,
	            fn != NULL ? "implemented" : "no-op");
	if (fn == NULL) {
		log_unknown(symbol, version);
		fn = (void *)noop;
	}
	*pfn = fn;
	return CUDA_SUCCESS;
}

CU_API(cuGetProcAddress, const char *symbol, void **pfn, int version, unsigned long long flags)
{
	return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
