/* The node list and where each rank runs, from the launcher's PMIx server
 * (Open MPI's mpirun, PRRTE, Slurm's srun --mpi=pmix), through the PMIx
 * client library.  libpmix.so.2 is loaded at run time, only in a process a
 * PMIx server launched (PMIX_NAMESPACE set); a program that also uses MPI
 * shares the one instance (the same soname), whose PMIx_Init counts its
 * callers.  PMIx is initialised once and finalised at exit, never earlier:
 * a PMIx_Finalize before MPI_Init breaks MPI_Init ("getting local rank
 * failed", Open MPI 4.1 with PMIx 4.2). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/log.h"
#include "bootstrap/topo/hostlist.h"
#include "bootstrap/topo/topo_internal.h"
#include "hpct/hpct.h"

#ifdef HPCT_HAVE_PMIX
#include <pmix.h>

/* What this process's PMIx server says, read once. */
static struct {
	pthread_once_t once;
	char why[256]; /* non-empty: nothing was read, and why */
	char nspace[PMIX_MAX_NSLEN + 1];
	uint32_t rank, size;
	char **hosts;
	int nnodes;
	int *node_of; /* size entries */
} view = { .once = PTHREAD_ONCE_INIT };

static struct {
	pmix_status_t (*init)(pmix_proc_t *, pmix_info_t *, size_t);
	pmix_status_t (*finalize)(const pmix_info_t *, size_t);
	pmix_status_t (*get)(const pmix_proc_t *, const char *, const pmix_info_t *, size_t,
	                     pmix_value_t **);
	pmix_status_t (*resolve_nodes)(const char *, char **);
	pmix_status_t (*resolve_peers)(const char *, const char *, pmix_proc_t **, size_t *);
	const char *(*error_string)(pmix_status_t);
} px;

static void finalize_at_exit(void)
{
	px.finalize(NULL, 0);
}

static int load(void)
{
	/* by soname: the instance an MPI library already loaded, if any */
	void *h = dlopen("libpmix.so.2", RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		snprintf(view.why, sizeof(view.why), "libpmix.so.2 cannot be loaded: %s",
		         dlerror());
		return -1;
	}
	*(void **)&px.init = dlsym(h, "PMIx_Init");
	*(void **)&px.finalize = dlsym(h, "PMIx_Finalize");
	*(void **)&px.get = dlsym(h, "PMIx_Get");
	*(void **)&px.resolve_nodes = dlsym(h, "PMIx_Resolve_nodes");
	*(void **)&px.resolve_peers = dlsym(h, "PMIx_Resolve_peers");
	*(void **)&px.error_string = dlsym(h, "PMIx_Error_string");
	if (!px.init || !px.finalize || !px.get || !px.resolve_nodes || !px.resolve_peers ||
	    !px.error_string) {
		snprintf(view.why, sizeof(view.why),
		         "libpmix.so.2 lacks PMIx_Resolve_peers or "
		         "another function of PMIx 2 and later");
		return -1;
	}
	return 0;
}

