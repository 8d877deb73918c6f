/* The served store's replication protocol: Viewstamped Replication
 * (Liskov & Cowling, "Viewstamped Replication Revisited", 2012) per group
 * of keys, with leases for reads (Ongaro's thesis, 6.4.1) and its
 * reconfiguration as an operation of the group (VR Revisited, section 7).
 * A pure state machine: it is fed messages, ticks and connection events
 * with the time, and answers through struct vr_io (messages to send, data
 * to apply or install); it does no I/O and reads no clock, so that
 * tests/test_vr.c drives it deterministically.  docs/store.md states the
 * model; the invariants are named where they are kept.
 *
 * Groups.  The keys whose hash falls to g (0..size-1) form group g.  Its
 * configuration 0 is R ranks (HPCT_STORE_REPLICAS, 3 by default, at most
 * the world's size): g, then a rank on each next node (the same local
 * index), so that one node's loss takes at most one member; with fewer
 * nodes than R, the next ranks.  A quorum is a majority of the
 * configuration's members.  The primary of view v is members[v % n].
 *
 * Normal operation.  The primary orders the group's operations: it applies
 * one to its data, numbers it (opnum) and sends PREPARE with the entry
 * (what the operation left: opaque to this file) to the other members,
 * which apply it in order and ACK; an operation is committed once a quorum
 * holds it, and only then may any answer that depends on it go out
 * (vr_ready).  The primary sends a PREPARE with no entry (a beat) to each
 * member that heard nothing from it for `beat` seconds.
 *
 * Reads and leases.  A member that heard from its primary at time r
 * promises not to help any other view begin before r + lease; every
 * message from the primary carries its send time, which the ACK echoes.
 * The primary's `confirmed` time is the latest send time a quorum (itself
 * counted at "now") has echoed.  A read that arrived at t is answered from
 * the primary's data once everything it saw is committed and confirmed >=
 * t - 0.9 lease: no other view can have committed anything by t (a
 * quorum's promises outlast it by a tenth of the lease, for clocks that run
 * at rates within 10% of each other).  lease 0: every read waits for a
 * quorum to echo a send after it arrived.  A write is confirmed by its own
 * commit.
 *
 * View change.  A member suspects its primary when it heard nothing from
 * it for `suspect` seconds, its connection broke after it was reached, or
 * it said it is gone; once also its own promise has run out it starts a
 * view change (SVC) to the next view whose primary it does not know gone.
 * A member joins (SVC to all) only when its own promise has run out, or it
 * suspects the primary too.  A quorum of SVCs makes each send DVC with its
 * data's (log_view, opnum) and the data to the new primary, which takes
 * the best of a quorum of DVCs (highest log_view, then opnum: it holds
 * every committed operation) and sends STARTVIEW with that data to all.  A
 * view change that does not finish within `change` seconds goes on to the
 * next view.
 *
 * Reconfiguration.  The primary replaces a member it counts gone (no ACK
 * for `suspect` seconds after one came, a connection broken after it was
 * reached, or it said it is gone or leaving) with the next candidate as
 * placed above, by an operation (a CONFIG entry) ordered like any other;
 * no other operation is taken while one is pending.  Once it commits in
 * the old configuration, the primary sends NEWCFG with the data to the new
 * members, REJECTs the removed one, and the group goes on in configuration
 * cfg + 1, view 0.  A new view's primary finishes a pending one it finds.
 *
 * Leaving.  A rank that exits first asks to be replaced (GONE, leaving)
 * and serves on as a member until a configuration without it commits
 * (its own, where it is primary), so that ranks exiting one after another
 * hand every group on; then, or when its time is up, it says it is gone
 * (GONE, left) and goes.  In a
 * configuration of two members, one that left or was fenced counts for
 * the other in every quorum: it never acts again, and every operation
 * that committed is on the other (a quorum of two is both), so the last
 * rank standing keeps the group's keys.
 *
 * Fencing.  A member told (REJECT) that a later configuration left it out
 * for any reason but its own leaving is fenced: it stops serving
 * everything (vr_io.fenced), and so answers nothing from data that may be
 * stale.  Nothing depends on it beyond that: a member's leases and the
 * quorums alone keep every answer right whatever the failure detector
 * thinks (a false suspicion costs a member, never an answer).
 *
 * Timing assumptions: lease and suspect are measured on each member's
 * monotonic clock (which runs through SIGSTOP); a rank's clock runs at a
 * rate within 10% of another's; every time passed in is read after the
 * input it comes with was read. */
#ifndef HPCT_STORE_VR_H
#define HPCT_STORE_VR_H

#include <stddef.h>
#include <stdint.h>

#define VR_MAX 8 /* members of a configuration at most (HPCT_STORE_REPLICAS) */

enum vr_status {
	VR_NORMAL,  /* in (cfg, view), data in step with its primary's */
	VR_NOSTATE, /* in (cfg, view), waiting for the primary's data */
	VR_CHANGE,  /* a view change to `view` */
	VR_OUT,     /* not a member (never, removed, or left) */
};

