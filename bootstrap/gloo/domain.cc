// Persistent Gloo contexts (domains): a context's pairs kept past its
// handle and lent to the next persistent context over the same members and
// generation; after a recovery, kept but for the pairs of replaced ranks.
// Every decision is taken from what all members share: the member set, the
// generation, the world's epoch and its record of who was replaced (see
// hpct_gloo_context_create_persistent in include/hpct/gloo.h).
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include <gloo/transport/unbound_buffer.h>

#include "bootstrap/gloo/gloo_internal.hpp"

extern "C" {
#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/world_access.h"
}

namespace
{

using hpct_gloo::Domain;
using hpct_gloo::Endpoint;

using Key = std::pair<std::vector<int>, uint64_t>;

// Slots a domain's context starts from whenever pairs are made in it: far
// above what a context uses in practice (one or two per collective), 2^21
// for each of 512 epochs in turn, so that nothing a failed collective left
// on a kept pair can match a slot of the new epoch's.
constexpr int kSlotBase = 1 << 30;
constexpr int kSlotSpan = 1 << 21;

std::string describe(const Key &k)
{
	const auto &m = k.first;
	std::string s = std::to_string(m.size()) + " members (";
	bool run = m.size() > 1 && m.back() - m.front() == (int)m.size() - 1;
	if (run) {
		s += "ranks " + std::to_string(m.front()) + "-" + std::to_string(m.back());
	} else {
		for (size_t i = 0; i < m.size() && i < 8; i++)
			s += (i ? "," : "ranks ") + std::to_string(m[i]);
		if (m.size() > 8)
			s += ",...";
	}
	return s + "), generation " + std::to_string(k.second);
}

uint64_t key_hash(const Key &k)
{
	uint64_t h = hpct__hash_u64(0, k.second);
	for (int r : k.first)
		h = hpct__hash_u64(h, (uint64_t)(uint32_t)r);
	return h;
}

// A persistent context's swap: point to point through an hpct exchange
// (no collective: a survivor swaps with the replaced ranks only while a
// replacement swaps with everyone), one exchange per connect, named so that
// no answer can come from an earlier connect's.  Its items: our endpoint
// for each group rank, empty for the ranks we keep a pair with.
struct XchgSwap : hpct_gloo::Swap {
	hpct_xchg *x = nullptr;

	~XchgSwap() override
	{
		hpct_xchg_destroy(x);
	}

	int open(hpct_group *g, const Key &k, uint64_t epoch, unsigned count)
	{
		char name[96];
		std::snprintf(name, sizeof(name), "gloo/%016" PRIx64 "/%" PRIu64 "/%u", key_hash(k),
		              epoch, count);
		return hpct_xchg_create(g, name, sizeof(Endpoint), &x);
	}

	// Version 1: which kept pairs each end wants remade (a survivor's
	// pairs with survivors only), in the items' port field (1: remake);
	// 2 and 3: the swap's rounds.
	int agree(hpct_gloo_context *c, std::vector<char> &fresh, const std::vector<char> &keep,
	          const std::vector<char> &mine)
	{
		std::vector<Endpoint> out(fresh.size()), in;
		std::vector<int> peers;
		for (size_t i = 0; i < fresh.size(); i++) {
			out[i].port = mine[i] ? 1 : 0;
			if (keep[i])
				peers.push_back((int)i);
		}
		int rc = hpct_xchg_publish(x, 1, out.data());
		if (rc || peers.empty())
			return rc;
		in.resize(peers.size());
		if ((rc = hpct_xchg_fetch(x, 1, peers.data(), (int)peers.size(), in.data())))
			return rc; // names the peer
		c->bytes_exchanged += 2 * (uint64_t)peers.size() * sizeof(Endpoint);
		for (size_t k = 0; k < peers.size(); k++)
			if (mine[(size_t)peers[k]] || in[k].port == 1)
				fresh[(size_t)peers[k]] = 1;
		return 0;
	}

