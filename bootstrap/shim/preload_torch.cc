// libhpct_torch.so: c10d::TCPStore for the torch these headers came from
// (Debian's 1.13), backed by hpct's rootless store: no server on
// MASTER_PORT, no root; every key lives on a home rank chosen by hash.
// libhpct_preload.so loads this library (RTLD_GLOBAL, before torch) only
// in a rank process with HPCT_USE_ROOTLESS=1 whose torch matches; its
// definitions then win over libtorch's for every TCPStore member.
//
// Keys of one TCPStore live in a namespace of (job, epoch, host, port,
// incarnation): the n-th TCPStore a rank makes for a host:port sees only
// what the n-th of every other rank sets, so an init_process_group after
// destroy_process_group never meets the last one's keys.
//
// PyTorch's store-based barrier after init_process_group and new_group
// (add(".../store_based_barrier_key:N", 1), then add(..., 0) polled every
// 10 ms until it reads the world size) becomes one hpct barrier.
//
// ProcessGroupGloo's contexts connect through hpct's Gloo path instead of
// gloo::rendezvous::Context::connectFullMesh (which libtorch imports from
// libgloo.so.0, so the definition here wins): no address blob per rank
// through the store, pairs connected in parallel.  A subgroup's members
// learn each other's world ranks through the store (4 bytes each).
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

// defined here for libtorch to find: visible, unlike the rest (-fvisibility=hidden)
#pragma GCC visibility push(default)
#include <gloo/rendezvous/context.h>
#pragma GCC visibility pop
#include <gloo/rendezvous/store.h>

#include "bootstrap/gloo/gloo_private.hpp"
#include "bootstrap/store/store.h"
#include "bootstrap/world_access.h"
#include "hpct/gloo.h"
#include "hpct/hpct.h"

extern "C" hpct_world *hpct_preload_world(void);               // libhpct_preload.so
extern "C" uint64_t hpct__hash_u64(uint64_t seed, uint64_t v); // libhpct, private

namespace c10d
{
namespace detail
{

// Where libtorch keeps its server, this library keeps the rootless
// store's handle (libtorch's own TCPServer is never made here).
class TCPServer
{
      public:
	explicit TCPServer(hpct_store *s) : store(s)
	{
	}
	~TCPServer()
	{
		hpct__store_close(store);
	}
	TCPServer(const TCPServer &) = delete;
	TCPServer &operator=(const TCPServer &) = delete;

