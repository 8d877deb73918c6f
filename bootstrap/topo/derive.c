#include "bootstrap/topo/derive.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "hpct/hpct.h"

int hpct__derive_window(const struct hpct_topo *t, uint64_t epoch)
{
	int per = t->max_local > 0 ? t->max_local : 1;
	uint64_t windows = (uint64_t)((t->port_range - t->port_kept) / per);
	if (windows < 1)
		windows = 1;
	/* Slurm's epochs carry the requeue count above bit 32: folded in, so
	 * that a requeue moves the window too */
	uint64_t e = epoch + (epoch >> 32);
	return (int)((t->job % windows + e % windows) % windows);
}

int hpct__derive_port(const struct hpct_topo *t, int rank)
{
	if (t->port_of && t->port_of[rank] > 0)
		return t->port_of[rank];
	if (t->agents)
		return t->port_base + t->port_range - 1;
	int per = t->max_local > 0 ? t->max_local : 1;
	int local = t->local_of ? t->local_of[rank] : 0;
	return t->port_base + hpct__derive_window(t, t->epoch) * per + local;
}

uint64_t hpct__derive_world_group(uint64_t job, uint64_t epoch, int size)
{
	uint64_t h = hpct__hash_u64(job, epoch);
	return hpct__hash_u64(h, (uint64_t)size) | 1; /* never 0 */
}

uint64_t hpct__derive_group(uint64_t job, uint64_t epoch, uint64_t parent, uint64_t counter,
                            const int *members, int n)
{
	uint64_t h = hpct__hash_u64(job, epoch);
	h = hpct__hash_u64(h, parent);
	h = hpct__hash_u64(h, counter);
	for (int i = 0; i < n; i++)
		h = hpct__hash_u64(h, (uint64_t)members[i]);
	return h | 1;
}

static int name_matches(const char *spec, const char *name)
{
	int exclude = spec[0] == '^';
	const char *p = spec + exclude;
	int exact = p[0] == '=';
	p += exact;
	int hit = 0;
	while (*p && !hit) {
		size_t len = strcspn(p, ",");
		if (len > 0)
			hit = exact ? (strlen(name) == len && strncmp(name, p, len) == 0)
			            : strncmp(name, p, len) == 0;
		p += len + (p[len] == ',');
	}
	return exclude ? !hit : hit;
}

static int same_ip(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return 0;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->sa_family == AF_INET6)
		return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		              &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
	return 0;
}

static int is_loopback(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
	if (a->sa_family == AF_INET6)
		return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)a)->sin6_addr);
	return 0;
}

int hpct__ifname_check(const char *spec, const struct sockaddr *addr)
{
	struct ifaddrs *ifs = NULL;
	if (getifaddrs(&ifs) < 0)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "HPCT_SOCKET_IFNAME=%s: cannot list interfaces", spec);
	char seen[512] = "", addrtxt[HPCT_ADDRSTRLEN];
	size_t o = 0;
	int matched = 0, holds = 0;
	for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr ||
		    (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
			continue;
		if (!strstr(seen, i->ifa_name) && o + strlen(i->ifa_name) + 3 < sizeof(seen))
			o += (size_t)snprintf(seen + o, sizeof(seen) - o, "%s%s", o ? ", " : "",
			                      i->ifa_name);
		if (!name_matches(spec, i->ifa_name))
			continue;
		matched = 1;
		/* All of 127/8 is served by lo, though only 127.0.0.1 is listed. */
		if (same_ip(i->ifa_addr, addr) ||
		    ((i->ifa_flags & IFF_LOOPBACK) && is_loopback(addr) &&
		     i->ifa_addr->sa_family == addr->sa_family))
			holds = 1;
	}
	freeifaddrs(ifs);
	hpct__addr_str(addr, addrtxt, sizeof(addrtxt));
	if (!matched)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "HPCT_SOCKET_IFNAME=%s matches no interface (have: %s)", spec,
		                  seen);
	if (!holds)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "HPCT_SOCKET_IFNAME=%s: no matching interface holds this node's "
		                  "address %s from the node list (have: %s)",
		                  spec, addrtxt, seen);
	return 0;
}
