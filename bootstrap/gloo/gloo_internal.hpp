// Shared by the Gloo bindings: the objects behind the C handles.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/device.h>

#include "hpct/gloo.h"

struct hpct_gloo_device {
	hpct_world *world;
	std::shared_ptr<gloo::transport::Device> dev;
	std::string host; // numeric address the device binds, "" for Gloo's default
	int world_rank;
	double timeout_s;
	// contexts made per group, so every member names its next one alike
	std::map<uint64_t, unsigned> made;
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
	bool pairs_given = false; // hpct__gloo_context_parts handed them on
};

namespace hpct_gloo
{

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
};

// Threads that connect pairs at once: each connect waits for a tick of
// Gloo's event loop (10 ms), which a pool pays about once per 8 peers, not
// once per peer.  More threads did no better with 64 ranks on 2 cores.
// Closing pairs waits for a tick too: the same pool closes them.
constexpr int kConnectThreads = 8;

// The port (host order) and numeric IP of a socket address.
unsigned port_of(const sockaddr_storage &ss);
std::string ip_of(const sockaddr_storage &ss);

// Connect every pair of c over group g (pool.cc, fullmesh.cc); 0 or an
// hpct error, logged once, naming the peer.
int connect_rootless(hpct_gloo_context *c, hpct_group *g);
int connect_standard(hpct_gloo_context *c, hpct_group *g, unsigned index);

// Turns an exception from Gloo into an hpct error: the message names the
// context, this rank, and the peer whose address the exception mentions.
int fail(hpct_gloo_context *c, const char *op, const std::exception &e);
int fail_plain(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

} // namespace hpct_gloo
