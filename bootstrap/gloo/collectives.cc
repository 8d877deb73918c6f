// Gloo's collectives behind C calls: arguments checked and named, element
// types and reductions chosen at run time, exceptions turned into codes.
#include <cstdint>
#include <cstring>
#include <limits>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/types.h>

#include "bootstrap/gloo/gloo_internal.hpp"

namespace
{

using ReduceFn = void (*)(void *, const void *, const void *, size_t);

// Sizes Gloo's buffers can hold and our counts may ask for.
constexpr size_t kMaxBytes = (size_t)1 << 40;
// Up to this many bytes a reduce, and the reduce half of an allreduce, go
// up a binomial tree built on Gloo's point-to-point buffers (N-1 messages,
// ceil(log2 N) steps; an allreduce adds Gloo's own binomial broadcast).
// Gloo's bcube exchanges 2 log2 N messages per rank: at 64 ranks on 2 cores
// a 4 KiB allreduce took about 35 ms with bcube and about 10 ms this way.
constexpr size_t kTreeMaxBytes = 16 * 1024;
// Up to this many bytes an allreduce takes Gloo's bcube (log N steps, or one
// direct exchange when N does not factor); above it the ring, whose 2(N-1)
// steps pay off only once bandwidth dominates.  At 64 ranks on 2 cores a
// 4 KiB ring allreduce took about 450 ms, bcube a small fraction of that.
constexpr size_t kBcubeMaxBytes = 256 * 1024;
// Slot prefix of the tree reduce: above the prefixes Gloo's own
// collectives use (gloo/types.h), so their messages never match ours.
constexpr uint8_t kTreeSlotPrefix = 0x40;
static_assert(kTreeSlotPrefix > gloo::kAlltoallSlotPrefix, "slot prefix taken by Gloo");
// "this call has no such argument", never a value a caller can pass
constexpr int kNone = std::numeric_limits<int>::min();

size_t elem_size(int dtype)
{
	switch (dtype) {
	case HPCT_GLOO_F32:
	case HPCT_GLOO_I32:
		return 4;
	case HPCT_GLOO_F64:
	case HPCT_GLOO_I64:
		return 8;
	}
	return 0;
}

template <typename T> ReduceFn fn_for(int op)
{
	switch (op) {
	case HPCT_GLOO_SUM:
		return &gloo::sum<T>;
	case HPCT_GLOO_MIN:
		return &gloo::min<T>;
	case HPCT_GLOO_MAX:
		return &gloo::max<T>;
	case HPCT_GLOO_PROD:
		return &gloo::product<T>;
	}
	return nullptr;
}

ReduceFn reduce_fn(int dtype, int op)
{
	switch (dtype) {
	case HPCT_GLOO_F32:
		return fn_for<float>(op);
	case HPCT_GLOO_F64:
		return fn_for<double>(op);
	case HPCT_GLOO_I32:
		return fn_for<int32_t>(op);
	case HPCT_GLOO_I64:
		return fn_for<int64_t>(op);
	}
	return nullptr;
}

// Checks shared by every call; 0 when the call may go on.
int check(hpct_gloo_context *c, const char *op, const void *buf, const char *bufname, size_t count,
          int dtype, int reduce_op, int root)
{
	if (!c)
		return hpct_gloo::fail_plain(HPCT_EINVAL, "Gloo %s: context is NULL", op);
	int rank = c->world_rank;
	if (c->failed)
		return hpct_gloo::fail_plain(
		        c->failed, "rank %d: Gloo %s on a context that already failed", rank, op);
	if (bufname && !buf)
		return hpct_gloo::fail_plain(HPCT_EINVAL, "rank %d: Gloo %s: %s is NULL", rank, op,
		                             bufname);
	if (dtype != kNone && elem_size(dtype) == 0)
		return hpct_gloo::fail_plain(HPCT_EINVAL, "rank %d: Gloo %s: unknown dtype %d",
		                             rank, op, dtype);
	if (dtype != kNone && (count == 0 || count > kMaxBytes / elem_size(dtype)))
		return hpct_gloo::fail_plain(HPCT_EINVAL,
		                             "rank %d: Gloo %s: count %zu must be 1..%zu", rank, op,
		                             count, kMaxBytes / elem_size(dtype));
	if (reduce_op != kNone && !reduce_fn(dtype, reduce_op))
		return hpct_gloo::fail_plain(HPCT_EINVAL, "rank %d: Gloo %s: unknown op %d", rank,
		                             op, reduce_op);
	if (root != kNone && (root < 0 || root >= c->ctx->size))
		return hpct_gloo::fail_plain(
		        HPCT_EINVAL,
		        "rank %d: Gloo %s: root %d is not a rank of the context (size %d)", rank,
		        op, root, c->ctx->size);
	return 0;
}

// Gloo's options take typed pointers; bytes are bytes to the algorithms
// used here, but the element size must be right.
template <typename Opts> void set_in(Opts &o, const void *p, size_t count, int dtype)
{
	if (elem_size(dtype) == 4)
		o.setInput((int32_t *)p, count);
	else
		o.setInput((int64_t *)p, count);
}

template <typename Opts> void set_out(Opts &o, void *p, size_t count, int dtype)
{
	if (elem_size(dtype) == 4)
		o.setOutput((int32_t *)p, count);
	else
		o.setOutput((int64_t *)p, count);
}

// Reduces `acc` (bytes long, in place) into the root's copy up a binomial
// tree: in virtual ranks (root = 0), rank v takes its children v + 2^i in
// increasing i while bit i of v is clear, then sends to v - 2^i.  Every
// rank combines in the same order, so a result does not depend on timing.
// Off the root, acc ends as a partial result.  Gloo's exceptions pass.
void tree_reduce(hpct_gloo_context *c, void *acc, size_t count, size_t bytes, ReduceFn fn, int root)
{
	const auto &ctx = c->ctx;
	const int n = ctx->size, v = (ctx->rank - root + n) % n;
	const auto slot = gloo::Slot::build(kTreeSlotPrefix, 0);
	std::vector<int64_t> scratch((bytes + 7) / 8);
	auto mine = ctx->createUnboundBuffer(acc, bytes);
	auto theirs = ctx->createUnboundBuffer(scratch.data(), bytes);
	for (int bit = 1; bit < n; bit <<= 1) {
		if (v & bit) {
			mine->send((v - bit + root) % n, slot);
			mine->waitSend(c->timeout);
			return;
		}
		if (v + bit < n) {
			theirs->recv((v + bit + root) % n, slot);
			theirs->waitRecv(c->timeout);
			fn(acc, acc, scratch.data(), count);
		}
	}
}

} // namespace