enum vr_type {
	VR_PREPARE = 1, /* ts, opnum; the entry (none: a beat) */
	VR_ACK,         /* ts echoed, opnum held */
	VR_NEED,        /* send me your data */
	VR_STATE,       /* ts, opnum; data */
	VR_SVC,         /* a view change to view */
	VR_DVC,         /* log_view, opnum, pending reconfiguration; data */
	VR_STARTVIEW,   /* ts, opnum, pending reconfiguration; data */
	VR_NEWCFG,      /* ts, opnum, members: the configuration cfg; data */
	VR_REJECT,      /* you are behind: my cfg, view, status, members; why */
	VR_GONE,        /* I serve nothing any more (fenced, or I exit: LEFT); why */
	VR_TYPES
};

enum { VR_ENTRY_DATA = 0, VR_ENTRY_CONFIG = 1 };

/* REJECT's and GONE's flags */
#define VR_F_REMOVED 1 /* REJECT: the configuration named leaves you out */
#define VR_F_LEFT    2 /* REJECT: ... because you left; GONE: I left, not fenced */
#define VR_F_BEAT    4 /* PREPARE: no entry, a beat */
#define VR_F_LEAVING 8 /* GONE: I exit once a configuration without me commits */

/* What the layer above keeps of a group's data: received with a message
 * (DVC, STARTVIEW, STATE, NEWCFG) and given back through vr_io.install
 * or vr_io.release. */
struct vr_snap;

struct vr_msg {
	uint8_t type;
	uint32_t group, cfg, view;
	int from;
	uint64_t ts;    /* the primary's send time, ns; echoed in ACK */
	uint64_t opnum; /* PREPARE: the entry's; ACK, STATE, DVC, STARTVIEW,
	                 * NEWCFG: the data's */
	uint32_t log_view;
	uint8_t status, flags;
	int n;          /* members: NEWCFG's, REJECT's, a CONFIG entry's */
	int members[VR_MAX];
	/* a pending reconfiguration in the data (DVC, STARTVIEW, STATE):
	 * its CONFIG entry's opnum (0: none) and members */
	uint64_t next_at;
	int next_n;
	int next[VR_MAX];
	char why[160]; /* REJECT, GONE, a CONFIG entry: why a member went */
	uint8_t ekind;
	const void *entry; /* PREPARE: the entry (ekind DATA: opaque) */
	size_t elen;
	struct vr_snap *snap; /* received with DVC, STARTVIEW, STATE, NEWCFG */
};

enum vr_event {
	VR_EV_COMMIT, /* what is committed or confirmed moved on: held answers may go */
	VR_EV_ROLE,   /* this member's role or status changed: answer or redirect */
	VR_EV_DROP,   /* not a member any more: its data may go */
};

/* What the state machine asks of the layer above; ctx is theirs. */
struct vr_io {
	void *ctx;
	/* m to rank `to`; for STATE, DVC, STARTVIEW and NEWCFG the group's data
	 * as it is now goes first.  May drop it (a connection down): the
	 * protocol sends again what it must. */
	void (*send)(void *ctx, int to, const struct vr_msg *m);
	/* A DATA entry from the primary, in order: apply it to group g's data. */
	void (*apply)(void *ctx, uint32_t g, const void *entry, size_t len);
	/* Group g's data becomes snap (taken; NULL: none). */
	void (*install)(void *ctx, uint32_t g, struct vr_snap *snap);
	void (*release)(void *ctx, struct vr_snap *snap);
	void (*event)(void *ctx, uint32_t g, enum vr_event ev);
	/* This rank was counted gone: from now on it serves nothing. */
	void (*fenced)(void *ctx, const char *why);
	/* A line worth a log (INFO: a view or configuration change). */
	void (*note)(void *ctx, uint32_t g, const char *line);
};

#define VR_UNSAFE_QUORUM 1 /* tests' negative controls: a quorum of one */
#define VR_UNSAFE_FENCE  2 /* reads unconfirmed, promises and REJECTs ignored */

/* What every group of one rank's store shares: its world and timings. */
struct vr_world {
	int self, size, R;
	double lease, suspect, beat, change; /* seconds */
	int unsafe;
	/* placement: node of each rank, and each node's ranks in order */
	int nnodes;
	const int *node_of, *local_of;
	int *node_first, *node_ranks; /* CSR: node k's ranks node_ranks[node_first[k]..[k+1]) */
	/* ranks this rank counts gone (a hint for placement and view changes:
	 * 1 suspected or dead, 2 left, 3 fenced), and ranks whose store this
	 * rank reached once (one never reached may not have started yet: it
	 * is never suspected), both set by the layer above as well */
	unsigned char *gone, *reached;
	/* why a rank went, for the REJECTs that tell it (the latest few) */
	struct {
		int rank;
		char why[160];
	} why[16];
	int nwhy;
	/* this rank: fenced; exiting (vr_leaving), gone (vr_leave) */
	int fenced, leaving, left;
	char fence_why[300];
	struct vr_io io;
};

