// Connecting a context from a pool of threads (HPCT_GLOO_CONNECT=pool), on
// either path: every rank makes one Gloo pair per peer, tells each peer
// where the pair meant for it listens through hpct's alltoall (rootless:
// the port, over hpct's links; standard: the whole address, through rank
// 0's store), and connects the pairs it is the client of from a bounded
// pool of threads.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <gloo/transport/tcp/address.h>

#include "bootstrap/gloo/gloo_internal.hpp"

extern "C" {
#include "bootstrap/base/budget.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/world_access.h"
}


namespace
{

using gloo::transport::tcp::Address;
using hpct_gloo::connected_sockets;
using hpct_gloo::Endpoint;
using hpct_gloo::endpoint_of;
using hpct_gloo::endpoint_str;
using hpct_gloo::ip_of;
using hpct_gloo::kConnectThreads;
using hpct_gloo::port_of;
using hpct_gloo::Sockets;
using hpct_gloo::sockaddr_of;

// A peer's pair endpoint: its node's address (derived, as every hpct
// address) and the port it told us.
int peer_endpoint(hpct_world *w, int world_rank, unsigned port, Endpoint *e)
{
	char host[64];
	int rc = hpct__world_node_host(w, world_rank, host, sizeof(host));
	if (rc < 0)
		return rc;
	*e = hpct_gloo::endpoint_from(host, port);
	return *e == Endpoint{} ? HPCT_ERESOLVE : 0;
}

// Gloo's rule for which side of a pair connects: the one whose (address,
// network-order port) compares greater; the other listens.
bool is_client(const sockaddr_storage &self, const sockaddr_storage &peer)
{
	int rv;
	if (self.ss_family == AF_INET6) {
		auto &a = (const sockaddr_in6 &)self;
		auto &b = (const sockaddr_in6 &)peer;
		rv = std::memcmp(&a.sin6_addr, &b.sin6_addr, sizeof(a.sin6_addr));
		if (rv == 0)
			rv = a.sin6_port - b.sin6_port;
	} else {
		auto &a = (const sockaddr_in &)self;
		auto &b = (const sockaddr_in &)peer;
		rv = std::memcmp(&a.sin_addr, &b.sin_addr, sizeof(a.sin_addr));
		if (rv == 0)
			rv = a.sin_port - b.sin_port;
	}
	return rv > 0;
}

// With a shared secret: Gloo admits the first connection to a pair's
// listener, whoever makes it, and its protocol has no room for a proof.
// So each side finds its pair's socket, tells the peer over hpct's
// authenticated links where its end is, and checks that the far end of its
// own socket is where the peer says: a stranger that took a pair's port is
// caught here, named by its address, before any data moves.  A pair that
// did not connect (the peer found the port taken) counts as nobody's end:
// its failure is the connector's to report, and the stranger still shows.
int verify_pairs(hpct_gloo_context *c, hpct_group *g, const Sockets &socks,
                 const std::vector<sockaddr_storage> &self,
                 const std::vector<sockaddr_storage> &peer, const std::vector<bool> &client,
                 const std::vector<char> &failed, const std::vector<char> &fresh,
                 hpct_gloo::Swap &swap)
{
	int n = hpct_group_size(g);
	std::vector<Endpoint> mine((size_t)n), seen((size_t)n), theirs((size_t)n);
	std::vector<bool> found((size_t)n, false);
	for (int i = 0; i < n; i++) {
		if (!fresh[(size_t)i])
			continue;
		// ours connects to the peer's listener; the peer's was accepted
		// on our listener's port
		Endpoint want = endpoint_of(client[(size_t)i] ? peer[(size_t)i] : self[(size_t)i]);
		for (auto &s : socks)
			if (client[(size_t)i] ? s.second == want : s.first == want) {
				mine[(size_t)i] = s.first;
				seen[(size_t)i] = s.second;
				found[(size_t)i] = true;
				break;
			}
	}
	int rc = swap.swap(c, g, 1, fresh, mine, theirs);
	if (rc)
		return rc;
	for (int i = 0; i < n; i++) {
		if (!fresh[(size_t)i] || failed[(size_t)i])
			continue;
		if (!found[(size_t)i]) /* connected, says Gloo, yet no socket: fail closed */
			return hpct_gloo::fail_plain(
			        HPCT_EPEERDEAD,
			        "rank %d: the Gloo pair for rank %d (group %016llx) "
			        "has no open connection to check",
			        c->world_rank, hpct_group_world_rank(g, i),
			        (unsigned long long)c->group);
		if (seen[(size_t)i] == theirs[(size_t)i])
			continue;
		int wr = hpct_group_world_rank(g, i);
		HPCT_WARN(HPCT_SUB_NET,
		          "rank %d: refused the Gloo pair from %s: rank %d's end of it is %s "
		          "(a stranger took the pair's port?)",
		          c->world_rank, endpoint_str(seen[(size_t)i]).c_str(), wr,
		          endpoint_str(theirs[(size_t)i]).c_str());
		return hpct_gloo::fail_plain(
		        HPCT_EREFUSED,
		        "rank %d: the Gloo pair for rank %d (group %016llx) is "
		        "connected to %s, not to rank %d (its end is %s): refused",
		        c->world_rank, wr, (unsigned long long)c->group,
		        endpoint_str(seen[(size_t)i]).c_str(), wr,
		        endpoint_str(theirs[(size_t)i]).c_str());
	}
	return 0;
}

// Connects every pair.  The pairs this side connects go to a bounded pool
// of threads: each connect waits for a tick of Gloo's loop, which threads
// waiting together pay once.  The pairs the peer connects need nobody:
// Gloo's loop accepts them by itself, so they are waited on afterwards by
// the calling thread, most already connected by then; a thread parked on
// each would cost a wakeup per pair and win nothing.  The first failure,
// with the context rank it concerned, is kept.
struct PairConnector {
	gloo::transport::Context *tctx;
	std::vector<std::vector<char>> addrs;   // by context rank; empty for self
	std::vector<int> connecting, accepting; // context ranks, by role
	std::atomic<size_t> next{ 0 };
	std::mutex lock;
	int bad_rank = -1;
	std::string bad_what;
	std::vector<char> failed; // by context rank (char: threads write apart)
	double timeout_s = 0;

