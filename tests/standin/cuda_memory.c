/* tests/standin/cuda_memory.c: the stand-in libcuda.so.1's memory, streams,
 * events, modules and kernels.  TEST-ONLY; see README.md.
 *
 * "Device" memory is host memory (an anonymous mapping per allocation, so
 * it starts zeroed and costs nothing until touched); copies and sets happen
 * at once, on the calling thread.  Streams and events are always complete.
 * Modules, libraries, kernels and functions are handles that name nothing:
 * no code is loaded and no kernel ever runs (cuLaunchKernel is the no-op). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cuda_standin.h"
#include "standin.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

typedef void *CUstream;
typedef void *CUevent;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void (*CUhostFn)(void *user_data);

#define PTR(x) ((void *)(uintptr_t)(x))

/* One record per allocation, device or host: answers cuMemGetAddressRange
 * and cuPointerGetAttribute. */
struct alloc {
	char *base;
	size_t size;
	int dev;
	int host;
};

static struct {
	pthread_mutex_t lock;
	struct alloc *allocs;
	size_t n, cap;
} mem = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int current_dev(void)
{
	CUcontext c = standin_current();
	return c != NULL ? c->dev : 0;
}

static CUresult map(void **out, size_t size, int dev, int host)
{
	size_t len = size > 0 ? size : 1;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&mem.lock);
	if (mem.n == mem.cap) {
		size_t cap = mem.cap > 0 ? 2 * mem.cap : 256;
		struct alloc *a = realloc(mem.allocs, cap * sizeof(*a));
		if (a == NULL) {
			pthread_mutex_unlock(&mem.lock);
			munmap(p, len);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		mem.allocs = a;
		mem.cap = cap;
	}
	mem.allocs[mem.n++] = (struct alloc){ p, len, dev, host };
	pthread_mutex_unlock(&mem.lock);
	*out = p;
	return CUDA_SUCCESS;
}

static CUresult unmap(void *p)
{
	if (p == NULL)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&mem.lock);
	for (size_t i = 0; i < mem.n; i++) {
		if (mem.allocs[i].base == p) {
			size_t size = mem.allocs[i].size;
			mem.allocs[i] = mem.allocs[--mem.n];
			pthread_mutex_unlock(&mem.lock);
			munmap(p, size);
			return CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&mem.lock);
	return CUDA_ERROR_INVALID_VALUE;
}

/* The allocation holding p, copied out; 0 if none does. */
static int find(uintptr_t p, struct alloc *out)
{
	int found = 0;
	pthread_mutex_lock(&mem.lock);
	for (size_t i = 0; i < mem.n && !found; i++) {
		uintptr_t b = (uintptr_t)mem.allocs[i].base;
		if (p >= b && p < b + mem.allocs[i].size) {
			*out = mem.allocs[i];
			found = 1;
		}
	}
	pthread_mutex_unlock(&mem.lock);
	return found;
}

/* ---- allocation ---- */

CU_API(cuMemAlloc_v2, CUdeviceptr *dptr, size_t size)
{
	return map((void **)dptr, size, current_dev(), 0);
}

CU_API(cuMemFree_v2, CUdeviceptr dptr)
{
	return unmap(PTR(dptr));
}

CU_API(cuMemAllocHost_v2, void **pp, size_t size)
{
	return map(pp, size, current_dev(), 1);
}

CU_API(cuMemHostAlloc, void **pp, size_t size, unsigned flags)
{
	(void)flags;
	return map(pp, size, current_dev(), 1);
}

CU_API(cuMemFreeHost, void *p)
{
	return unmap(p);
}

/* Host memory is its own device pointer (registered or not: cuMemHostRegister
 * is the no-op). */
