// Gloo contexts behind the C API: created over a group (connected by one of
// the ways pool.cc and fullmesh.cc implement, as HPCT_GLOO_CONNECT says),
// cloned through Gloo's ContextFactory, torn down with their pairs closed
// from a pool of threads.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>

#include "bootstrap/gloo/gloo_internal.hpp"
#include "bootstrap/gloo/gloo_private.hpp"

extern "C" {
#include "bootstrap/base/log.h"
#include "bootstrap/world_access.h"
}

// One way to connect a context's pairs, named by HPCT_GLOO_CONNECT.
struct hpct_gloo::ConnectWay {
	const char *name;
	bool needs_store;          // runs over the standard path's store only
	enum hpct_path default_on; // the path it serves when the variable is unset
	int (*connect)(hpct_gloo_context *c, hpct_group *g, unsigned index);
};

namespace
{

// pool: hpct's exchange and a pool of threads, on either path; the
// rootless default, its only way (no store to run Gloo's over).  fullmesh:
// Gloo's own connectFullMesh over rank 0's store, what a PyTorch job gets
// on the standard path, so its default there.
const hpct_gloo::ConnectWay kWays[] = {
	{ "pool", false, HPCT_PATH_ROOTLESS, hpct_gloo::connect_pool },
	{ "fullmesh", true, HPCT_PATH_STANDARD, hpct_gloo::connect_fullmesh },
};

using hpct_gloo::kConnectThreads;

} // namespace

using hpct_gloo::close_pairs;
using hpct_gloo::meet;
using hpct_gloo::new_context;

hpct_gloo_context *hpct_gloo::new_context(hpct_gloo_device *d, uint64_t group, int size)
{
	auto *c = new (std::nothrow) hpct_gloo_context;
	if (!c)
		return nullptr;
	struct hpct_world_info info;
	hpct_world_get_info(d->world, &info);
	c->device = d;
	c->group = group;
	c->epoch = info.epoch;
	c->world_rank = d->world_rank;
	c->timeout = std::chrono::milliseconds((long long)(d->timeout_s * 1000));
	c->peers.resize((size_t)size);
	return c;
}

// Every way ends here.  A rank returns from connecting once its own ends of
// the pairs are up, maybe before a peer's event loop accepted the last
// one; if it then destroyed its context at once, that pair would be reset
// under the peer, whose create fails ("Connection reset by peer"; seen with
// both ways, and Gloo's loop thread can even abort the process, throwing
// from getpeername on the reset socket).  So every rank waits until all
// are connected: one barrier over the new pairs, as PyTorch meets at its
// store after Gloo's init.  The same for every way, so that none is timed
// without it.
int hpct_gloo::meet(hpct_gloo_context *c)
{
	try {
		gloo::BarrierOptions b(c->ctx);
		b.setTimeout(c->timeout);
		gloo::barrier(b);
	} catch (const std::exception &e) {
		return hpct_gloo::fail(c, "barrier after connecting", e);
	}
	return 0;
}


int hpct_gloo::choose_way(int world_rank, enum hpct_path path, const ConnectWay **way_out)
{
	const char *v = std::getenv("HPCT_GLOO_CONNECT");
	bool named = v && *v; // else the path's default
	for (const auto &w : kWays) {
		if (named ? std::strcmp(v, w.name) != 0 : w.default_on != path)
			continue;
		if (w.needs_store && path == HPCT_PATH_ROOTLESS)
			return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
			                  "rank %d: HPCT_GLOO_CONNECT=%s runs over the standard "
			                  "path's store on rank 0, and this world is rootless "
			                  "(HPCT_USE_ROOTLESS=1): use pool",
			                  world_rank, v);
		*way_out = &w;
		return 0;
	}
	return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
	                  "rank %d: HPCT_GLOO_CONNECT=%s is not a way to connect Gloo pairs "
	                  "(want pool or fullmesh)",
	                  world_rank, v ? v : "");
}