	void fail(int i, const std::string &what)
	{
		std::lock_guard<std::mutex> g(lock);
		failed[(size_t)i] = 1;
		if (bad_rank < 0) {
			bad_rank = i;
			bad_what = what;
		}
	}

	void connect(int i)
	{
		try {
			tctx->getPair(i)->connect(addrs[(size_t)i]);
		} catch (const std::exception &e) {
			fail(i, e.what());
		}
	}

	// A pair this side connects opens a descriptor and does work: one
	// transfer of the process's in-flight budget while it connects, shared
	// with every other context and fan-out of the process.  The pairs the
	// peer connects take none: Gloo's loop accepts them by itself, and a
	// wait for them holding the budget could wait on a peer's wait.
	void connect_budgeted(int i)
	{
		uint64_t granted = 0;
		int rc = hpct__inflight_take(0, 1, hpct__now() + timeout_s, &granted);
		if (rc != 0) {
			fail(i, std::string("waited for this process's in-flight budget "
			                    "(HPCT_INFLIGHT_TRANSFERS): ") +
			                hpct_strerror(rc));
			return;
		}
		connect(i);
		hpct__inflight_give(granted, 1);
	}

	void work()
	{
		for (size_t k; (k = next++) < connecting.size();)
			connect_budgeted(connecting[k]);
	}

	void run()
	{
		int n = std::min<int>(kConnectThreads, (int)connecting.size());
		std::vector<std::thread> pool;
		for (int t = 1; t < n; t++)
			pool.emplace_back([this] { work(); });
		work();
		for (auto &t : pool)
			t.join();
		for (int i : accepting)
			connect(i);
	}
};

// A temporary context's swap: every rank needs every peer's address, so
// one hpct_alltoall over the group carries them all, one way per path.
// Round 0 rootless: each peer needs one number from us, the port of our
// pair for it; the IP is its node's address, which every rank derives.
// Standard, and round 1 on either path: the whole endpoint (without a node
// list a peer's address may not be derivable: Gloo binds where the host
// name resolves), through rank 0's store as every standard collective.
struct AllSwap : hpct_gloo::Swap {
	int swap(hpct_gloo_context *c, hpct_group *g, int round, const std::vector<char> &fresh,
	         const std::vector<Endpoint> &mine, std::vector<Endpoint> &theirs) override
	{
		(void)fresh; // all of them
		if (round == 0 && c->device->path == HPCT_PATH_ROOTLESS)
			return ports(c, g, mine, theirs);
		int rc = hpct_alltoall(g, mine.data(), sizeof(Endpoint), theirs.data());
		if (rc == 0)
			c->bytes_exchanged += 2 * (uint64_t)mine.size() * sizeof(Endpoint);
		return rc; // logged by the alltoall, naming the peer
	}

