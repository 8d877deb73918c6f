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

namespace hpct_gloo
{
struct ConnectWay; // context.cc
}

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
