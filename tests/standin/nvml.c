/* tests/standin/nvml.c: a TEST-ONLY stand-in for libnvidia-ml.so.1 (NVML),
 * for machines without a GPU.  Never installed.
 *
 * Owns NVML's view of the stand-in devices, which must agree with what the
 * stand-in libcuda.so.1 reports (standin.h): count, index, PCI bus id, UUID,
 * compute capability 9.0.  There is no NVLink, no peer-to-peer, no fabric,
 * no confidential computing.  NCCL needs NVML to build its communicator. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "standin.h"

#include <strings.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

struct nvmlDevice_st {
	int index;
};

enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
};

#define NVML_API(name, ...)             \
	nvmlReturn_t name(__VA_ARGS__); \
	nvmlReturn_t name(__VA_ARGS__)

static struct nvmlDevice_st devices[STANDIN_MAX_DEVICES] = {
	{ 0 },  { 1 },  { 2 },  { 3 },  { 4 },  { 5 },  { 6 },  { 7 },  { 8 },  { 9 },  { 10 },
	{ 11 }, { 12 }, { 13 }, { 14 }, { 15 }, { 16 }, { 17 }, { 18 }, { 19 }, { 20 }, { 21 },
	{ 22 }, { 23 }, { 24 }, { 25 }, { 26 }, { 27 }, { 28 }, { 29 }, { 30 }, { 31 },
};

static int bad(nvmlDevice_t d)
{
	return d == NULL || d < devices || d >= devices + standin_device_count();
}

NVML_API(nvmlInit_v2, void)
{
	return NVML_SUCCESS;
}

NVML_API(nvmlInit, void)
{
	return NVML_SUCCESS;
}

NVML_API(nvmlInitWithFlags, unsigned flags)
{
	(void)flags;
	return NVML_SUCCESS;
}

NVML_API(nvmlShutdown, void)
{
	return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r);
const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_INVALID_ARGUMENT:
		return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED:
		return "Not Supported (hpct stand-in)";
	case NVML_ERROR_NOT_FOUND:
		return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE:
		return "Insufficient Size";
	default:
		return "Unknown Error";
	}
}

NVML_API(nvmlDeviceGetCount_v2, unsigned *count)
{
	*count = (unsigned)standin_device_count();
	return NVML_SUCCESS;
}

NVML_API(nvmlDeviceGetCount, unsigned *count)
{
	return nvmlDeviceGetCount_v2(count);
}

NVML_API(nvmlDeviceGetHandleByIndex_v2, unsigned index, nvmlDevice_t *out)
{
	if (index >= (unsigned)standin_device_count())
		return NVML_ERROR_INVALID_ARGUMENT;
	*out = &devices[index];
	return NVML_SUCCESS;
}

NVML_API(nvmlDeviceGetHandleByIndex, unsigned index, nvmlDevice_t *out)
{
	return nvmlDeviceGetHandleByIndex_v2(index, out);
}

NVML_API(nvmlDeviceGetHandleByPciBusId_v2, const char *bus_id, nvmlDevice_t *out)
{
	int dev = standin_device_of_bus_id(bus_id);
	if (dev < 0)
		return NVML_ERROR_NOT_FOUND;
	*out = &devices[dev];
	return NVML_SUCCESS;
}

NVML_API(nvmlDeviceGetHandleByPciBusId, const char *bus_id, nvmlDevice_t *out)
{
	return nvmlDeviceGetHandleByPciBusId_v2(bus_id, out);
}

/* "GPU-" and the UUID of standin_uuid() in the usual 8-4-4-4-12 form. */
static void uuid_text(int dev, char *out, size_t len)
{
	unsigned char u[16];
	standin_uuid(dev, u);
	snprintf(out, len,
	         "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
	         u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
	         u[14], u[15]);
}

