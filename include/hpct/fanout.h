/* hpct fan-out: one versioned buffer delivered from the members of a group
 * that hold it to the members that need it (a replacement taking the job's
 * state from its peers; an RL job refitting its inference replicas).
 *
 * Waves: the members holding the wanted version are the first sources; in
 * each wave every source is given at most one receiver (spread over the
 * sources by the receiver's identity), and a receiver of wave k is a source
 * from wave k + 1, so sources double each wave: ceil(log2((S + R) / S))
 * waves for S sources and R receivers.  A member whose buffer holds another
 * version is a receiver and never serves it.  The buffer moves in chunks,
 * pulled by each receiver from its planned source; a source serves a chunk
 * as soon as it holds it, so a receiver forwards chunk i before it has the
 * whole buffer (pipelining).  The data moves on connections of the fan-out's
 * own between the two members (never through rank 0), on either path.
 *
 * Every chunk in flight is taken from one budget of this process
 * (HPCT_INFLIGHT_BYTES, HPCT_INFLIGHT_TRANSFERS), shared by every fan-out,
 * group and thread of the process and by hpct's other bulk work (Gloo pair
 * connects): what a process holds in flight does not grow with the number
 * of peers or of concurrent fan-outs.
 *
 * Threading as hpct.h: a group is used by one thread at a time; fan-outs on
 * groups of different worlds may run at once in one process. */
#ifndef HPCT_FANOUT_H
#define HPCT_FANOUT_H

#include <stddef.h>
#include <stdint.h>

#include "hpct/hpct.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Who serves whom.  Each is one row of one table of planners. */
enum hpct_fanout_plan {
	HPCT_FANOUT_WAVES = 0, /* finished receivers become sources for later waves */
	HPCT_FANOUT_PULL = 1,  /* every receiver pulls from the first sources only (baseline) */
	HPCT_FANOUT_TREE = 2,  /* binomial tree from the lowest-ranked source (baseline) */
};

/* NULL means: chunk HPCT_FANOUT_CHUNK (default 4 MiB), WAVES, pipelined. */
struct hpct_fanout_opts {
	size_t chunk; /* bytes of a chunk; 0: HPCT_FANOUT_CHUNK */
	enum hpct_fanout_plan plan;
	int no_pipeline; /* 1: a receiver serves nothing before it has it all */
};

/* What one member saw of one fan-out. */
struct hpct_fanout_stats {
	int waves;         /* waves of the plan */
	int sources_first; /* members holding the wanted version at the start */
	int sources_last;  /* sources of the plan's last wave */
	int replanned;     /* times this member moved to another source (its source died) */
	uint64_t bytes_sent;
	uint64_t bytes_recv;
	int peers;      /* distinct members this one exchanged chunks with */
	double seconds; /* the call, start to return */
};

/* Collective over `group`: every member calls it with the same name (1 to
 * 63 bytes), want (> 0), len and opts.  `held` is the version buf holds
 * here (0: none).  Members with held == want are the first sources and
 * only serve; every other member receives version `want` into buf (len
 * bytes, owned by the caller; what it held before is never served) and
 * serves it on as the plan says.  Blocks until this member's part is done:
 * it holds all len bytes of version `want`, and every receiver the plan
 * gave it has them too or died (a first source: every receiver of the
 * fan-out, since a receiver whose source died comes to one).  Starts
 * with one allgather over the group (who holds what, where each member's
 * data listener is).
 *
 * Faults: a receiver whose source dies takes the rest of the buffer from
 * another first source, from the chunk it lacked (stats.replanned); a
 * receiver that dies holds nobody up.  Errors: HPCT_EINVAL (NULL buf with
 * len > 0, want 0, a bad name or chunk, members disagreeing on len, want,
 * chunk or plan: the message names the member), HPCT_ESTATE (no member
 * holds `want`: the message names the group and the versions held),
 * HPCT_EPEERDEAD (every member that could serve this receiver died: named),
 * HPCT_ETIMEDOUT (past HPCT_TIMEOUT, naming the peer and its host:port),
 * the allgather's.  On failure buf is partly written. */
HPCT_API int hpct_fanout(hpct_group *group, const char *name, uint64_t want, uint64_t held,
                         void *buf, size_t len, const struct hpct_fanout_opts *opts,
                         struct hpct_fanout_stats *stats_out);

/* The process's in-flight budget, and the most it ever held at once. */
struct hpct_inflight_stats {
	uint64_t bytes_limit;     /* HPCT_INFLIGHT_BYTES */
	uint64_t transfers_limit; /* HPCT_INFLIGHT_TRANSFERS */
	uint64_t bytes_peak;      /* most bytes in flight at once since the process began */
	uint64_t transfers_peak;  /* most transfers in flight at once */
	uint64_t waits;           /* takes that had to wait (the store: were refused) */
};

/* Fills *out (process-wide; reads the settings on first use).  HPCT_EINVAL
 * for NULL, HPCT_EBADENV for a bad HPCT_INFLIGHT_* value. */
HPCT_API int hpct_inflight_get_stats(struct hpct_inflight_stats *out);

#ifdef __cplusplus
}
#endif
#endif