static void read_view(void)
{
	if (load())
		return;
	pmix_proc_t me;
	pmix_status_t rc = px.init(&me, NULL, 0);
	if (rc != PMIX_SUCCESS) {
		snprintf(view.why, sizeof(view.why), "PMIx_Init: %s", px.error_string(rc));
		return;
	}
	atexit(finalize_at_exit);
	snprintf(view.nspace, sizeof(view.nspace), "%s", me.nspace);
	view.rank = me.rank;

	pmix_proc_t all;
	memset(&all, 0, sizeof(all));
	memcpy(all.nspace, me.nspace, sizeof(all.nspace));
	all.rank = PMIX_RANK_WILDCARD;
	pmix_value_t *v = NULL;
	rc = px.get(&all, PMIX_JOB_SIZE, NULL, 0, &v);
	if (rc != PMIX_SUCCESS || !v || v->type != PMIX_UINT32) {
		snprintf(view.why, sizeof(view.why), "PMIx_Get(%s): %s", PMIX_JOB_SIZE,
		         rc != PMIX_SUCCESS ? px.error_string(rc) : "not a uint32");
		free(v);
		return;
	}
	view.size = v->data.uint32;
	free(v);

	char *list = NULL;
	rc = px.resolve_nodes(me.nspace, &list);
	if (rc != PMIX_SUCCESS || !list || !*list) {
		snprintf(view.why, sizeof(view.why), "PMIx_Resolve_nodes: %s",
		         rc != PMIX_SUCCESS ? px.error_string(rc) : "no nodes");
		free(list);
		return;
	}
	char err[256];
	int n = 0;
	if (hpct__hostlist_parse(list, view.size, &view.hosts, &n, err, sizeof(err))) {
		snprintf(view.why, sizeof(view.why), "PMIx_Resolve_nodes gave '%.80s': %.100s",
		         list, err);
		free(list);
		return;
	}
	free(list);
	view.nnodes = n;
	if (!(view.node_of = malloc((size_t)view.size * sizeof(int)))) {
		snprintf(view.why, sizeof(view.why), "out of memory");
		return;
	}
	for (uint32_t r = 0; r < view.size; r++)
		view.node_of[r] = -1;
	for (int k = 0; k < n; k++) {
		pmix_proc_t *procs = NULL;
		size_t np = 0;
		rc = px.resolve_peers(view.hosts[k], me.nspace, &procs, &np);
		if (rc != PMIX_SUCCESS) {
			snprintf(view.why, sizeof(view.why), "PMIx_Resolve_peers(%s): %s",
			         view.hosts[k], px.error_string(rc));
			free(procs);
			return;
		}
		for (size_t i = 0; i < np; i++) {
			uint32_t r = procs[i].rank;
			if (r >= view.size || view.node_of[r] >= 0) {
				snprintf(view.why, sizeof(view.why),
				         "PMIx_Resolve_peers(%.64s) gave rank %u %s", view.hosts[k],
				         r, r >= view.size ? "beyond the job's size" : "twice");
				free(procs);
				return;
			}
			view.node_of[r] = k;
		}
		free(procs);
	}
	for (uint32_t r = 0; r < view.size; r++)
		if (view.node_of[r] < 0) {
			snprintf(view.why, sizeof(view.why),
			         "PMIx places rank %u on none of the %d nodes", r, n);
			return;
		}
}

static void read_once(void)
{
	read_view();
	if (view.why[0]) {
		free(view.node_of);
		view.node_of = NULL;
		hpct__strv_free(view.hosts, view.nnodes);
		view.hosts = NULL;
		view.nnodes = 0;
	}
}

int hpct__topo_read_pmix(const struct hpct_env *env, struct hpct_topo *t, const char *size_src)
{
	const char *ns = hpct__env_str(env, "PMIX_NAMESPACE");
	pthread_once(&view.once, read_once);
	if (view.why[0]) {
		snprintf(t->why_not_rootless, sizeof(t->why_not_rootless),
		         "no node list: PMIx (PMIX_NAMESPACE=%s) could not be read: %.150s", ns,
		         view.why);
		return 0;
	}
	if (view.size != (uint32_t)t->size || view.rank != (uint32_t)t->rank)
		return hpct__fail(HPCT_EBADENV, HPCT_SUB_ENV,
		                  "PMIx (namespace %s) says rank %u of %u, but %s says rank %d "
		                  "of %d",
		                  view.nspace, view.rank, view.size, size_src, t->rank, t->size);
	int n = view.nnodes;
	t->hosts = calloc((size_t)n, sizeof(char *));
	t->node_of = malloc((size_t)t->size * sizeof(int));
	t->local_of = malloc((size_t)t->size * sizeof(int));
	int *tasks = malloc((size_t)n * sizeof(int));
	if (!t->hosts || !t->node_of || !t->local_of || !tasks) {
		free(tasks);
		return hpct__topo_no_memory(t->size);
	}
	t->nnodes = n;
	for (int k = 0; k < n; k++)
		if (!(t->hosts[k] = strdup(view.hosts[k]))) {
			free(tasks);
			return hpct__topo_no_memory(t->size);
		}
	memcpy(t->node_of, view.node_of, (size_t)t->size * sizeof(int));
	hpct__topo_count_locals(t, tasks);
	free(tasks);
	t->nodelist_src = "PMIx (the launcher's node list and map)";
	return 0;
}

#else

int hpct__topo_read_pmix(const struct hpct_env *env, struct hpct_topo *t, const char *size_src)
{
	(void)size_src;
	snprintf(t->why_not_rootless, sizeof(t->why_not_rootless),
	         "no node list: PMIX_NAMESPACE=%s is set, but this hpct was built without "
	         "PMIx's headers (libpmix-dev)",
	         hpct__env_str(env, "PMIX_NAMESPACE"));
	return 0;
}

#endif