NVML_API(nvmlDeviceGetHandleByUUID, const char *uuid, nvmlDevice_t *out)
{
	char text[80];
	for (int dev = 0; dev < standin_device_count(); dev++) {
		uuid_text(dev, text, sizeof(text));
		if (strcasecmp(text, uuid) == 0) {
			*out = &devices[dev];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

NVML_API(nvmlDeviceGetIndex, nvmlDevice_t d, unsigned *index)
{
	if (bad(d))
		return NVML_ERROR_INVALID_ARGUMENT;
	*index = (unsigned)d->index;
	return NVML_SUCCESS;
}

NVML_API(nvmlDeviceGetMinorNumber, nvmlDevice_t d, unsigned *minor)
{
	return nvmlDeviceGetIndex(d, minor);
}

NVML_API(nvmlDeviceGetUUID, nvmlDevice_t d, char *uuid, unsigned len)
{
	if (bad(d))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (len < 41)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	uuid_text(d->index, uuid, len);
	return NVML_SUCCESS;
}

NVML_API(nvmlDeviceGetName, nvmlDevice_t d, char *name, unsigned len)
{
	if (bad(d) || len == 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	snprintf(name, len, "%s", STANDIN_NAME);
	return NVML_SUCCESS;
}

NVML_API(nvmlDeviceGetCudaComputeCapability, nvmlDevice_t d, int *major, int *minor)
{
	if (bad(d))
		return NVML_ERROR_INVALID_ARGUMENT;
	*major = 9;
	*minor = 0;
	return NVML_SUCCESS;
}

/* nvmlPciInfo_t: the legacy 16-byte bus id, five ids, then the 32-byte bus
 * id.  NCCL's private copy of the struct is 52 bytes long, not 68, so only
 * what both layouts hold is written: the bus id's first 16 bytes suffice. */
struct pci_info {
	char bus_id_legacy[16];
	unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
	char bus_id[16];
};

NVML_API(nvmlDeviceGetPciInfo_v3, nvmlDevice_t d, struct pci_info *pci)
{
	if (bad(d))
		return NVML_ERROR_INVALID_ARGUMENT;
	struct pci_info p = {
		.bus = (unsigned)standin_pci_bus(d->index),
		.pci_device_id = 0x233010de, /* H100 SXM, NVIDIA */
		.pci_subsystem_id = 0x16c110de,
	};
	standin_bus_id(d->index, p.bus_id_legacy, sizeof(p.bus_id_legacy));
	standin_bus_id(d->index, p.bus_id, sizeof(p.bus_id));
	memcpy(pci, &p, sizeof(p));
	return NVML_SUCCESS;
}

NVML_API(nvmlDeviceGetPciInfo_v2, nvmlDevice_t d, struct pci_info *pci)
{
	return nvmlDeviceGetPciInfo_v3(d, pci);
}

NVML_API(nvmlDeviceGetPciInfo, nvmlDevice_t d, struct pci_info *pci)
{
	return nvmlDeviceGetPciInfo_v3(d, pci);
}

/* nvmlPciInfoExt_t: its size is in the low 24 bits of its version; the
 * bus id fills whatever the caller's copy has room for. */
NVML_API(nvmlDeviceGetPciInfoExt, nvmlDevice_t d, unsigned *ext)
{
	if (bad(d))
		return NVML_ERROR_INVALID_ARGUMENT;
	size_t size = ext[0] & 0xffffff;
	if (size < 8 * sizeof(unsigned) + 13)
		return NVML_ERROR_INVALID_ARGUMENT;
	ext[1] = 0;
	ext[2] = (unsigned)standin_pci_bus(d->index);
	ext[3] = 0;
	ext[4] = 0x233010de;
	ext[5] = 0x16c110de;
	ext[6] = 0x03; /* display controller */
	ext[7] = 0x02; /* 3D controller */
	standin_bus_id(d->index, (char *)&ext[8], size - 8 * sizeof(unsigned));
	return NVML_SUCCESS;
}

NVML_API(nvmlDeviceGetP2PStatus, nvmlDevice_t a, nvmlDevice_t b, int index, int *status)
{
	(void)index;
	if (bad(a) || bad(b))
		return NVML_ERROR_INVALID_ARGUMENT;
	*status = a == b ? 0 : 5; /* OK with itself, else NVML_P2P_STATUS_NOT_SUPPORTED */
	return NVML_SUCCESS;
}

NVML_API(nvmlDeviceGetNvLinkState, nvmlDevice_t d, unsigned link, int *active)
{
	(void)d;
	(void)link;
	(void)active;
	return NVML_ERROR_NOT_SUPPORTED;
}

NVML_API(nvmlDeviceGetNvLinkCapability, nvmlDevice_t d, unsigned link, int cap, unsigned *result)
{
	(void)d;
	(void)link;
	(void)cap;
	(void)result;
	return NVML_ERROR_NOT_SUPPORTED;
}

NVML_API(nvmlDeviceGetNvLinkRemotePciInfo_v2, nvmlDevice_t d, unsigned link, void *pci)
{
	(void)d;
	(void)link;
	(void)pci;
	return NVML_ERROR_NOT_SUPPORTED;
}

NVML_API(nvmlDeviceGetNvLinkRemotePciInfo, nvmlDevice_t d, unsigned link, void *pci)
{
	return nvmlDeviceGetNvLinkRemotePciInfo_v2(d, link, pci);
}

NVML_API(nvmlDeviceGetNvLinkRemoteDeviceType, nvmlDevice_t d, unsigned link, int *type)
{
	(void)d;
	(void)link;
	(void)type;
	return NVML_ERROR_NOT_SUPPORTED;
}

/* nvmlFieldValue_t: every field is answered "not supported", the call
 * itself succeeds (as the driver does for fields a GPU lacks). */
struct field_value {
	unsigned field_id, scope_id;
	long long timestamp, latency_usec;
	int value_type, nvml_return;
	unsigned long long value;
};

NVML_API(nvmlDeviceGetFieldValues, nvmlDevice_t d, int n, struct field_value *values)
{
	if (bad(d))
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < n; i++) {
		values[i].nvml_return = NVML_ERROR_NOT_SUPPORTED;
		values[i].value = 0;
	}
	return NVML_SUCCESS;
}

NVML_API(nvmlDeviceGetGpuFabricInfoV, nvmlDevice_t d, void *info)
{
	(void)d;
	(void)info;
	return NVML_ERROR_NOT_SUPPORTED;
}

NVML_API(nvmlDeviceGetGpuFabricInfo, nvmlDevice_t d, void *info)
{
	return nvmlDeviceGetGpuFabricInfoV(d, info);
}

NVML_API(nvmlDeviceGetPlatformInfo, nvmlDevice_t d, void *info)
{
	(void)d;
	(void)info;
	return NVML_ERROR_NOT_SUPPORTED;
}

NVML_API(nvmlDeviceGetMemoryErrorCounter, nvmlDevice_t d, int type, int counter, int location,
         unsigned long long *count)
{
	(void)d;
	(void)type;
	(void)counter;
	(void)location;
	(void)count;
	return NVML_ERROR_NOT_SUPPORTED;
}

/* Confidential computing: off.  _Settings is {version, environment,
 * ccFeature, devToolsMode, multiGpuMode}, _State the same without version. */
NVML_API(nvmlSystemGetConfComputeSettings, unsigned *settings)
{
	memset(settings + 1, 0, 4 * sizeof(unsigned));
	return NVML_SUCCESS;
}

NVML_API(nvmlSystemGetConfComputeState, unsigned *state)
{
	memset(state, 0, 3 * sizeof(unsigned));
	return NVML_SUCCESS;
}

NVML_API(nvmlDeviceGetCurrPcieLinkGeneration, nvmlDevice_t d, unsigned *gen)
{
	if (bad(d))
		return NVML_ERROR_INVALID_ARGUMENT;
	*gen = 5;
	return NVML_SUCCESS;
}

NVML_API(nvmlDeviceGetMaxPcieLinkGeneration, nvmlDevice_t d, unsigned *gen)
{
	return nvmlDeviceGetCurrPcieLinkGeneration(d, gen);
}

NVML_API(nvmlDeviceGetCurrPcieLinkWidth, nvmlDevice_t d, unsigned *width)
{
	if (bad(d))
		return NVML_ERROR_INVALID_ARGUMENT;
	*width = 16;
	return NVML_SUCCESS;
}

NVML_API(nvmlDeviceGetMaxPcieLinkWidth, nvmlDevice_t d, unsigned *width)
{
	return nvmlDeviceGetCurrPcieLinkWidth(d, width);
}

NVML_API(nvmlDeviceGetPcieLinkMaxSpeed, nvmlDevice_t d, unsigned *mbps)
{
	if (bad(d))
		return NVML_ERROR_INVALID_ARGUMENT;
	*mbps = 32000;
	return NVML_SUCCESS;
}

/* nvmlMemory_t {total, free, used} */
NVML_API(nvmlDeviceGetMemoryInfo, nvmlDevice_t d, unsigned long long *memory)
{
	if (bad(d))
		return NVML_ERROR_INVALID_ARGUMENT;
	memory[0] = STANDIN_TOTAL_MEM;
	memory[1] = STANDIN_TOTAL_MEM;
	memory[2] = 0;
	return NVML_SUCCESS;
}

NVML_API(nvmlSystemGetDriverVersion, char *version, unsigned len)
{
	if (len == 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	snprintf(version, len, "580.0.0-hpct-standin");
	return NVML_SUCCESS;
}

/* The CUDA version the driver offers; HPCT_STANDIN_DRIVER_VERSION if set. */
NVML_API(nvmlSystemGetCudaDriverVersion_v2, int *version)
{
	const char *s = getenv("HPCT_STANDIN_DRIVER_VERSION");
	*version = s != NULL ? atoi(s) : 13000;
	return NVML_SUCCESS;
}

NVML_API(nvmlSystemGetCudaDriverVersion, int *version)
{
	return nvmlSystemGetCudaDriverVersion_v2(version);
}
