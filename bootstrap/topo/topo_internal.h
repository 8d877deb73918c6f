/* Inside topo/: what topo.c, hostfile.c and pmix.c share.  Nothing outside those
 * two files includes this. */
#ifndef HPCT_TOPO_INTERNAL_H
#define HPCT_TOPO_INTERNAL_H

#include "bootstrap/topo/topo.h"

/* Fails with HPCT_ENOMEM, naming the world size being read. */
int hpct__topo_no_memory(int size);

/* Fills local_of, node, local_rank, local_size and max_local from node_of;
 * tasks (t->nnodes entries) is scratch and ends as the ranks per node. */
void hpct__topo_count_locals(struct hpct_topo *t, int *tasks);

/* Reads HPCT_HOSTFILE=path for a world of t->size ranks (size_src: the
 * variable the size came from, for messages).  A table, "RANK HOST[:PORT]"
 * per line, fills t (hosts, nnodes, node_of, local_of, port_of, the local
 * counts: t->node_of set); one host per line gives *plain_out (malloc'd
 * strings, free with hpct__strv_free) and *nplain_out.  Errors are logged
 * here, naming the file and line; what was put in t is then left for
 * hpct__topo_free. */
int hpct__topo_read_hostfile(const char *path, const char *size_src, struct hpct_topo *t,
                             char ***plain_out, int *nplain_out);

/* The node list and every rank's node from the PMIx server that launched
 * this process (PMIX_NAMESPACE set; pmix.c).  Fills t as a host table does
 * (node_of set), or leaves t->nnodes 0 with t->why_not_rootless saying why
 * PMIx could not be read; fails when PMIx's rank or size contradicts the
 * environment's (size_src: the variable of the size). */
int hpct__topo_read_pmix(const struct hpct_env *env, struct hpct_topo *t, const char *size_src);

#endif