	int swap(hpct_gloo_context *c, hpct_group *, int round, const std::vector<char> &fresh,
	         const std::vector<Endpoint> &mine, std::vector<Endpoint> &theirs) override
	{
		uint64_t version = (uint64_t)round + 2;
		int rc = hpct_xchg_publish(x, version, mine.data());
		if (rc)
			return rc;
		std::vector<int> peers;
		for (size_t i = 0; i < fresh.size(); i++)
			if (fresh[i])
				peers.push_back((int)i);
		if (peers.empty())
			return 0;
		std::vector<Endpoint> got(peers.size());
		if ((rc = hpct_xchg_fetch(x, version, peers.data(), (int)peers.size(), got.data())))
			return rc; // names the peer
		for (size_t k = 0; k < peers.size(); k++)
			theirs[(size_t)peers[k]] = got[k];
		c->bytes_exchanged += 2 * (uint64_t)peers.size() * sizeof(Endpoint);
		return 0;
	}
};

// Gloo's TCP context keeps, per slot, which peers announced a receive or
// a send not yet matched (Tally): a collective that failed leaves such
// entries behind, and a later send to that peer on that slot then goes
// out at once, before the peer posted its receive (Gloo aborts the
// process: "enforce fail at pair.cc:488").  No operation of the context is
// under way when it is reconnected, so they all go.  The members are
// protected: reached through a class derived from Gloo's, as C++ allows.
struct Tallies : gloo::transport::Context {
	static void clear(gloo::transport::Context &t)
	{
		auto mutex = &Tallies::mutex_;
		auto pending = &Tallies::pendingOperations_;
		auto expected = &Tallies::expectedNotifications_;
		std::lock_guard<std::mutex> lk(t.*mutex);
		(t.*pending).clear();
		(t.*expected).clear();
	}
};

// A kept pair is alive when a message crosses it both ways: each end sends
// the epoch it is at to the other on the first slot of the (re)connected
// context, every kept pair at once (none on a member that keeps none: it
// takes the slot all the same).
int check_kept(hpct_gloo_context *c, const std::vector<char> &fresh)
{
	auto &ctx = *c->ctx;
	int slot = ctx.nextSlot();
	int n = ctx.size;
	std::vector<uint64_t> out((size_t)n, c->epoch), in((size_t)n, 0);
	std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> tx((size_t)n), rx((size_t)n);
	int at = -1;
	try {
		for (int i = 0; i < n; i++) {
			if (i == ctx.rank || fresh[(size_t)i])
				continue;
			at = i;
			tx[(size_t)i] = ctx.createUnboundBuffer(&out[(size_t)i], sizeof(uint64_t));
			rx[(size_t)i] = ctx.createUnboundBuffer(&in[(size_t)i], sizeof(uint64_t));
			rx[(size_t)i]->recv(i, (uint64_t)slot);
			tx[(size_t)i]->send(i, (uint64_t)slot);
		}
		for (int i = 0; i < n; i++) {
			if (!tx[(size_t)i])
				continue;
			at = i;
			rx[(size_t)i]->waitRecv(c->timeout);
			tx[(size_t)i]->waitSend(c->timeout);
		}
	} catch (const std::exception &e) {
		const auto &p = c->peers[(size_t)(at < 0 ? 0 : at)];
		return hpct_gloo::fail_plain(
		        HPCT_EPEERDEAD,
		        "rank %d: the Gloo pair kept for rank %d at %s:%u (group %016llx) did "
		        "not carry a message at epoch %llu: %s; release the domain on every "
		        "member and create it again",
		        c->world_rank, p.world_rank, p.ip.c_str(), p.port,
		        (unsigned long long)c->group, (unsigned long long)c->epoch, e.what());
	}
	for (int i = 0; i < n; i++)
		if (tx[(size_t)i] && in[(size_t)i] != c->epoch)
			return hpct_gloo::fail_plain(
			        HPCT_EREFUSED,
			        "rank %d: rank %d's end of the Gloo pair kept for it is at epoch "
			        "%llu, this rank at %llu (group %016llx): refused",
			        c->world_rank, c->peers[(size_t)i].world_rank,
			        (unsigned long long)in[(size_t)i], (unsigned long long)c->epoch,
			        (unsigned long long)c->group);
	return 0;
}

// Connects the pairs `fresh` names in the domain's context (all of them
// for a new domain) and checks the others.
int connect(hpct_gloo_context *c, hpct_group *g, Domain &dom, const Key &k,
            const std::vector<char> &fresh, unsigned count, bool recovered)
{
	XchgSwap swap;
	int rc = swap.open(g, k, c->epoch, count);
	if (rc)
		return rc;
	c->ctx = dom.ctx;
	c->peers = dom.peers;
	std::vector<char> remake = fresh;
	// every member's context starts its slots at the same number, whether
	// it keeps pairs (a survivor) or not (a replacement, a new domain),
	// and the check below takes the first on every member
	dom.ctx->restart_slots(kSlotBase + (int)(c->epoch % 512) * kSlotSpan);
	if (recovered) {
		// A survivor's pair with a survivor may have died in the fault
		// (Gloo closes a pair whose receive timed out): either end
		// that sees it dead has both remake it.  A rank on which a
		// collective failed remakes them all: the broken collective
		// left its receives posted in the pairs (Gloo would read a
		// peer's next message into a buffer long gone), and nothing
		// public takes them back.
		Tallies::clear(*dom.ctx->transport());
		bool failed = dom.failed;
		std::vector<char> keep((size_t)fresh.size(), 0), dead = keep;
		std::vector<Endpoint> far;
		std::vector<int> at;
		for (size_t i = 0; i < fresh.size(); i++) {
			if ((int)i == c->ctx->rank || fresh[i])
				continue;
			const auto &p = c->peers[i];
			keep[i] = 1;
			// where our socket of the pair leads: the peer's listener,
			// or the source it connected from (on loopback nodes
			// 127.0.0.2 connects from 127.0.0.1)
			far.push_back(p.sport ? hpct_gloo::endpoint_from(p.sip, p.sport)
			                      : hpct_gloo::endpoint_from(p.ip, p.port));
			at.push_back((int)i);
		}
		std::vector<bool> gone = hpct_gloo::hung_up(far);
		for (size_t j = 0; j < at.size(); j++)
			dead[(size_t)at[j]] = failed || gone[j];
		if ((rc = swap.agree(c, remake, keep, dead)))
			return rc;
	}
	try {
		rc = hpct_gloo::connect_pairs(c, g, *dom.ctx->transport(), remake, swap);
	} catch (const std::exception &e) {
		rc = hpct_gloo::fail(c, "context creation", e);
	}
	if (rc == 0)
		rc = check_kept(c, remake);
	if (rc == 0)
		rc = hpct_gloo::meet(c); // every fetch from us is done past it
	if (rc == 0)
		dom.peers = c->peers;
	return rc;
}

} // namespace

