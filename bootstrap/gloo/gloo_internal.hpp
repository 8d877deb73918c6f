// Shared by the Gloo bindings: the objects behind the C handles.
#pragma once

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/device.h>

#include "hpct/gloo.h"

namespace hpct_gloo
{
struct ConnectWay; // context.cc
struct Domain;     // domain.cc
class Context;
} // namespace hpct_gloo

struct hpct_gloo_device {
	hpct_world *world;
	std::shared_ptr<gloo::transport::Device> dev;
	std::string host; // numeric address the device binds, "" for Gloo's default
	int world_rank;
	double timeout_s;
	enum hpct_path path;              // the world's
	const hpct_gloo::ConnectWay *way; // HPCT_GLOO_CONNECT, read at creation
	// contexts made per group, so every member names its next one alike
	std::map<uint64_t, unsigned> made;
	// persistent domains (domain.cc), by member world ranks and generation
	std::map<std::pair<std::vector<int>, uint64_t>, std::unique_ptr<hpct_gloo::Domain>> domains;
	// per domain key: the epoch and how many connects it saw in it (names
	// each connect's exchange alike on every member)
	std::map<std::pair<std::vector<int>, uint64_t>, std::pair<uint64_t, unsigned>> swaps;
	std::mutex lock;
};

// Where a peer's pair listens, as we were told: for naming it in errors.
struct hpct_gloo_peer {
	int world_rank;
	std::string ip;
	unsigned port;       // host order
	unsigned sport{ 0 }; // the source port of a pair it connected to us, else 0
};

struct hpct_gloo_context {
	std::shared_ptr<gloo::Context> ctx;
	hpct_gloo_device *device;
	uint64_t group;
	uint64_t epoch;
	int world_rank;
	std::chrono::milliseconds timeout;
	std::vector<hpct_gloo_peer> peers; // by context rank; own entry empty
	int failed = 0;
	bool pairs_given = false;            // hpct__gloo_context_parts handed them on
	hpct_gloo::Domain *domain = nullptr; // persistent: the domain lent to it
	int pairs_new = 0, pairs_kept = 0;   // what its creation connected and kept
	uint64_t bytes_exchanged = 0;        // pair addresses sent and received for it
};