extern "C" HPCT_API int hpct_gloo_allreduce(hpct_gloo_context *c, void *buf, size_t count,
                                            enum hpct_gloo_dtype dtype, enum hpct_gloo_op op)
{
	int rc = check(c, "allreduce", buf, "buf", count, dtype, op, kNone);
	if (rc)
		return rc;
	size_t bytes = count * elem_size(dtype);
	try {
		if (bytes <= kTreeMaxBytes) {
			tree_reduce(c, buf, count, bytes, reduce_fn(dtype, op), 0);
			gloo::BroadcastOptions b(c->ctx);
			set_out(b, buf, count, dtype);
			b.setRoot(0);
			b.setTimeout(c->timeout);
			gloo::broadcast(b);
			return 0;
		}
		gloo::AllreduceOptions o(c->ctx);
		set_out(o, buf, count, dtype); // output alone: Gloo's in-place form
		if (bytes <= kBcubeMaxBytes)
			o.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
		o.setReduceFunction(reduce_fn(dtype, op));
		o.setTimeout(c->timeout);
		gloo::allreduce(o);
	} catch (const std::exception &e) {
		return hpct_gloo::fail(c, "allreduce", e);
	}
	return 0;
}

extern "C" HPCT_API int hpct_gloo_reduce(hpct_gloo_context *c, const void *in, void *out,
                                         size_t count, enum hpct_gloo_dtype dtype,
                                         enum hpct_gloo_op op, int root)
{
	int rc = check(c, "reduce", in, "in", count, dtype, op, root);
	if (rc == 0 && c->ctx->rank == root && !out)
		rc = hpct_gloo::fail_plain(HPCT_EINVAL,
		                           "rank %d: Gloo reduce: out is NULL on the root",
		                           c->world_rank);
	if (rc)
		return rc;
	size_t bytes = count * elem_size(dtype);
	try {
		if (bytes <= kTreeMaxBytes) {
			// the root's partial sums build up in out, elsewhere in scratch
			std::vector<int64_t> scratch;
			void *acc = out;
			if (c->ctx->rank != root) {
				scratch.resize((bytes + 7) / 8);
				acc = scratch.data();
			}
			if (acc != in)
				std::memmove(acc, in, bytes);
			tree_reduce(c, acc, count, bytes, reduce_fn(dtype, op), root);
			return 0;
		}
		gloo::ReduceOptions o(c->ctx);
		set_in(o, in, count, dtype);
		// Gloo wants an output everywhere; off the root it is scratch.
		std::vector<int64_t> scratch;
		if (c->ctx->rank != root || !out) {
			scratch.resize((count * elem_size(dtype) + 7) / 8);
			out = scratch.data();
		}
		set_out(o, out, count, dtype);
		o.setRoot(root);
		o.setReduceFunction(reduce_fn(dtype, op));
		o.setTimeout(c->timeout);
		gloo::reduce(o);
	} catch (const std::exception &e) {
		return hpct_gloo::fail(c, "reduce", e);
	}
	return 0;
}