extern "C" HPCT_API int hpct_gloo_context_create_persistent(hpct_gloo_device *device,
                                                            hpct_group *group,
                                                            uint64_t generation,
                                                            hpct_gloo_context **context_out)
{
	if (!device || !group || !context_out)
		return hpct_gloo::fail_plain(HPCT_EINVAL,
		                             "hpct_gloo_context_create_persistent: NULL argument");
	int n = hpct_group_size(group), r = hpct_group_rank(group);
	Key k;
	for (int i = 0; i < n; i++)
		k.first.push_back(hpct_group_world_rank(group, i));
	k.second = generation;
	hpct_gloo_context *c = hpct_gloo::new_context(device, hpct_group_id(group), n);
	if (!c)
		return HPCT_ENOMEM;
	std::lock_guard<std::mutex> lk(device->lock);
	auto it = device->domains.find(k);
	Domain *dom = it == device->domains.end() ? nullptr : it->second.get();
	std::vector<char> fresh((size_t)n, 0);
	bool recovered = false;
	if (dom && dom->epoch == c->epoch) {
		const char *why = dom->user     ? "a live context holds it: destroy that first"
		                  : dom->failed ? "a collective failed on it at this epoch: "
		                                  "recover the world, or release the domain on "
		                                  "every member"
		                                : nullptr;
		if (why) {
			delete c;
			return hpct_gloo::fail_plain(
			        HPCT_ESTATE, "rank %d: the persistent Gloo domain of %s: %s",
			        device->world_rank, dom->what.c_str(), why);
		}
		// reused whole: no pair made, nothing swapped; one barrier over
		// the kept pairs says every member reused it too
		c->ctx = dom->ctx;
		c->peers = dom->peers;
		c->pairs_kept = n - 1;
		c->domain = dom; // a failure closes no kept pair
		int rc = hpct_gloo::meet(c);
		if (rc) {
			c->ctx.reset(); // the domain keeps its pairs for a recovery
			c->domain = nullptr;
			dom->failed = true;
			delete c;
			return rc;
		}
		HPCT_INFO(HPCT_SUB_COLL,
		          "rank %d: persistent Gloo domain of %s at epoch %llu: reused, %d pairs "
		          "kept",
		          device->world_rank, dom->what.c_str(), (unsigned long long)c->epoch,
		          c->pairs_kept);
	} else {
		if (!dom) {
			auto owned = std::make_unique<Domain>();
			owned->ctx = std::make_shared<hpct_gloo::Context>(r, n);
			owned->ctx->setTimeout(c->timeout);
			owned->ctx->attach(device->dev, device->dev->createContext(r, n));
			owned->ctx->transport()->setTimeout(c->timeout);
			owned->peers.resize((size_t)n);
			owned->what = describe(k);
			dom = owned.get();
			device->domains[k] = std::move(owned);
			for (int i = 0; i < n; i++)
				fresh[(size_t)i] = i != r;
		} else {
			// an older epoch: remake the pairs of the ranks replaced since
			recovered = true;
			for (int i = 0; i < n; i++)
				fresh[(size_t)i] =
				        i != r && hpct__world_rank_born(device->world, k.first[(size_t)i]) >
				                          dom->epoch;
			if (dom->user) { // an old epoch's handle: it shares the pairs no more
				dom->failed = dom->failed || dom->user->failed;
				dom->user->failed = HPCT_ESTATE;
				dom->user->domain = nullptr;
				dom->user = nullptr;
			}
		}
		auto &cnt = device->swaps[k];
		if (cnt.first != c->epoch)
			cnt = { c->epoch, 0 };
		c->domain = dom; // a failure closes no kept pair
		int rc = connect(c, group, *dom, k, fresh, cnt.second++, recovered);
		if (rc) {
			c->ctx.reset();
			delete c;
			device->domains.erase(k); // half made: nothing in it can be trusted
			return rc;
		}
		dom->epoch = c->epoch;
		dom->failed = false;
		c->pairs_kept = n - 1 - c->pairs_new;
		HPCT_INFO(HPCT_SUB_COLL,
		          "rank %d: persistent Gloo domain of %s at epoch %llu: %d pairs new, %d "
		          "kept",
		          device->world_rank, dom->what.c_str(), (unsigned long long)c->epoch,
		          c->pairs_new, c->pairs_kept);
	}
	dom->user = c;
	c->domain = dom;
	*context_out = c;
	return 0;
}

