// Connecting Gloo contexts: rootless (ports through hpct's alltoall, pairs
// connected by a pool of threads) or standard (Gloo's connectFullMesh over
// hpct's rendezvous store), and cloning one through Gloo's ContextFactory.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>

#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>

#include "bootstrap/gloo/gloo_internal.hpp"
#include "bootstrap/gloo/gloo_private.hpp"

extern "C" {
#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/stdpath/stdpath.h"
#include "bootstrap/world_access.h"
}

namespace
{

using gloo::transport::tcp::Address;

// Threads that connect pairs at once: each connect waits for a tick of
// Gloo's event loop (10 ms), which a pool pays about once per 8 peers, not
// once per peer.  More threads did no better with 64 ranks on 2 cores.
constexpr int kConnectThreads = 8;

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
std::vector<std::pair<Endpoint, Endpoint>> connected_sockets()
{
	std::vector<std::pair<Endpoint, Endpoint>> out;
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
int verify_pairs(hpct_gloo_context *c, hpct_group *g, const std::vector<sockaddr_storage> &self,
                 const std::vector<sockaddr_storage> &peer, const std::vector<bool> &client,
                 const std::vector<char> &failed)
{
	int n = hpct_group_size(g), r = hpct_group_rank(g);
	auto socks = connected_sockets();
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

int connect_rootless(hpct_gloo_context *c, hpct_group *g)
{
	hpct_gloo_device *d = c->device;
	int n = hpct_group_size(g), r = hpct_group_rank(g);
	auto tctx = d->dev->createContext(r, n);
	tctx->setTimeout(c->timeout);
	// Each peer needs one number from us: the port of our pair for it.
	std::vector<uint32_t> mine(n, 0), theirs(n, 0);
	std::vector<sockaddr_storage> self((size_t)n);
	for (int i = 0; i < n; i++) {
		if (i == r)
			continue;
		auto &pair = tctx->createPair(i);
		self[(size_t)i] = Address(pair->address().bytes()).getSockaddr();
		mine[i] = port_of(self[(size_t)i]);
	}
	int rc = hpct_alltoall(g, mine.data(), sizeof(uint32_t), theirs.data());
	if (rc)
		return rc; // logged by the alltoall, naming the peer
	PairConnector pc;
	pc.tctx = tctx;
	pc.addrs.resize(n);
	pc.failed.assign((size_t)n, 0);
	std::vector<sockaddr_storage> peer_ss((size_t)n);
	std::vector<bool> client((size_t)n, false);
	for (int i = 0; i < n; i++) {
		if (i == r)
			continue;
		sockaddr_storage ss;
		int wr = hpct_group_world_rank(g, i);
		if ((rc = peer_address(d->world, wr, theirs[i], &ss)) < 0)
			return hpct_gloo::fail_plain(rc,
			                             "rank %d: no address for rank %d's Gloo pair",
			                             c->world_rank, wr);
		c->peers[i] = { wr, ip_of(ss), theirs[i] };
		pc.addrs[i] = Address(ss).bytes();
		peer_ss[(size_t)i] = ss;
		client[(size_t)i] = is_client(self[(size_t)i], ss);
		(client[(size_t)i] ? pc.connecting : pc.accepting).push_back(i);
	}
	pc.run();
	if (hpct__world_has_secret(d->world) &&
	    (rc = verify_pairs(c, g, self, peer_ss, client, pc.failed)) != 0)
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
	// Once connected, Gloo names a peer by the far end of the socket: for
	// a pair that peer connected, its source port, which we were never
	// told; but by the address we passed if our connect() came after the
	// accept (it sets the peer's address last).  One more exchange of
	// ports gives the source ports; both names are kept.
	for (int i = 0; i < n; i++)
		if (i != r)
			mine[i] =
			        port_of(Address(tctx->getPair(i)->address().bytes()).getSockaddr());
	if ((rc = hpct_alltoall(g, mine.data(), sizeof(uint32_t), theirs.data())) != 0)
		return rc;
	for (int i = 0; i < n; i++)
		if (i != r)
			if (theirs[i] != c->peers[i].port)
				c->peers[i].sport = theirs[i];
	auto ctx = std::make_shared<hpct_gloo::Context>(r, n);
	ctx->setTimeout(c->timeout);
	ctx->attach(d->dev, std::move(tctx));
	c->ctx = std::move(ctx);
	return 0;
}

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

int connect_standard(hpct_gloo_context *c, hpct_group *g, unsigned index)
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
		// A rank leaves connectFullMesh once its own pairs are up, maybe
		// before a peer has accepted the last of them: destroying the
		// context at once would close that pair under the peer.  Meet
		// first, as PyTorch's store-based barrier after Gloo's init does.
		gloo::BarrierOptions b(ctx);
		b.setTimeout(c->timeout);
		gloo::barrier(b);
	} catch (const std::exception &e) {
		if (store.error())
			return store.error(); // logged by the store client, naming the key
		return hpct_gloo::fail(c, "connectFullMesh", e);
	}
	c->ctx = std::move(ctx);
	return 0;
}

hpct_gloo_context *new_context(hpct_gloo_device *d, uint64_t group, int size)
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

} // namespace

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
	struct hpct_world_info info;
	hpct_world_get_info(device->world, &info);
	int rc;
	try {
		rc = info.path == HPCT_PATH_ROOTLESS ? connect_rootless(c, group)
		                                     : connect_standard(c, group, index);
	} catch (const std::exception &e) {
		rc = hpct_gloo::fail(c, "context creation", e);
	}
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
		c->peers[i] = { parent->peers[i].world_rank, parent->peers[i].ip, 0 };
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
