// The Gloo TCP device, and the error helpers every binding file uses.
#include <arpa/inet.h>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

#include <gloo/transport/tcp/device.h>

#include "bootstrap/gloo/gloo_internal.hpp"

extern "C" {
#include "bootstrap/base/log.h"
#include "bootstrap/world_access.h"
}

namespace hpct_gloo
{

int fail_plain(int err, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return hpct__fail(err, HPCT_SUB_COLL, "%s", msg);
}

// Gloo prints a port as the raw network-order number: match both forms.
static bool mentions(const std::string &what, const hpct_gloo_peer &p)
{
	if (p.ip.empty())
		return false;
	std::string at = "[" + p.ip + "]";
	if (p.port == 0) // address unknown (a cloned context): the IP alone
		return what.find(at) != std::string::npos;
	for (unsigned base : { p.port, p.sport }) {
		if (base == 0)
			continue;
		for (unsigned port : { base, (unsigned)htons((uint16_t)base) })
			if (what.find(at + ":" + std::to_string(port)) != std::string::npos)
				return true;
	}
	return false;
}

int fail(hpct_gloo_context *c, const char *op, const std::exception &e)
{
	std::string what = e.what();
	const hpct_gloo_peer *culprit = nullptr;
	int matches = 0;
	for (const auto &p : c->peers) {
		if (mentions(what, p)) {
			culprit = &p;
			matches++;
		}
	}
	int err = what.find("imed out") != std::string::npos ? HPCT_ETIMEDOUT : HPCT_EPEERDEAD;
	c->failed = err;
	char who[160] = "";
	if (matches == 1)
		snprintf(who, sizeof(who), "rank %d at %s:%u: ", culprit->world_rank,
		         culprit->ip.c_str(), culprit->port);
	char mine[700];
	snprintf(mine, sizeof(mine),
	         "rank %d: Gloo %s on context of group %016llx (epoch %llu) failed: %s%s",
	         c->world_rank, op, (unsigned long long)c->group, (unsigned long long)c->epoch, who,
	         what.c_str());
	// A peer that closed on us may have died, or failed first and closed
	// its pairs: listen briefly for a cause another rank already knows;
	// hearing none, this rank is the first to know, and tells the others.
	char cause[600];
	double wait = (double)c->timeout.count() / 10000.0;
	bool learned = false;
	if (c->device && c->device->world)
		learned = hpct__world_learn_failure(c->device->world, c->group,
		                                    wait < 0.5 ? wait : 0.5, cause,
		                                    sizeof(cause)) == 1;
	if (!learned && c->device && c->device->world)
		hpct__world_tell_failure(c->device->world, c->group, mine);
	// Closing our pairs fails the ranks that wait on us at once, instead
	// of at their deadline; the context is unusable anyway.  A persistent
	// one's pairs are what a recovery keeps: only the culprit's closes.
	try {
		if (c->ctx && !c->domain)
			c->ctx->closeConnections();
		else if (c->ctx && matches == 1)
			c->ctx->getPair((int)(culprit - c->peers.data()))->close();
	} catch (const std::exception &) {
	}
	if (learned)
		return fail_plain(err, "%s; the first failure: %s", mine, cause);
	return fail_plain(err, "%s", mine);
}

} // namespace hpct_gloo

extern "C" HPCT_API int hpct_gloo_device_create(hpct_world *world, hpct_gloo_device **device_out)
{
	if (!world || !device_out)
		return hpct_gloo::fail_plain(HPCT_EINVAL, "hpct_gloo_device_create: NULL argument");
	struct hpct_world_info info;
	hpct_world_get_info(world, &info);
	char host[64] = "";
	int rc = hpct__world_node_host(world, info.rank, host, sizeof(host));
	if (rc < 0 && rc != HPCT_ESTATE)
		return rc; // logged where it failed to resolve
	const hpct_gloo::ConnectWay *way;
	if ((rc = hpct_gloo::choose_way(info.rank, info.path, &way)) != 0)
		return rc; // logged naming the variable
	gloo::transport::tcp::attr attr;
	// Bound where peers derive it: this node's address from the node list.
	// Without a node list (standard path only), Gloo's own choice.
	if (host[0])
		attr.hostname = host;
	auto *d = new (std::nothrow) hpct_gloo_device;
	if (!d)
		return HPCT_ENOMEM;
	try {
		d->dev = gloo::transport::tcp::CreateDevice(attr);
	} catch (const std::exception &e) {
		delete d;
		return hpct_gloo::fail_plain(
		        HPCT_ERESOLVE, "rank %d: cannot create a Gloo TCP device on %s: %s",
		        info.rank, host[0] ? host : "this host's name", e.what());
	}
	d->world = world;
	d->host = host;
	d->world_rank = info.rank;
	d->timeout_s = hpct__world_timeout(world);
	d->path = info.path;
	d->way = way;
	*device_out = d;
	return 0;
}

extern "C" HPCT_API void hpct_gloo_device_destroy(hpct_gloo_device *device)
{
	if (device)
		for (auto &d : device->domains)
			hpct_gloo::release_domain(*d.second);
	delete device; // the last shared_ptr to Gloo's device stops its loop
}