	hpct_store *store;
	hpct_world *world = nullptr;
	std::mutex mu;
	std::set<std::string> barriers_done; // store-based barriers passed
};

class TCPClient
{
};
class TCPCallbackClient
{
};

} // namespace detail

namespace
{

[[noreturn]] void fail(const char *op, int rc)
{
	const char *why = hpct_last_error();
	throw std::runtime_error(std::string("hpct rootless store: ") + op + ": " +
	                         (why && *why ? why : hpct_strerror(rc)));
}

double seconds(const std::chrono::milliseconds &t)
{
	return t.count() <= 0 ? -1.0 : (double)t.count() / 1000.0;
}

// "store_based_barrier_key:N" at the end of a (prefixed) key.
bool is_barrier_key(const std::string &key)
{
	static const std::string tag = "store_based_barrier_key:";
	size_t at = key.rfind(tag);
	if (at == std::string::npos || (at > 0 && key[at - 1] != '/'))
		return false;
	size_t i = at + tag.size();
	if (i == key.size())
		return false;
	for (; i < key.size(); i++)
		if (key[i] < '0' || key[i] > '9')
			return false;
	return true;
}

std::mutex incarnation_mu;
std::map<std::string, uint64_t> incarnations; // host:port -> stores made

} // namespace

TCPStore::TCPStore(std::string host, const TCPStoreOptions &opts)
    : Store{ opts.timeout }, addr_{ std::move(host) }, numWorkers_{ opts.numWorkers }
{
	addr_.port = opts.port;
	hpct_world *w = hpct_preload_world();
	if (!w)
		fail("no hpct world in this rank", HPCT_ESTATE);
	struct hpct_world_info info;
	hpct_world_get_info(w, &info);
	uint64_t n;
	std::string where = addr_.host + ":" + std::to_string(addr_.port);
	{
		std::lock_guard<std::mutex> g(incarnation_mu);
		n = incarnations[where]++;
	}
	uint64_t ns = hpct__hash_u64(hpct__hash_u64(info.job, info.epoch), n);
	for (char ch : where)
		ns = hpct__hash_u64(ns, (unsigned char)ch);
	hpct_store *s = nullptr;
	int rc = hpct__store_open(w, ns, seconds(timeout_), &s);
	if (rc)
		fail("open", rc);
	server_ = std::make_shared<detail::TCPServer>(s);
	server_->world = w;
}

TCPStore::TCPStore(const std::string &masterAddr, std::uint16_t masterPort,
                   c10::optional<int> numWorkers, bool isServer,
                   const std::chrono::milliseconds &timeout, bool waitWorkers)
    : TCPStore{ masterAddr, TCPStoreOptions{ masterPort, isServer,
	                                     numWorkers ? c10::optional<std::size_t>(*numWorkers)
	                                                : c10::nullopt,
	                                     waitWorkers, timeout } }
{
}

TCPStore::~TCPStore() = default;

void TCPStore::waitForWorkers()
{
	// every rank serves its own keys: there is no server to wait at
}

void TCPStore::set(const std::string &key, const std::vector<uint8_t> &value)
{
	int rc = hpct__store_set(server_->store, key.c_str(), value.data(), value.size());
	if (rc)
		fail("set", rc);
}

std::vector<uint8_t> TCPStore::compareSet(const std::string &key,
                                          const std::vector<uint8_t> &expectedValue,
                                          const std::vector<uint8_t> &desiredValue)
{
	void *v = nullptr;
	size_t len = 0;
	int rc = hpct__store_cas(server_->store, key.c_str(), expectedValue.data(),
	                         expectedValue.size(), desiredValue.data(), desiredValue.size(), &v,
	                         &len);
	if (rc)
		fail("compare_set", rc);
	std::vector<uint8_t> out((uint8_t *)v, (uint8_t *)v + len);
	free(v);
	return out;
}

std::vector<uint8_t> TCPStore::doGet(const std::string &key)
{
	void *v = nullptr;
	size_t len = 0;
	int rc = hpct__store_get(server_->store, key.c_str(), seconds(timeout_), &v, &len);
	if (rc)
		fail("get", rc);
	std::vector<uint8_t> out((uint8_t *)v, (uint8_t *)v + len);
	free(v);
	return out;
}

std::vector<uint8_t> TCPStore::get(const std::string &key)
{
	return doGet(key);
}

int64_t TCPStore::incrementValueBy(const std::string &key, int64_t delta)
{
	int64_t v = 0;
	int rc = hpct__store_add(server_->store, key.c_str(), delta, &v);
	if (rc)
		fail("add", rc);
	return v;
}

int64_t TCPStore::add(const std::string &key, int64_t value)
{
	if (is_barrier_key(key) && (value == 0 || value == 1)) {
		detail::TCPServer &sv = *server_;
		struct hpct_world_info info;
		hpct_world_get_info(sv.world, &info);
		std::lock_guard<std::mutex> g(sv.mu);
		if (value == 1 && !sv.barriers_done.count(key)) {
			int rc = hpct_barrier(hpct_world_group(sv.world));
			if (rc)
				fail(("barrier for " + key).c_str(), rc);
			sv.barriers_done.insert(key);
		}
		if (sv.barriers_done.count(key))
			return info.size; // every rank has checked in
	}
	return incrementValueBy(key, value);
}

bool TCPStore::deleteKey(const std::string &key)
{
	int existed = 0;
	int rc = hpct__store_delete(server_->store, key.c_str(), &existed);
	if (rc)
		fail("delete_key", rc);
	return existed != 0;
}

void TCPStore::watchKey(const std::string &key, WatchKeyCallback callback)
{
	(void)callback;
	throw std::runtime_error("hpct rootless store: watchKey('" + key +
	                         "') is not offered (no server to watch at); run with "
	                         "HPCT_USE_ROOTLESS=0 for PyTorch's own TCPStore");
}

bool TCPStore::check(const std::vector<std::string> &keys)
{
	std::vector<const char *> k;
	for (const auto &s : keys)
		k.push_back(s.c_str());
	int all = 0;
	int rc = hpct__store_check(server_->store, k.data(), (int)k.size(), &all);
	if (rc)
		fail("check", rc);
	return all != 0;
}

int64_t TCPStore::getNumKeys()
{
	int64_t n = 0;
	int rc = hpct__store_num_keys(server_->store, &n);
	if (rc)
		fail("num_keys", rc);
	return n;
}

void TCPStore::doWait(c10::ArrayRef<std::string> keys, std::chrono::milliseconds timeout)
{
	std::vector<const char *> k;
	for (const auto &s : keys)
		k.push_back(s.c_str());
	int rc = hpct__store_wait(server_->store, k.data(), (int)k.size(), seconds(timeout));
	if (rc)
		fail("wait", rc);
}

void TCPStore::wait(const std::vector<std::string> &keys)
{
	doWait(keys, timeout_);
}

void TCPStore::wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout)
{
	doWait(keys, timeout);
}

} // namespace c10d