namespace hpct_gloo
{

// A persistent domain (domain.cc): a context's pairs kept past its handle,
// lent to the next persistent context over the same members and
// generation.  Owned by its device.
struct Domain {
	std::shared_ptr<Context> ctx;      // its gloo::Context, pairs and slot counter
	uint64_t epoch = 0;                // the world's when its pairs were last made or checked
	std::vector<hpct_gloo_peer> peers; // by context rank, as the handle had them
	hpct_gloo_context *user = nullptr; // the live handle it is lent to, if any
	bool failed = false;               // a collective failed on it since
	std::string what;                  // "members 0-7, generation 3", for messages
};

// A gloo::Context whose pairs we connect ourselves.
class Context : public gloo::Context
{
      public:
	Context(int rank, int size) : gloo::Context(rank, size)
	{
	}
	void attach(std::shared_ptr<gloo::transport::Device> dev,
	            std::shared_ptr<gloo::transport::Context> tctx)
	{
		device_ = std::move(dev);
		transportContext_ = std::move(tctx);
	}
	std::shared_ptr<gloo::transport::Context> transport() const
	{
		return transportContext_;
	}
	// Slots from `base` on: after a recovery both ends of every kept pair
	// start afresh at the same number, far from what failed collectives
	// may have left behind on them.
	void restart_slots(int base)
	{
		slot_ = base;
	}
};

// Threads that connect pairs at once: each connect waits for a tick of
// Gloo's event loop (10 ms), which a pool pays about once per 8 peers, not
// once per peer.  More threads did no better with 64 ranks on 2 cores.
// Closing pairs waits for a tick too: the same pool closes them.
constexpr int kConnectThreads = 8;

// Closing a pair waits for a tick of Gloo's event loop (10 ms; so that its
// handler cannot run after), which the destructor pays pair after pair:
// 63 ticks for a context of 64.  Pairs closed from a pool of threads wait
// for about one tick together.  T: gloo::Context or its transport's
// context (both have rank, size and getPair).
template <class T> void close_pairs(T &ctx)
{
	std::vector<int> peers;
	for (int i = 0; i < ctx.size; i++)
		if (i != ctx.rank)
			peers.push_back(i);
	std::atomic<size_t> next{ 0 };
	auto work = [&] {
		for (size_t k; (k = next++) < peers.size();) {
			try {
				auto &pair = ctx.getPair(peers[k]);
				if (pair)
					pair->close();
			} catch (const std::exception &) {
				// a pair that failed is closed all the same
			}
		}
	};
	std::vector<std::thread> pool;
	for (size_t t = 1; t < std::min<size_t>(kConnectThreads, peers.size()); t++)
		pool.emplace_back(work);
	work();
	for (auto &t : pool)
		t.join();
}

// domain.cc: closes a domain's pairs unless a live context still shares
// them, and drops its context; and gives a persistent context's domain
// back to its device when the handle is destroyed (pairs kept open).
void release_domain(Domain &dom);
void park(hpct_gloo_context *c);

// A context for `size` ranks of `group` on d, with d's timeout and the
// world's epoch, nothing connected yet; nullptr when out of memory.
hpct_gloo_context *new_context(hpct_gloo_device *d, uint64_t group, int size);
// The barrier every way of connecting ends with (context.cc says why).
int meet(hpct_gloo_context *c);

// The port (host order) and numeric IP of a socket address (endpoint.cc).
unsigned port_of(const sockaddr_storage &ss);
std::string ip_of(const sockaddr_storage &ss);

// One end of a TCP connection, comparable across families (IPv4 as
// ::ffff:a.b.c.d), as it travels between ranks.
struct Endpoint {
	unsigned char ip[16];
	uint32_t port;
	bool operator==(const Endpoint &o) const
	{
		return std::memcmp(ip, o.ip, sizeof(ip)) == 0 && port == o.port;
	}
};
Endpoint endpoint_of(const sockaddr_storage &ss);
sockaddr_storage sockaddr_of(const Endpoint &e);
std::string endpoint_str(const Endpoint &e); // "nowhere: ..." for an empty one

// The endpoint of a numeric IP and a port; empty when ip is not one.
Endpoint endpoint_from(const std::string &ip, unsigned port);
// For each far end: true when no socket of this process is connected to
// it, or the one that is was closed or reset by the other side (the
// kernel says so at once; Gloo's loop learns it when it next reads).
std::vector<bool> hung_up(const std::vector<Endpoint> &far);

// Both ends of every connected TCP socket of this process: Gloo keeps its
// pairs' descriptors to itself, so this is how a pair's socket is found.
using Sockets = std::vector<std::pair<Endpoint, Endpoint>>; // (near, far)
Sockets connected_sockets();

// How the two ends of new pairs tell each other where they are, for
// connect_pairs: mine[i] is ours for every context rank i with fresh[i]
// (round 0: where our pair for i listens; round 1, with a secret: our end
// of its socket); fills theirs[i] for the same ranks.  0, or an hpct error
// logged naming the peer.
struct Swap {
	virtual ~Swap() = default;
	virtual int swap(hpct_gloo_context *c, hpct_group *g, int round,
	                 const std::vector<char> &fresh, const std::vector<Endpoint> &mine,
	                 std::vector<Endpoint> &theirs) = 0;
};

// Makes a new pair in tctx for every context rank i with fresh[i] (a pair
// already there is closed and replaced), swaps addresses through `swap`,
// connects them from the pool of threads and, with a secret, checks both
// ends of each; fills c->peers for those ranks (the others are left as
// they are) and counts them in c->pairs_new.  pool.cc.
int connect_pairs(hpct_gloo_context *c, hpct_group *g, gloo::transport::Context &tctx,
                  const std::vector<char> &fresh, Swap &swap);

// Connect every pair of c over group g, each rank returning once its own
// ends are up (pool.cc: hpct's exchange and a pool of threads, on either
// path; fullmesh.cc: Gloo's connectFullMesh over rank 0's store, standard
// path only).  index: how many contexts this device made over g before.
// 0, or an hpct error, logged once, naming the peer.
int connect_pool(hpct_gloo_context *c, hpct_group *g, unsigned index);
int connect_fullmesh(hpct_gloo_context *c, hpct_group *g, unsigned index);

// The way HPCT_GLOO_CONNECT names for a world on `path`, or the path's
// default when unset (context.cc); HPCT_EBADENV, logged naming the
// variable and its value, for a name no way has or a way the path lacks.
int choose_way(int world_rank, enum hpct_path path, const ConnectWay **way_out);

// Turns an exception from Gloo into an hpct error: the message names the
// context, this rank, and the peer whose address the exception mentions.
int fail(hpct_gloo_context *c, const char *op, const std::exception &e);
int fail_plain(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

} // namespace hpct_gloo