	static int ports(hpct_gloo_context *c, hpct_group *g, const std::vector<Endpoint> &mine,
	                 std::vector<Endpoint> &theirs)
	{
		int n = hpct_group_size(g), r = hpct_group_rank(g);
		std::vector<uint32_t> out((size_t)n, 0), in((size_t)n, 0);
		for (int i = 0; i < n; i++)
			out[(size_t)i] = mine[(size_t)i].port;
		int rc = hpct_alltoall(g, out.data(), sizeof(uint32_t), in.data());
		if (rc)
			return rc; // logged by the alltoall, naming the peer
		c->bytes_exchanged += 2 * (uint64_t)n * sizeof(uint32_t);
		for (int i = 0; i < n; i++) {
			if (i == r)
				continue;
			int wr = hpct_group_world_rank(g, i);
			if ((rc = peer_endpoint(c->device->world, wr, in[(size_t)i],
			                        &theirs[(size_t)i])) < 0)
				return hpct_gloo::fail_plain(
				        rc, "rank %d: no address for rank %d's Gloo pair",
				        c->world_rank, wr);
		}
		return 0;
	}
};

// Once connected, Gloo names a peer in its errors by the far end of the
// pair's socket: for a pair the peer connected, its source port, which
// nobody told us (or the address we passed, when our connect() came after
// the accept: it sets the peer's address last).  The kernel knows it: the
// far end of the socket whose near end is our pair's listening address.
// Both names are kept.
void note_source_ports(hpct_gloo_context *c, int r, const Sockets &socks,
                       const std::vector<sockaddr_storage> &self, const std::vector<bool> &client)
{
	for (size_t i = 0; i < self.size(); i++) {
		if ((int)i == r || client[i])
			continue;
		Endpoint near = endpoint_of(self[i]);
		for (auto &s : socks)
			if (s.first == near) {
				c->peers[i].sport = s.second.port;
				c->peers[i].sip = ip_of(sockaddr_of(s.second));
				break;
			}
	}
}

} // namespace

int hpct_gloo::connect_pairs(hpct_gloo_context *c, hpct_group *g, gloo::transport::Context &tctx,
                             const std::vector<char> &fresh, Swap &swap)
{
	hpct_gloo_device *d = c->device;
	int n = hpct_group_size(g), r = hpct_group_rank(g);
	std::vector<sockaddr_storage> self((size_t)n), peer((size_t)n);
	std::vector<Endpoint> mine((size_t)n), theirs((size_t)n);
	for (int i = 0; i < n; i++) {
		if (!fresh[(size_t)i])
			continue;
		auto &pair = tctx.createPair(i);
		self[(size_t)i] = Address(pair->address().bytes()).getSockaddr();
		mine[(size_t)i] = endpoint_of(self[(size_t)i]);
	}
	int rc = swap.swap(c, g, 0, fresh, mine, theirs);
	if (rc)
		return rc;
	PairConnector pc;
	pc.tctx = &tctx;
	pc.timeout_s = hpct__world_timeout(d->world);
	pc.addrs.resize(n);
	pc.failed.assign((size_t)n, 0);
	std::vector<bool> client((size_t)n, false);
	for (int i = 0; i < n; i++) {
		if (!fresh[(size_t)i])
			continue;
		const auto &ss = peer[(size_t)i] = sockaddr_of(theirs[(size_t)i]);
		c->peers[i] = { hpct_group_world_rank(g, i), ip_of(ss), port_of(ss), 0, {} };
		pc.addrs[i] = Address(ss).bytes();
		client[(size_t)i] = is_client(self[(size_t)i], ss);
		(client[(size_t)i] ? pc.connecting : pc.accepting).push_back(i);
		c->pairs_new++;
	}
	pc.run();
	Sockets socks = connected_sockets();
	if (hpct__world_has_secret(d->world) &&
	    (rc = verify_pairs(c, g, socks, self, peer, client, pc.failed, fresh, swap)) != 0)
		return rc;
	if (pc.bad_rank >= 0) {
		const auto &p = c->peers[pc.bad_rank];
		return hpct_gloo::fail_plain(
		        HPCT_EPEERDEAD,
		        "rank %d: connecting the Gloo pair to rank %d at %s:%u "
		        "(group %016llx) failed: %s",
		        c->world_rank, p.world_rank, p.ip.c_str(), p.port,
		        (unsigned long long)c->group, pc.bad_what.c_str());
	}
	note_source_ports(c, r, socks, self, client);
	return 0;
}

int hpct_gloo::connect_pool(hpct_gloo_context *c, hpct_group *g, unsigned index)
{
	(void)index; // the pool keys nothing by it
	int n = hpct_group_size(g), r = hpct_group_rank(g);
	auto tctx = c->device->dev->createContext(r, n);
	tctx->setTimeout(c->timeout);
	std::vector<char> fresh((size_t)n, 1);
	fresh[(size_t)r] = 0;
	AllSwap swap;
	int rc = connect_pairs(c, g, *tctx, fresh, swap);
	if (rc)
		return rc;
	auto ctx = std::make_shared<hpct_gloo::Context>(r, n);
	ctx->setTimeout(c->timeout);
	ctx->attach(c->device->dev, std::move(tctx));
	c->ctx = std::move(ctx);
	return 0;
}
