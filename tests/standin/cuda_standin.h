/* tests/standin/cuda_standin.h: the few CUDA driver types the stand-in
 * libcuda.so.1 needs (declared here, not taken from cuda.h), and what its
 * files (cuda.c, cuda_memory.c, cuda_tables.c) use of each other.
 * Test-only; see README.md. */
#ifndef HPCT_CUDA_STANDIN_H
#define HPCT_CUDA_STANDIN_H

#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct standin_ctx *CUcontext;
typedef struct {
	unsigned char bytes[16];
} CUuuid;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_SUPPORTED = 801,
};

/* A context: the primary one of a device (one each, never freed) or one
 * from cuCtxCreate.  dev is the ordinal the process sees. */
struct standin_ctx {
	int dev;
	int primary;
	int refs;
	unsigned flags;
	unsigned long long id;
};

/* Every driver entry point is declared right where it is defined, so that
 * -Wmissing-prototypes holds without a copy of cuda.h. */
#define CU_API(name, ...)           \
	CUresult name(__VA_ARGS__); \
	CUresult name(__VA_ARGS__)

/* What cuGetProcAddress hands out: base name, the first CUDA version whose
 * callers get this flavour, the function.  Each file lists its own. */
struct standin_entry {
	const char *name;
	int since;
	void *fn;
};

#define STANDIN_INTERNAL __attribute__((visibility("hidden")))

/* cuda.c */
CUresult cuCtxGetCurrent(CUcontext *pctx);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuDriverGetVersion(int *version);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev);
CUresult cuDeviceGetAttribute(int *value, int attr, CUdevice dev);
STANDIN_INTERNAL CUcontext standin_current(void);
STANDIN_INTERNAL CUcontext standin_primary(CUdevice dev);
STANDIN_INTERNAL unsigned long long standin_next_id(void);
STANDIN_INTERNAL void standin_log(int level, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* cuda_memory.c: memory, streams, events, modules and kernels */
STANDIN_INTERNAL extern const struct standin_entry standin_memory_entries[];
STANDIN_INTERNAL extern const size_t standin_memory_nentries;

/* cuda_tables.c: cudart's private tables, found by 16-byte id. */
CUresult cuGetExportTable(const void **table, const CUuuid *id);

#endif
