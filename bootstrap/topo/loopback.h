/* How the local tools lay N ranks over K loopback "nodes": node k is
 * 127.0.0.(k+1), ranks go in blocks, the first N % K nodes hold one rank
 * more.  One definition for hpct-run, hpct-bench and the tests' harness,
 * which must agree with each other and with what hpct derives. */
#ifndef HPCT_LOOPBACK_LAYOUT_H
#define HPCT_LOOPBACK_LAYOUT_H

#include <stdio.h>

/* "127.0.0.1,127.0.0.2,..." for HPCT_HOSTS; cap should be nodes * 16 + 1. */
static inline void layout_hosts(char *buf, size_t cap, int nodes)
{
	size_t off = 0;
	buf[0] = 0;
	for (int k = 0; k < nodes && off < cap; k++)
		off += (size_t)snprintf(buf + off, cap - off, "%s127.0.0.%d", k ? "," : "", k + 1);
}

/* Ranks per node in Slurm's syntax for HPCT_TASKS_PER_NODE: "3(x2),2". */
static inline void layout_tasks(char *buf, size_t cap, int n, int nodes)
{
	int base = n / nodes, extra = n % nodes;
	size_t off = 0;
	buf[0] = 0;
	if (extra)
		off += (size_t)snprintf(buf, cap, extra > 1 ? "%d(x%d)" : "%d", base + 1, extra);
	if (nodes - extra && off < cap)
		snprintf(buf + off, cap - off, nodes - extra > 1 ? "%s%d(x%d)" : "%s%d",
		         off ? "," : "", base, nodes - extra);
}

/* The node of rank r and its index among that node's ranks. */
static inline void layout_place(int n, int nodes, int r, int *node_out, int *local_out)
{
	int base = n / nodes, extra = n % nodes;
	int big = extra * (base + 1); /* ranks on the nodes that hold base + 1 */
	*node_out = r < big ? r / (base + 1) : extra + (r - big) / base;
	*local_out = r < big ? r % (base + 1) : (r - big) % base;
}

/* The most ranks one node holds. */
static inline int layout_max_local(int n, int nodes)
{
	return n / nodes + (n % nodes > 0);
}

#endif
