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
#include "bootstrap/base/log.h"
#include "bootstrap/world_access.h"
}

namespace hpct_gloo
{

unsigned port_of(const sockaddr_storage &ss)
{
	if (ss.ss_family == AF_INET6)
		return ntohs(((const sockaddr_in6 &)ss).sin6_port);
	return ntohs(((const sockaddr_in &)ss).sin_port);
}

std::string ip_of(const sockaddr_storage &ss)
{
	char buf[INET6_ADDRSTRLEN] = "?";
	if (ss.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((const sockaddr_in6 &)ss).sin6_addr, buf, sizeof(buf));
	else
		inet_ntop(AF_INET, &((const sockaddr_in &)ss).sin_addr, buf, sizeof(buf));
	return buf;
}

} // namespace hpct_gloo

namespace
{

using gloo::transport::tcp::Address;
using hpct_gloo::ip_of;
using hpct_gloo::kConnectThreads;
using hpct_gloo::port_of;

// A peer's pair address: its node's address (derived, as every hpct
// address) and the port it told us.
int peer_address(hpct_world *w, int world_rank, unsigned port, sockaddr_storage *ss)
{
	char host[64];
	int rc = hpct__world_node_host(w, world_rank, host, sizeof(host));
	if (rc < 0)
		return rc;
	std::memset(ss, 0, sizeof(*ss));
	auto *in = (sockaddr_in *)ss;
	auto *in6 = (sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
	} else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
	} else {
		return HPCT_ERESOLVE;
	}
	return 0;
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

// One end of a TCP connection, comparable across families (IPv4 as
// ::ffff:a.b.c.d), as it travels in hpct's alltoall.
struct Endpoint {
	unsigned char ip[16];
	uint32_t port;
	bool operator==(const Endpoint &o) const
	{
		return std::memcmp(ip, o.ip, sizeof(ip)) == 0 && port == o.port;
	}
};

Endpoint endpoint_of(const sockaddr_storage &ss)
{
	Endpoint e{};
	if (ss.ss_family == AF_INET6) {
		std::memcpy(e.ip, &((const sockaddr_in6 &)ss).sin6_addr, 16);
	} else {
		e.ip[10] = e.ip[11] = 0xff;
		std::memcpy(e.ip + 12, &((const sockaddr_in &)ss).sin_addr, 4);
	}
	e.port = port_of(ss);
	return e;
}

std::string endpoint_str(const Endpoint &e)
{
	if (e == Endpoint{})
		return "nowhere: it could not connect";
	char buf[INET6_ADDRSTRLEN] = "?";
	static const unsigned char v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	if (std::memcmp(e.ip, v4, 12) == 0)
		inet_ntop(AF_INET, e.ip + 12, buf, sizeof(buf));
	else
		inet_ntop(AF_INET6, e.ip, buf, sizeof(buf));
	return std::string(buf) + ":" + std::to_string(e.port);
}

// Both ends of every connected TCP socket of this process: Gloo keeps its
// pairs' descriptors to itself, so this is how a pair's socket is found.
using Sockets = std::vector<std::pair<Endpoint, Endpoint>>; // (near, far)

Sockets connected_sockets()
{
	Sockets out;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return out;
	while (dirent *e = readdir(d)) {
		int fd = std::atoi(e->d_name);
		if (e->d_name[0] == '.' || fd == dirfd(d))
			continue;
		sockaddr_storage l{}, r{};
		socklen_t ll = sizeof(l), rl = sizeof(r);
		if (getsockname(fd, (sockaddr *)&l, &ll) != 0 ||
		    getpeername(fd, (sockaddr *)&r, &rl) != 0 ||
		    (l.ss_family != AF_INET && l.ss_family != AF_INET6))
			continue;
		out.emplace_back(endpoint_of(l), endpoint_of(r));
	}
	closedir(d);
	return out;
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
                 const std::vector<char> &failed)
{
	int n = hpct_group_size(g), r = hpct_group_rank(g);
	std::vector<Endpoint> mine((size_t)n), seen((size_t)n), theirs((size_t)n);
	std::vector<bool> found((size_t)n, false);
	for (int i = 0; i < n; i++) {
		if (i == r)
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
	int rc = hpct_alltoall(g, mine.data(), sizeof(Endpoint), theirs.data());
	if (rc)
		return rc;
	for (int i = 0; i < n; i++) {
		if (i == r || failed[(size_t)i])
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
	std::shared_ptr<gloo::transport::Context> tctx;
	std::vector<std::vector<char>> addrs;   // by context rank; empty for self
	std::vector<int> connecting, accepting; // context ranks, by role
	std::atomic<size_t> next{ 0 };
	std::mutex lock;
	int bad_rank = -1;
	std::string bad_what;
	std::vector<char> failed; // by context rank (char: threads write apart)

	void connect(int i)
	{
		try {
			tctx->getPair(i)->connect(addrs[(size_t)i]);
		} catch (const std::exception &e) {
			std::lock_guard<std::mutex> g(lock);
			failed[(size_t)i] = 1;
			if (bad_rank < 0) {
				bad_rank = i;
				bad_what = e.what();
			}
		}
	}

	void work()
	{
		for (size_t k; (k = next++) < connecting.size();)
			connect(connecting[k]);
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

// How a peer learns where the pair meant for it listens: one way per path,
// both through hpct's alltoall.  self: our pairs' addresses, by context
// rank; peer_out: the peers' pairs for us.  0, or an error already logged
// naming the peer.
struct Exchange {
	enum hpct_path path;
	int (*run)(hpct_gloo_context *c, hpct_group *g, const std::vector<sockaddr_storage> &self,
	           std::vector<sockaddr_storage> &peer_out);
};

// Rootless: each peer needs one number from us, the port of our pair for
// it; the IP is its node's address, which every rank derives.
int exchange_ports(hpct_gloo_context *c, hpct_group *g, const std::vector<sockaddr_storage> &self,
                   std::vector<sockaddr_storage> &peer_out)
{
	int n = hpct_group_size(g), r = hpct_group_rank(g);
	std::vector<uint32_t> mine((size_t)n, 0), theirs((size_t)n, 0);
	for (int i = 0; i < n; i++)
		if (i != r)
			mine[(size_t)i] = port_of(self[(size_t)i]);
	int rc = hpct_alltoall(g, mine.data(), sizeof(uint32_t), theirs.data());
	if (rc)
		return rc; // logged by the alltoall, naming the peer
	for (int i = 0; i < n; i++) {
		if (i == r)
			continue;
		int wr = hpct_group_world_rank(g, i);
		if ((rc = peer_address(c->device->world, wr, theirs[(size_t)i],
		                       &peer_out[(size_t)i])) < 0)
			return hpct_gloo::fail_plain(rc,
			                             "rank %d: no address for rank %d's Gloo pair",
			                             c->world_rank, wr);
	}
	return 0;
}

sockaddr_storage sockaddr_of(const Endpoint &e)
{
	static const unsigned char v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	sockaddr_storage ss{};
	if (std::memcmp(e.ip, v4, sizeof(v4)) == 0) {
		auto &in = (sockaddr_in &)ss;
		in.sin_family = AF_INET;
		std::memcpy(&in.sin_addr, e.ip + 12, 4);
		in.sin_port = htons((uint16_t)e.port);
	} else {
		auto &in6 = (sockaddr_in6 &)ss;
		in6.sin6_family = AF_INET6;
		std::memcpy(&in6.sin6_addr, e.ip, 16);
		in6.sin6_port = htons((uint16_t)e.port);
	}
	return ss;
}

// Standard: a peer's node address may not be derivable (with no node list,
// Gloo binds where the host name resolves), so each peer is told the whole
// address of its pair, through rank 0's store as every standard collective.
int exchange_endpoints(hpct_gloo_context *c, hpct_group *g,
                       const std::vector<sockaddr_storage> &self,
                       std::vector<sockaddr_storage> &peer_out)
{
	(void)c;
	int n = hpct_group_size(g), r = hpct_group_rank(g);
	std::vector<Endpoint> mine((size_t)n), theirs((size_t)n);
	for (int i = 0; i < n; i++)
		if (i != r)
			mine[(size_t)i] = endpoint_of(self[(size_t)i]);
	int rc = hpct_alltoall(g, mine.data(), sizeof(Endpoint), theirs.data());
	if (rc)
		return rc; // logged by the alltoall, naming the peer
	for (int i = 0; i < n; i++)
		if (i != r)
			peer_out[(size_t)i] = sockaddr_of(theirs[(size_t)i]);
	return 0;
}

const Exchange kExchanges[] = {
	{ HPCT_PATH_ROOTLESS, exchange_ports },
	{ HPCT_PATH_STANDARD, exchange_endpoints },
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
				break;
			}
	}
}

} // namespace

int hpct_gloo::connect_pool(hpct_gloo_context *c, hpct_group *g, unsigned index)
{
	(void)index; // the pool keys nothing by it
	hpct_gloo_device *d = c->device;
	const Exchange *ex = nullptr;
	for (const auto &e : kExchanges)
		if (e.path == d->path)
			ex = &e;
	if (!ex)
		return hpct_gloo::fail_plain(HPCT_ESTATE,
		                             "rank %d: no Gloo pair exchange for path %d",
		                             c->world_rank, (int)d->path);
	int n = hpct_group_size(g), r = hpct_group_rank(g);
	auto tctx = d->dev->createContext(r, n);
	tctx->setTimeout(c->timeout);
	std::vector<sockaddr_storage> self((size_t)n), peer((size_t)n);
	for (int i = 0; i < n; i++) {
		if (i == r)
			continue;
		auto &pair = tctx->createPair(i);
		self[(size_t)i] = Address(pair->address().bytes()).getSockaddr();
	}
	int rc = ex->run(c, g, self, peer);
	if (rc)
		return rc;
	PairConnector pc;
	pc.tctx = tctx;
	pc.addrs.resize(n);
	pc.failed.assign((size_t)n, 0);
	std::vector<bool> client((size_t)n, false);
	for (int i = 0; i < n; i++) {
		if (i == r)
			continue;
		const auto &ss = peer[(size_t)i];
		c->peers[i] = { hpct_group_world_rank(g, i), ip_of(ss), port_of(ss) };
		pc.addrs[i] = Address(ss).bytes();
		client[(size_t)i] = is_client(self[(size_t)i], ss);
		(client[(size_t)i] ? pc.connecting : pc.accepting).push_back(i);
	}
	pc.run();
	Sockets socks = connected_sockets();
	if (hpct__world_has_secret(d->world) &&
	    (rc = verify_pairs(c, g, socks, self, peer, client, pc.failed)) != 0)
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
	auto ctx = std::make_shared<hpct_gloo::Context>(r, n);
	ctx->setTimeout(c->timeout);
	ctx->attach(d->dev, std::move(tctx));
	c->ctx = std::move(ctx);
	return 0;
}
