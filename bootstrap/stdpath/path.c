/* The standard path's row of the path table: rank 0 serves the rendezvous at
 * MASTER_ADDR:MASTER_PORT, every rank is its client, and every collective
 * goes through it (coll.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/auth.h"
#include "bootstrap/base/log.h"
#include "bootstrap/base/util.h"
#include "bootstrap/stdpath/coll.h"
#include "bootstrap/stdpath/stdpath.h"
#include "bootstrap/world.h"

static int std_start(struct hpct_world *w, const struct hpct_world_opts *opts)
{
	(void)opts; /* how rootless peers are reached: nothing to the standard path */
	struct hpct_topo *t = &w->topo;
	if (!t->master_addr || !t->master_port)
		return hpct__fail(
		        HPCT_ENOTOPO, HPCT_SUB_INIT,
		        "rank %d: the standard path needs MASTER_ADDR and MASTER_PORT "
		        "(MASTER_ADDR=%s MASTER_PORT=%d)%s%s",
		        t->rank, t->master_addr ? t->master_addr : "(unset)", t->master_port,
		        t->why_not_rootless[0] ? "; rootless is not possible either: " : "",
		        t->why_not_rootless);
	snprintf(w->listen_text, sizeof(w->listen_text), "%s:%d", t->master_addr, t->master_port);
	double deadline = hpct__now() + t->timeout_s;
	int rc;
	struct hpct_auth_key key = { .secret = t->secret, .len = t->secret_len, .epoch = t->epoch };
	if (t->rank == 0) {
		/* the job's own deadline, from whichever environment the topology read */
		struct hpct_std_limits lim;
		if ((rc = hpct__std_limits_default(t->size, &lim)) != 0)
			return rc;
		lim.hello_s = t->timeout_s;
		rc = hpct__std_server_start_limits(t->master_addr, t->master_port, t->size, t->job,
		                                   &key, &lim, &w->server);
		if (rc < 0)
			return rc;
	}
	rc = hpct__std_client_connect(t->master_addr, t->master_port, t->rank, t->size, t->job,
	                              &key, deadline, &w->client);
	if (rc < 0)
		return rc;
	HPCT_INFO(HPCT_SUB_INIT, "standard: rank %d of %d through the rendezvous at %s", t->rank,
	          t->size, w->listen_text);
	return 0;
}

/* Rank 0 closes its own client first, or its server waits for the deadline. */
static void std_stop(struct hpct_world *w, double deadline, int graceful)
{
	(void)graceful; /* BYE either way: the server must not report this rank lost */
	hpct__std_client_close(w->client);
	hpct__std_server_stop(w->server, deadline);
}

static void std_stats(const struct hpct_world *w, struct hpct_world_stats *s)
{
	if (w->client)
		s->conns_opened = 1;
}

static void failure_key(char *buf, size_t len, const struct hpct_world *w, uint64_t group)
{
	snprintf(buf, len, "e%llu/g%016llx/failure", (unsigned long long)w->topo.epoch,
	         (unsigned long long)group);
}

static void std_tell_failure(struct hpct_world *w, uint64_t group, const char *text)
{
	if (!w->client)
		return;
	char key[96];
	failure_key(key, sizeof(key), w, group);
	hpct__std_set(w->client, key, text, strlen(text) + 1, 0, hpct__now() + 1);
}

/* The teller's key, or at once the store's word that a rank left. */
static int std_learn_failure(struct hpct_world *w, uint64_t group, double wait_s, char *buf,
                             size_t len)
{
	double deadline = hpct__now() + wait_s;
	if (!w->client)
		return 0;
	char key[96];
	failure_key(key, sizeof(key), w, group);
	void *val = NULL;
	size_t n = 0;
	int rc = hpct__std_get(w->client, key, &val, &n, deadline);
	if (rc == 0) {
		snprintf(buf, len, "%.*s", (int)n, (const char *)val);
		free(val);
		return 1;
	}
	if (rc == HPCT_EPEERDEAD) {
		snprintf(buf, len, "%s", hpct_last_error());
		return 1;
	}
	return 0;
}

/* In-process recovery through the same rendezvous: it lives in rank 0, so
 * only while rank 0 survived.  The survivors keep their connection and tell
 * the server their new epoch; a replacement starts at that epoch and says so
 * after its HELLO; the collectives' keys carry the epoch, and the ranks
 * lost at the old one fail none of the new epoch's waits. */
static int std_recover(struct hpct_world *w, uint64_t epoch, const int *replaced, int nreplaced)
{
	struct hpct_topo *t = &w->topo;
	if (nreplaced > 0 && replaced[0] == 0)
		return hpct__fail(HPCT_EPEERDEAD, HPCT_SUB_INIT,
		                  "rank %d: recovery to epoch %llu: rank 0 was replaced, and the "
		                  "standard path's rendezvous (%s) lived in it: the survivors "
		                  "cannot meet again in process; restart every rank",
		                  t->rank, (unsigned long long)epoch, w->listen_text);
	if (!w->client)
		return hpct__fail(HPCT_ESTATE, HPCT_SUB_INIT,
		                  "rank %d: recovery to epoch %llu: no rendezvous client", t->rank,
		                  (unsigned long long)epoch);
	int rc = hpct__std_client_epoch(w->client, epoch, hpct__now() + t->timeout_s);
	if (rc < 0)
		return rc;
	t->epoch = epoch;
	return 0;
}

const struct hpct_path_ops hpct__path_standard = {
	.path = HPCT_PATH_STANDARD,
	.name = "standard",
	.start = std_start,
	.stop = std_stop,
	.allgather = hpct__std_allgather,
	.barrier = hpct__std_barrier,
	.broadcast = hpct__std_broadcast,
	.alltoall = hpct__std_alltoall,
	.stats = std_stats,
	.tell_failure = std_tell_failure,
	.learn_failure = std_learn_failure,
	.recover = std_recover,
};