extern "C" HPCT_API int hpct_gloo_context_create(hpct_gloo_device *device, hpct_group *group,
                                                 hpct_gloo_context **context_out)
{
	if (!device || !group || !context_out)
		return hpct_gloo::fail_plain(HPCT_EINVAL,
		                             "hpct_gloo_context_create: NULL argument");
	uint64_t gid = hpct_group_id(group);
	hpct_gloo_context *c = new_context(device, gid, hpct_group_size(group));
	if (!c)
		return HPCT_ENOMEM;
	unsigned index;
	{
		std::lock_guard<std::mutex> lk(device->lock);
		index = device->made[gid]++;
	}
	int rc;
	try {
		rc = device->way->connect(c, group, index);
	} catch (const std::exception &e) {
		rc = hpct_gloo::fail(c, "context creation", e);
	}
	if (rc == 0)
		rc = meet(c);
	if (rc) {
		delete c;
		return rc;
	}
	*context_out = c;
	return 0;
}

extern "C" HPCT_API int hpct_gloo_context_clone(hpct_gloo_context *parent,
                                                hpct_gloo_context **context_out)
{
	if (!parent || !context_out)
		return hpct_gloo::fail_plain(HPCT_EINVAL, "hpct_gloo_context_clone: NULL argument");
	if (parent->failed)
		return hpct_gloo::fail_plain(HPCT_ESTATE,
		                             "rank %d: cannot clone a failed Gloo context",
		                             parent->world_rank);
	hpct_gloo_context *c = new_context(parent->device, parent->group, parent->ctx->size);
	if (!c)
		return HPCT_ENOMEM;
	// The new pairs' ports travel over the parent's pairs, unseen by us:
	// errors can name a peer by its address's IP only.
	for (size_t i = 0; i < c->peers.size(); i++)
		c->peers[i] = { parent->peers[i].world_rank, parent->peers[i].ip, 0, 0, {} };
	try {
		gloo::rendezvous::ContextFactory factory(parent->ctx);
		c->ctx = factory.makeContext(parent->device->dev);
		c->ctx->setTimeout(c->timeout);
		// A rank can leave makeContext while peers still read from the
		// parent's pairs; closing the parent then would break them.  Meet
		// on the new context first: after that the parent is not needed.
		gloo::BarrierOptions b(c->ctx);
		b.setTimeout(c->timeout);
		gloo::barrier(b);
	} catch (const std::exception &e) {
		int rc = hpct_gloo::fail(c, "context clone", e);
		delete c;
		return rc;
	}
	*context_out = c;
	return 0;
}

extern "C" HPCT_PRIVATE void
hpct__gloo_context_parts(hpct_gloo_context *c, std::shared_ptr<gloo::transport::Device> *dev,
                         std::shared_ptr<gloo::transport::Context> *tctx)
{
	// made by hpct_gloo_context_create: an hpct_gloo::Context
	auto own = std::static_pointer_cast<hpct_gloo::Context>(c->ctx);
	*dev = c->device->dev;
	if (c->domain) {
		// a persistent context's pairs outlive PyTorch's context: its
		// last reference gives the handle, and so the domain, back
		std::shared_ptr<gloo::transport::Context> keep = own->transport();
		*tctx = std::shared_ptr<gloo::transport::Context>(
		        keep.get(), [keep, c](gloo::transport::Context *) mutable {
			        hpct_gloo_context_destroy(c);
			        keep.reset();
		        });
		return;
	}
	// PyTorch's context gets the pairs, and its destructor would close them
	// one tick of Gloo's loop after another: the last reference closes them
	// from the pool first, then lets the transport context go
	std::shared_ptr<gloo::transport::Context> keep = own->transport();
	*tctx = std::shared_ptr<gloo::transport::Context>(
	        keep.get(), [keep](gloo::transport::Context *t) mutable {
		        close_pairs(*t);
		        keep.reset();
	        });
	c->pairs_given = true; // someone else's to close now
}

extern "C" HPCT_API void hpct_gloo_context_destroy(hpct_gloo_context *context)
{
	if (context && context->domain) {
		hpct_gloo::park(context); // its pairs stay, for the next one
		delete context;
		return;
	}
	if (context && context->ctx && context->ctx.use_count() == 1 && !context->pairs_given)
		close_pairs(*context->ctx); // nobody else holds them
	delete context;                     // the pairs go with the last reference to them
}

extern "C" HPCT_API int hpct_gloo_context_rank(const hpct_gloo_context *context)
{
	return context ? context->ctx->rank : -1;
}

extern "C" HPCT_API int hpct_gloo_context_size(const hpct_gloo_context *context)
{
	return context ? context->ctx->size : 0;
}