extern "C" HPCT_API int hpct_gloo_domain_release(hpct_gloo_device *device, hpct_group *group,
                                                 uint64_t generation)
{
	if (!device || !group)
		return hpct_gloo::fail_plain(HPCT_EINVAL, "hpct_gloo_domain_release: NULL argument");
	Key k;
	for (int i = 0; i < hpct_group_size(group); i++)
		k.first.push_back(hpct_group_world_rank(group, i));
	k.second = generation;
	std::unique_ptr<Domain> dom;
	{
		std::lock_guard<std::mutex> lk(device->lock);
		auto it = device->domains.find(k);
		if (it == device->domains.end())
			return 0;
		if (it->second->user)
			return hpct_gloo::fail_plain(
			        HPCT_ESTATE,
			        "rank %d: the persistent Gloo domain of %s is held by a live "
			        "context: destroy it before releasing the domain",
			        device->world_rank, it->second->what.c_str());
		dom = std::move(it->second);
		device->domains.erase(it);
		// its connect count stays: the next connect's exchange must not
		// share a name with one a peer may not have closed yet
	}
	hpct_gloo::release_domain(*dom);
	return 0;
}

void hpct_gloo::release_domain(Domain &dom)
{
	if (dom.ctx && dom.ctx.use_count() == 1)
		close_pairs(*dom.ctx);
	dom.ctx.reset();
}

void hpct_gloo::park(hpct_gloo_context *c)
{
	std::lock_guard<std::mutex> lk(c->device->lock);
	Domain *dom = c->domain;
	dom->user = nullptr;
	if (c->failed)
		dom->failed = true;
	c->domain = nullptr;
}

extern "C" HPCT_API int hpct_gloo_context_get_stats(const hpct_gloo_context *context,
                                                   struct hpct_gloo_context_stats *stats_out)
{
	if (!context || !stats_out)
		return hpct_gloo::fail_plain(HPCT_EINVAL, "hpct_gloo_context_get_stats: NULL argument");
	stats_out->pairs_new = context->pairs_new;
	stats_out->pairs_kept = context->pairs_kept;
	stats_out->persistent = context->domain != nullptr;
	stats_out->bytes_exchanged = context->bytes_exchanged;
	return 0;
}
