#include "bootstrap/base/util.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/base/log.h"
#include "hpct/hpct.h"

static double monotonic(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double (*hpct__clock)(void) = monotonic;

double hpct__now(void)
{
	return hpct__clock();
}

struct timespec hpct__timespec_in(clockid_t clock, double in_s)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	double at = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + in_s;
	ts.tv_sec = (time_t)at;
	ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
	return ts;
}

static uint64_t splitmix_final(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

uint64_t hpct__hash(const void *data, size_t len, uint64_t seed)
{
	const unsigned char *p = data;
	uint64_t h = 0xcbf29ce484222325ULL ^ splitmix_final(seed + 0x9e3779b97f4a7c15ULL);
	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return splitmix_final(h ^ len);
}

uint64_t hpct__hash_u64(uint64_t seed, uint64_t v)
{
	unsigned char b[8];
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (8 * i));
	return hpct__hash(b, sizeof(b), seed);
}

void hpct__addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?";
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		snprintf(buf, len, "%s:%u", host, ntohs(in->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		snprintf(buf, len, "[%s]:%u", host, ntohs(in6->sin6_port));
	} else {
		snprintf(buf, len, "(family %d)", sa->sa_family);
	}
}

int hpct__resolve(const char *host, int port, int family, struct sockaddr_storage *out,
                  socklen_t *len_out)
{
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = family;
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(host, NULL, &hints, &res);
	if (rc != 0 || !res)
		return hpct__fail(HPCT_ERESOLVE, HPCT_SUB_NET, "cannot resolve host '%s'%s: %s",
		                  host,
		                  family == AF_INET    ? " (IPv4)"
		                  : family == AF_INET6 ? " (IPv6)"
		                                       : "",
		                  gai_strerror(rc));
	memcpy(out, res->ai_addr, res->ai_addrlen);
	*len_out = res->ai_addrlen;
	freeaddrinfo(res);
	if (out->ss_family == AF_INET)
		((struct sockaddr_in *)out)->sin_port = htons((uint16_t)port);
	else
		((struct sockaddr_in6 *)out)->sin6_port = htons((uint16_t)port);
	return 0;
}

void hpct__random(void *buf, size_t len)
{
	unsigned char *p = buf;
	size_t got = 0;
	while (got < len) {
		ssize_t n = getrandom(p + got, len - got, 0);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	for (uint64_t x = hpct__hash_u64((uint64_t)(hpct__now() * 1e9), (uint64_t)getpid());
	     got < len; got++, x = hpct__hash_u64(x, got))
		p[got] = (unsigned char)x;
}