struct vr {
	uint32_t g;
	uint32_t cfg, view;
	enum vr_status status;
	int n;
	int members[VR_MAX];
	/* the data: the configuration it belongs to (-1: none), its log view
	 * and operations, a pending reconfiguration it holds */
	int64_t data_cfg;
	uint32_t log_view;
	uint64_t opnum;
	uint64_t next_at;
	int next_n;
	int next[VR_MAX];
	char next_why[160];
	/* primary: per member, the last opnum ACKed and send time echoed in
	 * this view, when it last ACKed (0: never), when it was last sent to */
	uint64_t commit;
	uint64_t acked[VR_MAX];
	double echoed[VR_MAX], last_ack[VR_MAX], last_sent[VR_MAX];
	int removing; /* a member the pending reconfiguration takes out, -1 */
	/* when this member took its role in this view; backup: when the
	 * primary was last heard (0: never), the promise */
	double since, heard, promise;
	int suspect, strong; /* strong: it said it is gone: no promise to keep */
	char suspect_why[160];
	/* view change: since when, SVCs and DVCs (bit per member index) */
	double change_since;
	unsigned svc, dvc;
	int dvc_sent;
	uint32_t dvc_max; /* the latest view this member sent a DVC for */
	int best; /* DVC chosen so far: member index (-1: own data) */
	uint32_t best_lv;
	uint64_t best_op, best_next_at;
	int best_next_n, best_next[VR_MAX];
	struct vr_snap *best_snap;
	uint32_t wait_view; /* an SVC this member may not join yet (its promise) */
	unsigned wait_svc;
	double rejected_at[VR_MAX + 1]; /* REJECTs sent (the last: to non-members) */
	double need_at, svc_at, dvc_at; /* NEED, SVC, DVC last sent */
	double ticked;                  /* the last vr_tick */
};

/* Sets up w (ranks, timings, placement); 0, or -1 for want of memory. */
int vr_world_init(struct vr_world *w, int self, int size, int R, int nnodes, const int *node_of,
                  const int *local_of);
void vr_world_free(struct vr_world *w);
/* A majority of n members (1 under VR_UNSAFE_QUORUM). */
int vr_quorum(const struct vr_world *w, int n);

/* Group g at configuration 0; a member starts NORMAL (empty data), hearing
 * its primary from `now` on. */
void vr_init(struct vr *v, const struct vr_world *w, uint32_t g, double now);
/* Group g's configuration-0 members (vr_init's placement) in out: how many. */
int vr_place(const struct vr_world *w, uint32_t g, const int *keep, int nkeep, int *out);

/* 1 when this rank is g's primary and takes operations now. */
int vr_primary(const struct vr *v, const struct vr_world *w);
/* The primary of the view this member knows (-1: none known). */
int vr_primary_of(const struct vr *v);
/* A new operation, whose entry the caller applied to its data already:
 * 0 and its opnum, or -1 (not the primary now, or a reconfiguration is
 * pending: the caller tries again once VR_EV_ROLE or VR_EV_COMMIT says). */
int vr_propose(struct vr *v, struct vr_world *w, double now, const void *entry, size_t len,
               uint64_t *opnum_out);
/* 1 when an answer that depends on the data up to opnum `need`, asked at
 * `asked` (the time its request was read), may go: committed, and (reads)
 * confirmed.  write: it is the answer of the operation need itself. */
int vr_ready(const struct vr *v, const struct vr_world *w, uint64_t need, double asked, int write,
             double now);
/* Asks the members for a confirmation now (a beat to each) unless one
 * went out at or after `asked`: a read that arrived then waits for it. */
void vr_confirm(struct vr *v, struct vr_world *w, double asked, double now);

void vr_recv(struct vr *v, struct vr_world *w, double now, const struct vr_msg *m);
/* Timers; the time of the next one this group wants. */
double vr_tick(struct vr *v, struct vr_world *w, double now);
/* The connection to `rank` broke or was refused: dead 1 when it had been
 * reached before (the process is gone), 0 when it was never reached. */
void vr_peer_down(struct vr *v, struct vr_world *w, double now, int rank, int dead);
/* A connection to `rank` is up (again): what it lost is sent again. */
void vr_peer_up(struct vr *v, struct vr_world *w, double now, int rank);
/* This rank is about to exit: GONE (leaving) to the other members; it
 * serves on until a configuration without it commits (OUT), which its
 * primary, or itself if primary, proposes. */
void vr_leaving(struct vr *v, struct vr_world *w, double now);
/* This rank exits: GONE (left) to the other members, which replace it at
 * once (a primary's backups begin a view change with no promise to keep),
 * and the group is OUT here. */
void vr_leave(struct vr *v, struct vr_world *w);
/* This rank is fenced (or gone): every group OUT, GONE to who asks. */
void vr_fence(struct vr_world *w, const char *why);

const char *vr_status_name(enum vr_status s);
const char *vr_type_name(int type);

#endif