extern "C" HPCT_API int hpct_gloo_broadcast(hpct_gloo_context *c, void *buf, size_t count,
                                            enum hpct_gloo_dtype dtype, int root)
{
	int rc = check(c, "broadcast", buf, "buf", count, dtype, kNone, root);
	if (rc)
		return rc;
	try {
		gloo::BroadcastOptions o(c->ctx);
		set_out(o, buf, count, dtype);
		o.setRoot(root);
		o.setTimeout(c->timeout);
		gloo::broadcast(o);
	} catch (const std::exception &e) {
		return hpct_gloo::fail(c, "broadcast", e);
	}
	return 0;
}

extern "C" HPCT_API int hpct_gloo_allgather(hpct_gloo_context *c, const void *in, void *out,
                                            size_t count, enum hpct_gloo_dtype dtype)
{
	int rc = check(c, "allgather", in, "in", count, dtype, kNone, kNone);
	if (rc == 0 && !out)
		rc = hpct_gloo::fail_plain(HPCT_EINVAL, "rank %d: Gloo allgather: out is NULL",
		                           c->world_rank);
	if (rc)
		return rc;
	try {
		gloo::AllgatherOptions o(c->ctx);
		set_in(o, in, count, dtype);
		set_out(o, out, count * (size_t)c->ctx->size, dtype);
		o.setTimeout(c->timeout);
		gloo::allgather(o);
	} catch (const std::exception &e) {
		return hpct_gloo::fail(c, "allgather", e);
	}
	return 0;
}

extern "C" HPCT_API int hpct_gloo_barrier(hpct_gloo_context *c)
{
	int rc = check(c, "barrier", nullptr, nullptr, 1, kNone, kNone, kNone);
	if (rc)
		return rc;
	try {
		gloo::BarrierOptions o(c->ctx);
		o.setTimeout(c->timeout);
		gloo::barrier(o);
	} catch (const std::exception &e) {
		return hpct_gloo::fail(c, "barrier", e);
	}
	return 0;
}
