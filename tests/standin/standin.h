/* tests/standin/standin.h: what the two stand-in libraries (libcuda.so.1 and
 * libnvidia-ml.so.1) must agree on: how many devices there are and who each
 * one is (name, UUID, PCI location).  Test-only; see README.md.
 *
 * Both libraries read the same environment, so a process sees the same
 * devices through CUDA and through NVML.  Everything here is static inline:
 * the two libraries share no code at run time. */
#ifndef HPCT_STANDIN_H
#define HPCT_STANDIN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NCCL keeps at most 32 NVML devices (ncclNvmlMaxDevices). */
#define STANDIN_MAX_DEVICES     32
#define STANDIN_DEFAULT_DEVICES 8
#define STANDIN_NAME            "HPCT stand-in GPU (no kernels run)"
#define STANDIN_TOTAL_MEM       (80ull << 30)

/* HPCT_STANDIN_DEVICES: devices reported, 1..32, default 8. */
static inline int standin_device_count(void)
{
	const char *s = getenv("HPCT_STANDIN_DEVICES");
	int n = s != NULL ? atoi(s) : STANDIN_DEFAULT_DEVICES;
	if (n < 1)
		return 1;
	return n > STANDIN_MAX_DEVICES ? STANDIN_MAX_DEVICES : n;
}

/* Bus 0x40 + dev on domain 0: buses that /sys does not hold here, so NCCL's
 * topology search finds no real node (0000:00:00.0 is a bridge). */
static inline int standin_pci_bus(int dev)
{
	return 0x40 + dev;
}

static inline void standin_bus_id(int dev, char *out, size_t len)
{
	snprintf(out, len, "0000:%02x:00.0", standin_pci_bus(dev));
}

/* "HPCT-standin" then the device index: stable across processes, so two
 * processes that name one device agree on its UUID as they would on a node. */
static inline void standin_uuid(int dev, unsigned char out[16])
{
	memcpy(out, "HPCT-standin", 12);
	out[12] = 0;
	out[13] = 0;
	out[14] = 0;
	out[15] = (unsigned char)dev;
}

/* Parses "dddd:bb:dd.f" (any number of domain digits, any case) back to a
 * device index; -1 for a bus id that is not one of ours. */
static inline int standin_device_of_bus_id(const char *bus_id)
{
	unsigned domain, bus, device, function;
	if (sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4)
		return -1;
	int dev = (int)bus - 0x40;
	if (domain != 0 || device != 0 || function != 0 || dev < 0 || dev >= standin_device_count())
		return -1;
	return dev;
}

static inline int standin_debug_level(void)
{
	const char *s = getenv("HPCT_STANDIN_DEBUG");
	return s != NULL ? atoi(s) : 0;
}

#endif
