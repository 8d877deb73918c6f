// libhpct_torch.so: Gloo's gloo::rendezvous::Context::connectFullMesh for
// the Gloo Debian's PyTorch 1.13 uses (libgloo.so.0, commit 5b14351),
// connected through hpct instead: no address blob per rank through the
// store, pairs connected in parallel.  A subgroup's members learn each
// other's world ranks through the store (4 bytes each).  Each context is a
// persistent domain (hpct_gloo_context_create_persistent): when PyTorch
// lets it go (destroy_process_group), its pairs stay open, and the next
// context over the same members (a second init_process_group, as an
// in-process restart does) takes them, connecting nothing.
//
// Nothing here replaces a symbol by load order.  libtorch_cpu.so.1.13
// imports connectFullMesh from libgloo.so.0 through one GOT slot;
// libhpct_preload.so loads this library (RTLD_LOCAL) after torch and
// points that slot at hpct_torch_gloo_connect_full_mesh() with
// hpct__got_patch (bootstrap/shim/torch_gloo.c).  The world comes from
// hpct_preload_world(), defined by libhpct_preload.so, which is loaded
// whenever this library is.
#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

// defined here and exported by name (libhpct_torch.map), unlike the rest
// (-fvisibility=hidden): hpct_torch_gloo_connect_full_mesh finds it by it
#pragma GCC visibility push(default)
#include <gloo/rendezvous/context.h>
#pragma GCC visibility pop
#include <gloo/rendezvous/store.h>

#include "bootstrap/gloo/gloo_private.hpp"
#include "bootstrap/world_access.h"
#include "hpct/gloo.h"
#include "hpct/hpct.h"

#define TORCH_API extern "C" __attribute__((visibility("default")))

extern "C" hpct_world *hpct_preload_world(void);  // libhpct_preload.so
extern "C" void hpct_preload_world_lock(void);   // one user of the world at a time
extern "C" void hpct_preload_world_unlock(void);

// what libtorch_cpu.so.1.13 imports (readelf -r: R_X86_64_JUMP_SLOT)
#define CONNECT_FULL_MESH                                                 \
	"_ZN4gloo10rendezvous7Context15connectFullMeshERNS0_5StoreERSt10" \
	"shared_ptrINS_9transport6DeviceEE"

namespace
{

hpct_gloo_device *gloo_device;                  // one per process
std::map<std::vector<int>, uint64_t> gloo_made; // contexts per member set
// generations of the persistent domains live PyTorch contexts hold, per
// member set (their last reference may go in any thread)
std::map<std::vector<int>, std::set<uint64_t>> gloo_held;
std::mutex gloo_held_lock;

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
	// the world is used by one thread at a time (hpct.h): the store's
	// barrier and the NCCL half take the same lock
	struct world_lock {
		world_lock()
		{
			hpct_preload_world_lock();
		}
		~world_lock()
		{
			hpct_preload_world_unlock();
		}
	} held;
	if (!gloo_device) {
		int rc = hpct_gloo_device_create(w, &gloo_device);
		if (rc)
			gloo_fail("device", rc);
	}
	uint64_t key = gloo_made[members]++;
	hpct_group *grp = nullptr;
	int rc = hpct__group_create_keyed(hpct_world_group(w), key, members.data(), size, &grp);
	if (rc || !grp)
		gloo_fail("group of " + std::to_string(size) + " ranks", rc ? rc : HPCT_ENOTMEMBER);
	// The lowest generation no live context over these members holds: a
	// second incarnation (destroy_process_group, then init_process_group)
	// asks for the generations the first gave back, in the same order on
	// every rank, and gets their pairs.
	uint64_t gen = 0;
	{
		std::lock_guard<std::mutex> lk(gloo_held_lock);
		auto &held = gloo_held[members];
		while (held.count(gen))
			gen++;
		held.insert(gen);
	}
	hpct_gloo_context *c = nullptr;
	rc = hpct_gloo_context_create_persistent(gloo_device, grp, gen, &c);
	hpct_group_destroy(grp);
	if (rc) {
		std::lock_guard<std::mutex> lk(gloo_held_lock);
		gloo_held[members].erase(gen);
		gloo_fail("context of " + std::to_string(size) + " ranks", rc);
	}
	std::shared_ptr<gloo::transport::Device> d;
	std::shared_ptr<gloo::transport::Context> t;
	hpct__gloo_context_parts(c, &d, &t); // c is t's now
	device_ = std::move(d);
	// PyTorch's last reference gives the domain back, then the generation
	transportContext_ = std::shared_ptr<gloo::transport::Context>(
	        t.get(), [t, members, gen](gloo::transport::Context *) mutable {
		        t.reset();
		        std::lock_guard<std::mutex> lk(gloo_held_lock);
		        gloo_held[members].erase(gen);
	        });
}

// The address of the definition above.  A pointer to a member function is
// no function pointer in C++ (converting one is not defined), so it is
// looked up by its mangled name in this library's own scope, where this
// library comes first: dlsym on a handle to itself, checked with dladdr to
// be this library's and not libgloo.so.0's (a dependency of it).
TORCH_API void *hpct_torch_gloo_connect_full_mesh(void)
{
	Dl_info self, found;
	if (!dladdr((void *)hpct_torch_gloo_connect_full_mesh, &self) || !self.dli_fname)
		return nullptr;
	void *h = dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
	if (!h)
		return nullptr;
	void *f = dlsym(h, CONNECT_FULL_MESH);
	dlclose(h); // the NOLOAD reference only: the library stays
	if (!f || !dladdr(f, &found) || found.dli_fbase != self.dli_fbase)
		return nullptr;
	return f;
}

// The mangled name of what hpct_torch_gloo_connect_full_mesh returns,
// as libtorch_cpu.so.1.13 imports it.
TORCH_API const char *hpct_torch_gloo_symbol(void)
{
	return CONNECT_FULL_MESH;
}
