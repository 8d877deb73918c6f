/* Inside the rootless store's client: a handle (client.c's operations)
 * and how its requests reach their group's primary (route.c). */
#ifndef HPCT_STORE_ROUTE_H
#define HPCT_STORE_ROUTE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap/store/store_internal.h"

#define KEY_SHOWN 100

struct hpct_store {
	struct hpct_world *w;
	uint64_t ns;
	double timeout;
	pthread_mutex_t mu; /* one request at a time */
	/* per rank, the line a request holds (-1: none; given back to the
	 * world's lines when it ends), the answers it still owes, and whether
	 * it was taken idle (made by an earlier request: it may have broken
	 * since) */
	int *fd;
	int *owed;
	unsigned char *reused;
	struct hpct_lines *lines;
	struct hpct_store *prev, *next; /* the process's open handles */
	/* this handle's id and last write's number (a write's id: OP_RID) */
	uint64_t cid, seq;
	/* a request waits this long for its answer before the client asks the
	 * group's other members where it stands (HPCT_STORE_SUSPECT / 4) */
	double slice;
};

/* One request to the group of `key` (or group `g` when key is "": COUNT,
 * LIST), at its primary as far as this process knows it, following the
 * group's positions (ST_REDIRECT, WHO) and its members' failures until an
 * answer or the deadline: `wait_s` (a wait the home parks, 0: none) and
 * the handle's timeout.  A write (`write`) carries an id, so that the
 * group answers its retry with its first answer.  The answer's status (0
 * or the request's own error), or the failure, named; its fields in *rep
 * (malloc'd, the caller frees). */
int hpct__store_rpc(struct hpct_store *s, const char *what, uint8_t op, const char *key, int g,
                    const void *a, size_t alen, const void *b, size_t blen, double wait_s,
                    int write, unsigned char **rep, size_t *replen);
/* The same read for n keys (field `a` each), sent to their primaries at
 * once and answered in order (about one round trip for all); a key whose
 * answer is not final goes on alone.  rcs[i], reps[i], replens[i] as
 * hpct__store_rpc's. */
void hpct__store_rpc_many(struct hpct_store *s, const char *what, uint8_t op,
                          const char *const *keys, int n, const void *a, size_t alen, double wait_s,
                          int *rcs, unsigned char **reps, size_t *replens);
/* The handle's timeout, capped by HPCT_TIMEOUT (t < 0: the handle's). */
double hpct__store_cap(const struct hpct_store *s, double t);
/* "key..." (its first KEY_SHOWN bytes) in buf. */
const char *hpct__store_shown(const char *key, char *buf, size_t len);
/* "group G, home ranks A (host:port, primary), B (host:port), ..." of
 * key, as far as this process knows its group, in buf. */
const char *hpct__store_homes(struct hpct_store *s, const char *key, char *buf, size_t len);
/* The ranks whose store takes no connection now (hpct__store_unreachable). */
int hpct__store_probe(struct hpct_store *s, char *buf, size_t len);
/* A forked child's locks, free again (client.c's atfork). */
void hpct__store_route_child(void);
/* Gives the lines a request of s holds back to its world's (s->mu held):
 * those with no answer owed; the others are closed. */
void hpct__store_release(struct hpct_store *s);

/* The lines of world w (lines.c), made at its first store handle: NULL
 * for want of memory. */
struct hpct_lines *hpct__lines_of(struct hpct_world *w);
/* An idle line to rank r (its descriptor), or -1. */
int hpct__lines_take(struct hpct_lines *l, int r);
/* Line fd to rank r, idle again (or closed: r has enough idle ones). */
void hpct__lines_give(struct hpct_lines *l, int r, int fd);
/* Closes the idle lines to rank r (one of them was found broken: they
 * were all made before it broke, or r was replaced). */
void hpct__lines_drop(struct hpct_lines *l, int r);
/* Counts a line made: how many this world's store clients made so far. */
long hpct__lines_made(struct hpct_lines *l);
/* The idle lines to rank r, at most max, into fds: how many. */
int hpct__lines_idle_to(struct hpct_lines *l, int r, int *fds, int max);
/* In a forked child: every line forgotten (closed), the locks free. */
void hpct__lines_child(void);

#endif
