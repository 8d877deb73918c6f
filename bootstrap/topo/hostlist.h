/* Parsers for the launcher's compact lists.  Pure functions; errors are
 * HPCT_EBADENV with a message in err (position and offending text), never
 * logged here: the caller names the variable. */
#ifndef HPCT_HOSTLIST_H
#define HPCT_HOSTLIST_H

#include <stddef.h>

/* Slurm hostlist syntax: "gpu-[01-04,07],cpu7", "n[1-2]-ib[0-1]", "a,b",
 * zero padding kept ("[08-11]" -> 08 09 10 11), IPv4 addresses and bracket-free
 * IPv6 literals are plain names.  At most max_hosts names.  On success
 * *hosts_out is a malloc'd array of malloc'd strings (free with
 * hpct__strv_free) and *n_out its length (>= 1). */
int hpct__hostlist_parse(const char *s, size_t max_hosts, char ***hosts_out, int *n_out, char *err,
                         size_t errlen);

/* Slurm tasks-per-node syntax: "8(x4),2" -> 8 8 8 8 2.  The expansion must
 * have exactly nnodes entries (nnodes <= 0: any count, *n_out tells) and
 * every count must be >= 1.  *counts_out is malloc'd. */
int hpct__tasks_per_node_parse(const char *s, int nnodes, int **counts_out, int *n_out, char *err,
                               size_t errlen);

void hpct__strv_free(char **v, int n);

#endif
