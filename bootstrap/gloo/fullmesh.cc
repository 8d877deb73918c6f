// Connecting a context the way stock Gloo does: connectFullMesh over a
// gloo::rendezvous::Store served by hpct's rendezvous on rank 0.
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>

#include "bootstrap/gloo/gloo_internal.hpp"

extern "C" {
#include "bootstrap/base/util.h"
#include "bootstrap/stdpath/stdpath.h"
#include "bootstrap/world_access.h"
}

namespace
{

using gloo::transport::tcp::Address;
using hpct_gloo::ip_of;
using hpct_gloo::port_of;

// gloo::rendezvous::Store over hpct's rendezvous on rank 0.  connectFullMesh
// waits for a key and then gets it: the value fetched by the wait is kept
// for the get, so each key crosses the network once.  Every peer's address
// blob passes through here, and the part meant for us is noted for errors.
class RendezvousStore : public gloo::rendezvous::Store
{
      public:
	RendezvousStore(hpct_gloo_context *c, hpct_std_client *cl, std::string prefix, int rank,
	                int size)
	    : c_(c), cl_(cl), prefix_(std::move(prefix)), rank_(rank), size_(size)
	{
	}

	// The hpct code of a store failure (already logged), 0 if none.
	int error() const
	{
		return err_;
	}

	void set(const std::string &key, const std::vector<char> &data) override
	{
		// Who reads what, in connectFullMesh: "<i>" (rank i's pair
		// addresses) by every other rank, "rank_<i>" (its host name) by
		// the ranks above i.  Keys go once read so the store drains.
		int readers = size_ - 1;
		if (key.compare(0, 5, "rank_") == 0) {
			readers = size_ - 1 - std::atoi(key.c_str() + 5);
			if (readers <= 0)
				return; // nobody reads it
		}
		std::string k = prefix_ + key;
		int rc = hpct__std_set(cl_, k.c_str(), data.data(), data.size(), readers,
		                       deadline());
		if (rc != 0)
			throw_store(rc);
	}

	std::vector<char> get(const std::string &key) override
	{
		auto it = fetched_.find(key);
		if (it != fetched_.end()) {
			auto v = std::move(it->second);
			fetched_.erase(it);
			return v;
		}
		return fetch(key);
	}

	void wait(const std::vector<std::string> &keys) override
	{
		for (const auto &k : keys)
			if (!fetched_.count(k))
				fetched_[k] = fetch(k);
	}

	void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &) override
	{
		wait(keys); // the deadline is hpct's, from HPCT_TIMEOUT
	}

      private:
	double deadline() const
	{
		return hpct__now() + (double)c_->timeout.count() / 1000.0;
	}

	std::vector<char> fetch(const std::string &key)
	{
		std::string k = prefix_ + key;
		void *val = nullptr;
		size_t len = 0;
		int rc = hpct__std_get(cl_, k.c_str(), &val, &len, deadline());
		if (rc != 0)
			throw_store(rc);
		std::vector<char> v((char *)val, (char *)val + len);
		free(val);
		note_address(key, v);
		return v;
	}

	// Key "<i>" holds rank i's pair addresses for its peers in rank order.
	void note_address(const std::string &key, const std::vector<char> &v)
	{
		char *end;
		long i = std::strtol(key.c_str(), &end, 10);
		if (*end || i < 0 || i >= size_ || i == rank_ || size_ < 2 || v.empty())
			return;
		size_t each = v.size() / (size_t)(size_ - 1);
		size_t at = (size_t)(rank_ < i ? rank_ : rank_ - 1) * each;
		if (at + each > v.size())
			return;
		try {
			Address a(std::vector<char>(v.begin() + (long)at,
			                            v.begin() + (long)(at + each)));
			auto &p = c_->peers[(size_t)i];
			p.ip = ip_of(a.getSockaddr());
			p.port = port_of(a.getSockaddr());
		} catch (const std::exception &) {
			// only for naming peers in errors
		}
	}

	[[noreturn]] void throw_store(int rc)
	{
		err_ = rc;
		throw std::runtime_error(hpct_last_error());
	}

	int err_ = 0;
	hpct_gloo_context *c_;
	hpct_std_client *cl_;
	std::string prefix_;
	int rank_, size_;
	std::map<std::string, std::vector<char>> fetched_;
};

} // namespace

int hpct_gloo::connect_fullmesh(hpct_gloo_context *c, hpct_group *g, unsigned index)
{
	hpct_gloo_device *d = c->device;
	hpct_std_client *cl = hpct__world_std_client(d->world);
	if (!cl)
		return hpct_gloo::fail_plain(HPCT_ESTATE, "rank %d: no rendezvous client",
		                             c->world_rank);
	int n = hpct_group_size(g), r = hpct_group_rank(g);
	for (int i = 0; i < n; i++)
		c->peers[i].world_rank = hpct_group_world_rank(g, i);
	char prefix[96];
	snprintf(prefix, sizeof(prefix), "gloo/e%llu/g%016llx/c%u/", (unsigned long long)c->epoch,
	         (unsigned long long)c->group, index);
	RendezvousStore store(c, cl, prefix, r, n);
	auto ctx = std::make_shared<gloo::rendezvous::Context>(r, n);
	ctx->setTimeout(c->timeout);
	try {
		ctx->connectFullMesh(store, d->dev);
	} catch (const std::exception &e) {
		if (store.error())
			return store.error(); // logged by the store client, naming the key
		return hpct_gloo::fail(c, "connectFullMesh", e);
	}
	c->pairs_new = hpct_group_size(g) - 1;
	c->ctx = std::move(ctx);
	return 0;
}