namespace
{

std::mutex gloo_mu;
hpct_gloo_device *gloo_device;                  // one per process
std::map<std::vector<int>, uint64_t> gloo_made; // contexts per member set

[[noreturn]] void gloo_fail(const std::string &what, int rc)
{
	const char *why = hpct_last_error();
	throw std::runtime_error("hpct Gloo connect: " + what + ": " +
	                         (why && *why ? why : hpct_strerror(rc)));
}

} // namespace

void gloo::rendezvous::Context::connectFullMesh(gloo::rendezvous::Store &store,
                                                std::shared_ptr<gloo::transport::Device> &dev)
{
	(void)dev; // hpct's device listens where the derivation says
	hpct_world *w = hpct_preload_world();
	if (!w)
		gloo_fail("no hpct world in this rank", HPCT_ESTATE);
	struct hpct_world_info info;
	hpct_world_get_info(w, &info);
	// the members' world ranks: the world's own, else told through the store
	std::vector<int> members((size_t)size);
	if (size == info.size) {
		for (int i = 0; i < size; i++)
			members[(size_t)i] = i;
		if (rank != info.rank)
			gloo_fail("context rank " + std::to_string(rank) + " of " +
			                  std::to_string(size) + " is not world rank " +
			                  std::to_string(info.rank),
			          HPCT_EINVAL);
	} else {
		std::string me = std::to_string(info.rank);
		store.set("hpct_world_rank/" + std::to_string(rank),
		          std::vector<char>(me.begin(), me.end()));
		for (int i = 0; i < size; i++) {
			std::vector<char> v = store.get("hpct_world_rank/" + std::to_string(i));
			members[(size_t)i] = std::stoi(std::string(v.begin(), v.end()));
		}
		if (!std::is_sorted(members.begin(), members.end()))
			gloo_fail("members' world ranks are not in order", HPCT_EINVAL);
	}
	uint64_t key;
	{
		std::lock_guard<std::mutex> g(gloo_mu);
		if (!gloo_device) {
			int rc = hpct_gloo_device_create(w, &gloo_device);
			if (rc)
				gloo_fail("device", rc);
		}
		key = gloo_made[members]++;
	}
	hpct_group *grp = nullptr;
	int rc = hpct__group_create_keyed(hpct_world_group(w), key, members.data(), size, &grp);
	if (rc || !grp)
		gloo_fail("group of " + std::to_string(size) + " ranks", rc ? rc : HPCT_ENOTMEMBER);
	hpct_gloo_context *c = nullptr;
	rc = hpct_gloo_context_create(gloo_device, grp, &c);
	hpct_group_destroy(grp);
	if (rc)
		gloo_fail("context of " + std::to_string(size) + " ranks", rc);
	std::shared_ptr<gloo::transport::Device> d;
	std::shared_ptr<gloo::transport::Context> t;
	hpct__gloo_context_parts(c, &d, &t);
	hpct_gloo_context_destroy(c);
	device_ = std::move(d);
	transportContext_ = std::move(t);
}
