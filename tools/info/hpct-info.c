/* hpct-info: this process's derived view of the world, computed as a rank
 * would compute it, with no network traffic; --env prints every setting. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/base/param.h"
#include "bootstrap/base/util.h"
#include "bootstrap/topo/derive.h"
#include "bootstrap/topo/topo.h"
#include "hpct/hpct.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: hpct-info [--env] [--peers N]\n"
	           "  prints this process's rank, node, listen address, peers and group ids\n"
	           "  as derived from the environment; --env lists every setting hpct reads\n"
	           "  --peers N   show at most N peers (default 32, 0 for all)\n");
}

static void print_env(void)
{
	size_t n;
	const struct hpct_param *p = hpct__params(&n);
	printf("%-28s %-8s %-8s %-24s %s\n", "VARIABLE", "TYPE", "DEFAULT", "VALUE", "HELP");
	for (size_t i = 0; i < n; i++) {
		/* empty counts as unset, as the library reads it */
		const char *v = hpct__env_str(hpct__env_process(), p[i].name);
		if (v && strcmp(p[i].name, "HPCT_SECRET") == 0)
			v = "(hidden)";
		printf("%-28s %-8s %-8s %-24s %s\n", p[i].name, hpct__param_type_name(p[i].type),
		       p[i].def ? p[i].def : "-", v ? v : "(unset)", p[i].help);
	}
}

int main(int argc, char **argv)
{
	int env = 0, max_peers = 32;
	static const struct option opts[] = { { "env", no_argument, NULL, 'e' },
		                              { "peers", required_argument, NULL, 'p' },
		                              { "help", no_argument, NULL, 'h' },
		                              { NULL, 0, NULL, 0 } };
	int c;
	while ((c = getopt_long(argc, argv, "ep:h", opts, NULL)) != -1) {
		switch (c) {
		case 'e':
			env = 1;
			break;
		case 'p':
			max_peers = atoi(optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	printf("hpct %s\n", hpct_version());
	if (env) {
		print_env();
		return 0;
	}
	struct hpct_topo t;
	int rc = hpct__topo_read(hpct__env_process(), &t);
	if (rc < 0) {
		fprintf(stderr, "hpct-info: %s (%s)\n", hpct_last_error(), hpct_errname(rc));
		return 1;
	}
	int rootless = t.want_rootless && t.nnodes > 0;
	printf("rank         %d of %d (local %d of %d)\n", t.rank, t.size, t.local_rank,
	       t.local_size);
	printf("job          '%s' (hash %016llx), epoch %llu\n", t.job_name,
	       (unsigned long long)t.job, (unsigned long long)t.epoch);
	printf("path         %s\n", rootless ? "rootless" : "standard");
	if (t.want_rootless && !rootless)
		printf("             (HPCT_USE_ROOTLESS=1, but %s)\n", t.why_not_rootless);
	if (t.secret)
		printf("peers        authenticated: hpct's connections prove the secret from %s "
		       "(HMAC-SHA256), Gloo's pairs are checked, NCCL's magic is keyed by it\n",
		       t.secret_src);
	else
		printf("peers        not authenticated (set HPCT_SECRET or HPCT_SECRET_FILE on "
		       "every "
		       "rank)\n");
	printf("timeout      %.1f s\n", t.timeout_s);
	printf("world group  %016llx\n",
	       (unsigned long long)hpct__derive_world_group(t.job, t.epoch, t.size));
	if (t.master_addr)
		printf("rendezvous   %s:%d (standard path)\n", t.master_addr, t.master_port);
	if (t.nnodes == 0) {
		printf("nodes        none listed (%s)\n", t.why_not_rootless);
		hpct__topo_free(&t);
		return 0;
	}
	printf("nodes        %d, from %s; node %d is %s\n", t.nnodes, t.nodelist_src, t.node,
	       t.hosts[t.node]);
	printf("ports        %d..%d, window %d of %d (%d ports each)\n", t.port_base,
	       t.port_base + t.port_range - 1, hpct__derive_window(&t, t.epoch),
	       t.port_range / (t.max_local > 0 ? t.max_local : 1), t.max_local);
	printf("%6s %6s %6s  %-24s %s\n", "RANK", "NODE", "LOCAL", "HOST", "ADDRESS");
	for (int r = 0; r < t.size; r++) {
		if (max_peers > 0 && r >= max_peers && r != t.rank) {
			if (r == max_peers)
				printf("   ... %d more (--peers 0 shows all)\n",
				       t.size - max_peers);
			continue;
		}
		int node = t.node_of[r], port = hpct__derive_port(&t, r);
		struct sockaddr_storage ss;
		socklen_t sl;
		char addr[HPCT_ADDRSTRLEN];
		if (hpct__resolve(t.hosts[node], port, t.family, &ss, &sl) == 0)
			hpct__addr_str((struct sockaddr *)&ss, addr, sizeof(addr));
		else
			snprintf(addr, sizeof(addr), "(unresolved):%d", port);
		printf("%6d %6d %6d  %-24s %s%s\n", r, node, t.local_of[r], t.hosts[node], addr,
		       r == t.rank ? "   <- this process" : "");
	}
	hpct__topo_free(&t);
	return 0;
}
