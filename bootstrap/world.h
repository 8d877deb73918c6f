/* Internal shape of a world and its groups, shared by world.c, group.c and
 * the two collective implementations (coll.c rootless, stdpath_coll.c
 * standard). */
#ifndef HPCT_WORLD_H
#define HPCT_WORLD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "bootstrap/rootless/engine.h"
#include "hpct/hpct.h"
#include "bootstrap/stdpath/stdpath.h"
#include "bootstrap/topo/topo.h"

struct hpct_group {
	struct hpct_world *world;
	uint64_t id;
	int rank, size;
	int *members;     /* group rank -> world rank; NULL for the world group */
	uint32_t seq;     /* collectives started on this group */
	uint64_t counter; /* children created from this group */
	int failed;       /* sticky: a failed collective leaves the group unusable */
	char failure[1024];
};

struct node_addr {
	int state; /* 0 unresolved, 1 resolved, <0 the error */
	struct sockaddr_storage ss;
	socklen_t len;
};

enum hpct_algo {
	HPCT_ALGO_TREE,  /* 4-nomial gather + broadcast: N-1 connections in all */
	HPCT_ALGO_BRUCK, /* Bruck allgather, dissemination barrier: log N rounds */
};

struct hpct_world {
	struct hpct_topo topo;
	enum hpct_path path;
	enum hpct_algo algo;            /* HPCT_ALGO, for allgather and barrier */
	struct hpct_engine *eng;        /* rootless */
	struct hpct_std_server *server; /* standard, rank 0 */
	struct hpct_std_client *client; /* standard */
	struct node_addr *nodes;        /* resolved lazily, once each */
	char listen_text[HPCT_ADDRSTRLEN];
	struct hpct_group group;      /* the world group */
	struct hpct_group **children; /* groups created and not destroyed */
	int nchildren, capchildren;
	int any_failed;
	/* HPCT_OFI_EXCHANGE: the fabric engine, until the names are exchanged
	 * over eng (TCP), then it becomes eng; every rank's endpoint name */
	struct hpct_engine *fabric_eng;
	unsigned char *names;
};

static inline int hpct__group_world_rank(const struct hpct_group *g, int grank)
{
	return g->members ? g->members[grank] : grank;
}

/* Records a group's failure once (sticky) and returns err. */
/* The address of world rank `rank`'s node, resolved once, port 0.
 * HPCT_ENOTOPO without a node list, HPCT_ERESOLVE if it does not resolve. */
int hpct__world_node_addr(struct hpct_world *w, int rank, struct sockaddr_storage *ss,
                          socklen_t *len);

int hpct__group_fail(struct hpct_group *g, int err, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Frees a child group (no communication). */
void hpct__group_free(struct hpct_group *g);

/* Rootless collectives (coll.c); arguments already checked. */
int hpct__coll_allgather(struct hpct_group *g, const void *item, size_t sz, void *out);
int hpct__coll_barrier(struct hpct_group *g);
int hpct__coll_broadcast(struct hpct_group *g, void *buf, size_t len, int root);
int hpct__coll_alltoall(struct hpct_group *g, const void *items, size_t sz, void *out);

/* Standard-path collectives through rank 0's store (stdpath_coll.c). */
int hpct__std_allgather(struct hpct_group *g, const void *item, size_t sz, void *out);
int hpct__std_barrier(struct hpct_group *g);
int hpct__std_broadcast(struct hpct_group *g, void *buf, size_t len, int root);
int hpct__std_alltoall(struct hpct_group *g, const void *items, size_t sz, void *out);

#endif