CU_API(cuMemHostGetDevicePointer_v2, CUdeviceptr *dptr, void *p, unsigned flags)
{
	(void)flags;
	*dptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

CU_API(cuMemGetInfo_v2, size_t *free_bytes, size_t *total)
{
	*free_bytes = STANDIN_TOTAL_MEM;
	*total = STANDIN_TOTAL_MEM;
	return CUDA_SUCCESS;
}

CU_API(cuMemGetAddressRange_v2, CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
	struct alloc a;
	if (!find((uintptr_t)dptr, &a))
		return CUDA_ERROR_NOT_FOUND;
	if (base != NULL)
		*base = (CUdeviceptr)(uintptr_t)a.base;
	if (size != NULL)
		*size = a.size;
	return CUDA_SUCCESS;
}

/* One attribute of the pointer p, written the size the driver writes it. */
static CUresult pointer_attribute(void *data, int attr, CUdeviceptr p, const struct alloc *a)
{
	switch (attr) {
	case 1: /* context */
		*(CUcontext *)data = standin_primary(a->dev);
		return CUDA_SUCCESS;
	case 2: /* memory type: host 1, device 2 */
		*(unsigned *)data = a->host ? 1 : 2;
		return CUDA_SUCCESS;
	case 3:
	case 4: /* device pointer, host pointer */
		*(CUdeviceptr *)data = p;
		return CUDA_SUCCESS;
	case 7: /* buffer id */
		*(unsigned long long *)data = (unsigned long long)(uintptr_t)a->base;
		return CUDA_SUCCESS;
	case 9: /* device ordinal */
		*(int *)data = a->dev;
		return CUDA_SUCCESS;
	case 11: /* range start */
		*(CUdeviceptr *)data = (CUdeviceptr)(uintptr_t)a->base;
		return CUDA_SUCCESS;
	case 12: /* range size */
		*(size_t *)data = a->size;
		return CUDA_SUCCESS;
	case 6:
	case 8:
	case 10:
	case 13:
	case 15: /* sync memops, managed, ipc, mapped, gdr */
		*(int *)data = attr == 13;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

CU_API(cuPointerGetAttribute, void *data, int attr, CUdeviceptr p)
{
	struct alloc a;
	if (!find((uintptr_t)p, &a))
		return CUDA_ERROR_INVALID_VALUE;
	return pointer_attribute(data, attr, p, &a);
}

/* Unknown memory is "unregistered host memory": zeros, and success. */
CU_API(cuPointerGetAttributes, unsigned n, int *attrs, void **data, CUdeviceptr p)
{
	struct alloc a;
	int found = find((uintptr_t)p, &a);
	for (unsigned i = 0; i < n; i++) {
		if (!found || pointer_attribute(data[i], attrs[i], p, &a) != CUDA_SUCCESS)
			*(int *)data[i] = 0;
		if (!found && (attrs[i] == 1 || attrs[i] == 3 || attrs[i] == 4))
			*(void **)data[i] = NULL;
	}
	return CUDA_SUCCESS;
}

/* ---- copies and sets: done at once, whatever the stream ---- */

CU_API(cuMemcpy, CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	memmove(PTR(dst), PTR(src), n);
	return CUDA_SUCCESS;
}

CU_API(cuMemcpyAsync, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	(void)s;
	return cuMemcpy(dst, src, n);
}

CU_API(cuMemcpyHtoD_v2, CUdeviceptr dst, const void *src, size_t n)
{
	return cuMemcpy(dst, (CUdeviceptr)(uintptr_t)src, n);
}

CU_API(cuMemcpyDtoH_v2, void *dst, CUdeviceptr src, size_t n)
{
	return cuMemcpy((CUdeviceptr)(uintptr_t)dst, src, n);
}

CU_API(cuMemcpyDtoD_v2, CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return cuMemcpy(dst, src, n);
}

CU_API(cuMemcpyHtoDAsync_v2, CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	(void)s;
	return cuMemcpy(dst, (CUdeviceptr)(uintptr_t)src, n);
}

CU_API(cuMemcpyDtoHAsync_v2, void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	(void)s;
	return cuMemcpy((CUdeviceptr)(uintptr_t)dst, src, n);
}

CU_API(cuMemcpyDtoDAsync_v2, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	(void)s;
	return cuMemcpy(dst, src, n);
}

CU_API(cuMemcpyPeer, CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n)
{
	(void)dc;
	(void)sc;
	return cuMemcpy(dst, src, n);
}

CU_API(cuMemcpyPeerAsync, CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n,
       CUstream s)
{
	(void)s;
	return cuMemcpyPeer(dst, dc, src, sc, n);
}

CU_API(cuMemsetD8_v2, CUdeviceptr dst, unsigned char v, size_t n)
{
	memset(PTR(dst), v, n);
	return CUDA_SUCCESS;
}

CU_API(cuMemsetD16_v2, CUdeviceptr dst, unsigned short v, size_t n)
{
	unsigned short *p = PTR(dst);
	for (size_t i = 0; i < n; i++)
		p[i] = v;
	return CUDA_SUCCESS;
}

CU_API(cuMemsetD32_v2, CUdeviceptr dst, unsigned v, size_t n)
{
	unsigned *p = PTR(dst);
	for (size_t i = 0; i < n; i++)
		p[i] = v;
	return CUDA_SUCCESS;
}

CU_API(cuMemsetD8Async, CUdeviceptr dst, unsigned char v, size_t n, CUstream s)
{
	(void)s;
	return cuMemsetD8_v2(dst, v, n);
}

CU_API(cuMemsetD16Async, CUdeviceptr dst, unsigned short v, size_t n, CUstream s)
{
	(void)s;
	return cuMemsetD16_v2(dst, v, n);
}

CU_API(cuMemsetD32Async, CUdeviceptr dst, unsigned v, size_t n, CUstream s)
{
	(void)s;
	return cuMemsetD32_v2(dst, v, n);
}

/* ---- streams and events: every piece of work is complete when queued ---- */

struct stream {
	CUcontext ctx;
	unsigned flags;
	int priority;
	unsigned long long id;
};

CU_API(cuStreamCreateWithPriority, CUstream *ps, unsigned flags, int priority)
{
	struct stream *s = calloc(1, sizeof(*s));
	if (s == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	s->ctx = standin_current();
	s->flags = flags;
	s->priority = priority;
	s->id = standin_next_id();
	*ps = s;
	return CUDA_SUCCESS;
}

CU_API(cuStreamCreate, CUstream *ps, unsigned flags)
{
	return cuStreamCreateWithPriority(ps, flags, 0);
}

CU_API(cuStreamDestroy_v2, CUstream s)
{
	free(s);
	return CUDA_SUCCESS;
}

/* The NULL stream and the special handles 1 (legacy) and 2 (per thread)
 * are no allocation of ours. */
static struct stream *real_stream(CUstream s)
{
	return (uintptr_t)s > 2 ? s : NULL;
}

CU_API(cuStreamGetPriority, CUstream s, int *priority)
{
	struct stream *r = real_stream(s);
	*priority = r != NULL ? r->priority : 0;
	return CUDA_SUCCESS;
}

CU_API(cuStreamGetFlags, CUstream s, unsigned *flags)
{
	struct stream *r = real_stream(s);
	*flags = r != NULL ? r->flags : 0;
	return CUDA_SUCCESS;
}

CU_API(cuStreamGetId, CUstream s, unsigned long long *id)
{
	struct stream *r = real_stream(s);
	*id = r != NULL ? r->id : (uintptr_t)s;
	return CUDA_SUCCESS;
}

CU_API(cuStreamGetCtx, CUstream s, CUcontext *pctx)
{
	struct stream *r = real_stream(s);
	*pctx = r != NULL && r->ctx != NULL ? r->ctx : standin_current();
	return *pctx != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CU_API(cuStreamGetDevice, CUstream s, CUdevice *dev)
{
	CUcontext c;
	CUresult r = cuStreamGetCtx(s, &c);
	if (r == CUDA_SUCCESS)
		*dev = c->dev;
	return r;
}

CU_API(cuStreamIsCapturing, CUstream s, int *status)
{
	(void)s;
	*status = 0; /* CU_STREAM_CAPTURE_STATUS_NONE */
	return CUDA_SUCCESS;
}

/* _v1, _v2 and _v3 agree up to the id; a stream never captures, and
 * callers read the rest only while one does. */
CU_API(cuStreamGetCaptureInfo_v2, CUstream s, int *status, unsigned long long *id)
{
	(void)s;
	*status = 0;
	if (id != NULL)
		*id = 0;
	return CUDA_SUCCESS;
}

CU_API(cuLaunchHostFunc, CUstream s, CUhostFn fn, void *user_data)
{
	(void)s;
	fn(user_data);
	return CUDA_SUCCESS;
}

CU_API(cuEventCreate, CUevent *pe, unsigned flags)
{
	unsigned *e = malloc(sizeof(*e));
	if (e == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*e = flags;
	*pe = e;
	return CUDA_SUCCESS;
}

CU_API(cuEventDestroy_v2, CUevent e)
{
	free(e);
	return CUDA_SUCCESS;
}

CU_API(cuEventElapsedTime_v2, float *ms, CUevent start, CUevent end)
{
	(void)start;
	(void)end;
	*ms = 0.0f;
	return CUDA_SUCCESS;
}

/* ---- modules and kernels: handles that name nothing ---- */

static CUresult new_handle(void **out)
{
	/* distinct addresses, never dereferenced by anyone */
	void *h = malloc(16);
	if (h == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = h;
	return CUDA_SUCCESS;
}

CU_API(cuModuleLoadData, CUmodule *m, const void *image)
{
	(void)image;
	return new_handle(m);
}

CU_API(cuModuleLoadDataEx, CUmodule *m, const void *image, unsigned n, void *opts, void **vals)
{
	(void)image;
	(void)n;
	(void)opts;
	(void)vals;
	return new_handle(m);
}

CU_API(cuModuleLoadFatBinary, CUmodule *m, const void *image)
{
	(void)image;
	return new_handle(m);
}

CU_API(cuModuleGetFunction, CUfunction *f, CUmodule m, const char *name)
{
	(void)m;
	(void)name;
	return new_handle(f);
}

CU_API(cuLibraryLoadData, void **lib, const void *code, void *jo, void **jv, unsigned nj, void *lo,
       void **lv, unsigned nl)
{
	(void)code;
	(void)jo;
	(void)jv;
	(void)nj;
	(void)lo;
	(void)lv;
	(void)nl;
	return new_handle(lib);
}

CU_API(cuLibraryGetModule, CUmodule *m, void *lib)
{
	(void)lib;
	return new_handle(m);
}

CU_API(cuLibraryGetKernel, void **k, void *lib, const char *name)
{
	(void)lib;
	(void)name;
	return new_handle(k);
}

CU_API(cuKernelGetFunction, CUfunction *f, void *k)
{
	(void)k;
	return new_handle(f);
}

/* A symbol's storage: 1 MiB of zeroed memory (untouched pages cost
 * nothing); cudart asks once per symbol and keeps the address. */
static CUresult global(CUdeviceptr *dptr, size_t *bytes)
{
	size_t size = 1 << 20;
	void *p;
	CUresult r = map(&p, size, current_dev(), 0);
	if (r != CUDA_SUCCESS)
		return r;
	if (dptr != NULL)
		*dptr = (CUdeviceptr)(uintptr_t)p;
	else
		unmap(p);
	if (bytes != NULL)
		*bytes = size;
	return CUDA_SUCCESS;
}

CU_API(cuModuleGetGlobal_v2, CUdeviceptr *dptr, size_t *bytes, CUmodule m, const char *name)
{
	(void)m;
	(void)name;
	return global(dptr, bytes);
}

CU_API(cuLibraryGetGlobal, CUdeviceptr *dptr, size_t *bytes, void *lib, const char *name)
{
	(void)lib;
	(void)name;
	return global(dptr, bytes);
}

static int function_attribute(int attr)
{
	switch (attr) {
	case 0:
		return 1024; /* max threads per block */
	case 4:
		return 32; /* registers */
	case 5:
	case 6:
		return 90; /* PTX, binary version */
	case 8:
		return 49152; /* max dynamic shared memory */
	case 9:
		return -1; /* preferred carveout */
	default:
		return 0; /* static shared, constant and local bytes */
	}
}

CU_API(cuFuncGetAttribute, int *value, int attr, CUfunction f)
{
	(void)f;
	*value = function_attribute(attr);
	return CUDA_SUCCESS;
}

CU_API(cuKernelGetAttribute, int *value, int attr, void *k, CUdevice dev)
{
	(void)k;
	(void)dev;
	*value = function_attribute(attr);
	return CUDA_SUCCESS;
}

CU_API(cuFuncIsLoaded, int *state, CUfunction f)
{
	(void)f;
	*state = 1; /* CU_FUNCTION_LOADING_STATE_LOADED */
	return CUDA_SUCCESS;
}

CU_API(cuModuleGetLoadingMode, int *mode)
{
	*mode = 1; /* CU_MODULE_EAGER_LOADING */
	return CUDA_SUCCESS;
}

CU_API(cuOccupancyMaxActiveBlocksPerMultiprocessor, int *blocks, CUfunction f, int bs, size_t sm)
{
	(void)f;
	(void)bs;
	(void)sm;
	*blocks = 1;
	return CUDA_SUCCESS;
}

CU_API(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, int *blocks, CUfunction f, int bs,
       size_t sm, unsigned flags)
{
	(void)flags;
	return cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, f, bs, sm);
}

/* ---- this file's entry points, for cuGetProcAddress (cuda.c) ---- */

#define E(name)                        \
	{                              \
#name, 0, (void *)name \
	}
#define V(base, impl)                  \
	{                              \
#base, 0, (void *)impl \
	}
const struct standin_entry standin_memory_entries[] = {
	V(cuMemAlloc, cuMemAlloc_v2),
	V(cuMemFree, cuMemFree_v2),
	V(cuMemAllocHost, cuMemAllocHost_v2),
	E(cuMemHostAlloc),
	E(cuMemFreeHost),
	V(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer_v2),
	V(cuMemGetInfo, cuMemGetInfo_v2),
	V(cuMemGetAddressRange, cuMemGetAddressRange_v2),
	E(cuPointerGetAttribute),
	E(cuPointerGetAttributes),
	E(cuMemcpy),
	E(cuMemcpyAsync),
	V(cuMemcpyHtoD, cuMemcpyHtoD_v2),
	V(cuMemcpyDtoH, cuMemcpyDtoH_v2),
	V(cuMemcpyDtoD, cuMemcpyDtoD_v2),
	V(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2),
	V(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2),
	V(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2),
	E(cuMemcpyPeer),
	E(cuMemcpyPeerAsync),
	V(cuMemsetD8, cuMemsetD8_v2),
	V(cuMemsetD16, cuMemsetD16_v2),
	V(cuMemsetD32, cuMemsetD32_v2),
	E(cuMemsetD8Async),
	E(cuMemsetD16Async),
	E(cuMemsetD32Async),
	E(cuStreamCreate),
	E(cuStreamCreateWithPriority),
	V(cuStreamDestroy, cuStreamDestroy_v2),
	E(cuStreamGetPriority),
	E(cuStreamGetFlags),
	E(cuStreamGetId),
	E(cuStreamGetCtx),
	E(cuStreamGetDevice),
	E(cuStreamIsCapturing),
	V(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_v2),
	E(cuLaunchHostFunc),
	E(cuEventCreate),
	V(cuEventDestroy, cuEventDestroy_v2),
	V(cuEventElapsedTime, cuEventElapsedTime_v2),
	E(cuModuleLoadData),
	E(cuModuleLoadDataEx),
	E(cuModuleLoadFatBinary),
	E(cuModuleGetFunction),
	V(cuModuleGetGlobal, cuModuleGetGlobal_v2),
	E(cuLibraryLoadData),
	E(cuLibraryGetModule),
	E(cuLibraryGetKernel),
	E(cuKernelGetFunction),
	E(cuLibraryGetGlobal),
	E(cuFuncGetAttribute),
	E(cuKernelGetAttribute),
	E(cuFuncIsLoaded),
	E(cuModuleGetLoadingMode),
	E(cuOccupancyMaxActiveBlocksPerMultiprocessor),
	E(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags),
};
const size_t standin_memory_nentries =
        sizeof(standin_memory_entries) / sizeof(standin_memory_entries[0]);
