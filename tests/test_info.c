/* hpct-info driven as a program (its path in HPCT_INFO_BIN) with
 * environments built here, so nothing leaks in from the caller's: the
 * settings table, the derived world and peer table, and what it says about
 * bad or incomplete environments. */
#include <criterion/criterion.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(info, .timeout = 30);

struct result {
	int code; /* exit status, or 256 + signal */
	char out[32768], err[8192];
	size_t nout, nerr;
};

static void drain(int fd, char *buf, size_t cap, size_t *n, int *open)
{
	char tmp[4096];
	ssize_t r = read(fd, tmp, sizeof(tmp));
	if (r < 0 && errno == EINTR)
		return;
	if (r <= 0) {
		*open = 0;
		return;
	}
	size_t k = (size_t)r;
	if (k > cap - 1 - *n)
		k = cap - 1 - *n;
	memcpy(buf + *n, tmp, k);
	*n += k;
	buf[*n] = '\0';
}

/* Runs hpct-info with argv (NULL-terminated, without argv[0]) and exactly
 * the environment envp (NULL-terminated); collects stdout, stderr and the
 * exit status. */
static void run(struct result *res, const char *const *args, const char *const *envp)
{
	const char *bin = getenv("HPCT_INFO_BIN");
	cr_assert_not_null(bin, "HPCT_INFO_BIN is not set");
	const char *argv[16] = { bin };
	int n = 1;
	for (; args[n - 1] && n < 15; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;

	int po[2], pe[2];
	cr_assert_eq(pipe(po), 0, "pipe: %s", strerror(errno));
	cr_assert_eq(pipe(pe), 0, "pipe: %s", strerror(errno));
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, po[1], 1);
	posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
	posix_spawn_file_actions_addclose(&fa, po[0]);
	posix_spawn_file_actions_addclose(&fa, pe[0]);
	posix_spawn_file_actions_addclose(&fa, po[1]);
	posix_spawn_file_actions_addclose(&fa, pe[1]);
	pid_t pid;
	int rc = posix_spawn(&pid, bin, &fa, NULL, (char *const *)argv, (char *const *)envp);
	posix_spawn_file_actions_destroy(&fa);
	close(po[1]);
	close(pe[1]);
	cr_assert_eq(rc, 0, "posix_spawn %s: %s", bin, strerror(rc));

	/* Both pipes at once, so that a full one never stalls the child. */
	memset(res, 0, sizeof(*res));
	int oopen = 1, eopen = 1;
	while (oopen || eopen) {
		struct pollfd p[2] = { { oopen ? po[0] : -1, POLLIN, 0 },
			               { eopen ? pe[0] : -1, POLLIN, 0 } };
		if (poll(p, 2, -1) < 0) {
			cr_assert_eq(errno, EINTR, "poll: %s", strerror(errno));
			continue;
		}
		if (p[0].revents)
			drain(po[0], res->out, sizeof(res->out), &res->nout, &oopen);
		if (p[1].revents)
			drain(pe[0], res->err, sizeof(res->err), &res->nerr, &eopen);
	}
	close(po[0]);
	close(pe[0]);

	int st;
	pid_t w;
	while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
		;
	cr_assert_eq(w, pid, "waitpid: %s", strerror(errno));
	res->code = WIFEXITED(st) ? WEXITSTATUS(st) : 256 + WTERMSIG(st);
}

/* The line of `out` starting with `start` (copied to buf), or NULL. */
static char *line_starting(const char *out, const char *start, char *buf, size_t len)
{
	size_t sl = strlen(start);
	for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, start, sl) != 0)
			continue;
		size_t n = strcspn(p, "\n");
		if (n >= len)
			n = len - 1;
		memcpy(buf, p, n);
		buf[n] = '\0';
		return buf;
	}
	return NULL;
}

/* Checks the --env row of `name`: "NAME TYPE DEFAULT VALUE HELP...". */
static void check_row(const struct result *res, const char *name, const char *type, const char *def,
                      const char *value, const char *help)
{
	char start[64], line[1024], n[64], t[64], d[64], v[256];
	int off = 0;
	snprintf(start, sizeof(start), "%s ", name);
	cr_assert_not_null(line_starting(res->out, start, line, sizeof(line)),
	                   "no row for %s in hpct-info --env:\n%s", name, res->out);
	cr_assert_eq(sscanf(line, "%63s %63s %63s %255s %n", n, t, d, v, &off), 4,
	             "malformed row: '%s'", line);
	cr_assert_str_eq(t, type, "%s: type '%s', expected '%s'", name, t, type);
	cr_assert_str_eq(d, def, "%s: default '%s', expected '%s'", name, d, def);
	cr_assert_str_eq(v, value, "%s: value '%s', expected '%s'", name, v, value);
	cr_assert(off > 0 && strstr(line + off, help), "%s: help '%s' does not contain '%s'", name,
	          line + off, help);
}

Test(info, env_lists_every_setting)
{
	static const char *const args[] = { "--env", NULL };
	static const char *const envp[] = { "HPCT_PORT_BASE=17900",
		                            "SLURM_JOB_NODELIST=gpu-[01-04]", NULL };
	struct result res;
	run(&res, args, envp);
	cr_assert_eq(res.code, 0, "hpct-info --env exited %d: %s", res.code, res.err);

	char line[1024];
	cr_assert_not_null(line_starting(res.out, "hpct ", line, sizeof(line)),
	                   "no version line:\n%s", res.out);
	cr_assert_not_null(line_starting(res.out, "VARIABLE ", line, sizeof(line)),
	                   "no header row:\n%s", res.out);
	cr_assert(strstr(line, "TYPE") && strstr(line, "DEFAULT") && strstr(line, "VALUE") &&
	                  strstr(line, "HELP"),
	          "header row '%s' lacks a column", line);

	check_row(&res, "HPCT_USE_ROOTLESS", "bool", "0", "(unset)", "rootless path");
	check_row(&res, "HPCT_TIMEOUT", "seconds", "120", "(unset)", "deadline");
	check_row(&res, "HPCT_PORT_BASE", "int", "10000", "17900", "first port");
	check_row(&res, "RANK", "int", "-", "(unset)", "torchrun: rank");
	check_row(&res, "SLURM_JOB_NODELIST", "string", "-", "gpu-[01-04]", "node list");
	check_row(&res, "HPCT_DEBUG", "string", "WARN", "(unset)", "log level");

	/* One row per setting: the launcher variables are listed too, and no
	 * row appears twice. */
	static const char *const names[] = { "HPCT_RANK",
		                             "HPCT_WORLD_SIZE",
		                             "HPCT_LOCAL_RANK",
		                             "HPCT_HOSTS",
		                             "HPCT_HOSTFILE",
		                             "HPCT_JOB_ID",
		                             "HPCT_EPOCH",
		                             "HPCT_PORT_RANGE",
		                             "HPCT_DEBUG_SUBSYS",
		                             "HPCT_DEBUG_FILE",
		                             "HPCT_GLOO_CONNECT",
		                             "WORLD_SIZE",
		                             "LOCAL_RANK",
		                             "MASTER_ADDR",
		                             "MASTER_PORT",
		                             "SLURM_PROCID",
		                             "SLURM_NTASKS",
		                             "SLURM_LOCALID",
		                             "SLURM_TASKS_PER_NODE",
		                             "OMPI_COMM_WORLD_RANK",
		                             "OMPI_COMM_WORLD_SIZE" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char start[64];
		snprintf(start, sizeof(start), "\n%s ", names[i]);
		const char *first = strstr(res.out, start);
		cr_assert_not_null(first, "no row for %s in hpct-info --env", names[i]);
		cr_assert_null(strstr(first + 1, start), "%s is listed twice", names[i]);
	}
	/* --env only lists; it does not derive a world. */
	cr_assert_null(strstr(res.out, "\nrank "), "--env printed a world:\n%s", res.out);
}

struct peer {
	int rank, node, local, port;
	char host[64], addr[64];
	int marked;
};

Test(info, peers_of_rank_5_of_8_on_2_nodes)
{
	static const char *const args[] = { "--peers", "0", NULL };
	static const char *const envp[] = { "RANK=5",
		                            "WORLD_SIZE=8",
		                            "HPCT_HOSTS=127.0.0.1,127.0.0.2",
		                            "LOCAL_RANK=1",
		                            "HPCT_JOB_ID=j",
		                            "HPCT_USE_ROOTLESS=1",
		                            NULL };
	struct result res;
	run(&res, args, envp);
	cr_assert_eq(res.code, 0, "hpct-info exited %d: %s", res.code, res.err);

	char line[1024];
	cr_assert_not_null(line_starting(res.out, "rank ", line, sizeof(line)), "no rank line:\n%s",
	                   res.out);
	cr_assert(strstr(line, " 5 of 8") && strstr(line, "local 1 of 4"),
	          "rank line '%s', expected rank 5 of 8, local 1 of 4", line);
	cr_assert_not_null(line_starting(res.out, "path ", line, sizeof(line)), "no path line");
	cr_assert(strstr(line, "rootless"), "path line '%s', expected rootless", line);
	cr_assert_not_null(line_starting(res.out, "job ", line, sizeof(line)), "no job line");
	cr_assert(strstr(line, "'j'"), "job line '%s', expected 'j'", line);
	cr_assert_not_null(line_starting(res.out, "nodes ", line, sizeof(line)), "no nodes line");
	cr_assert(strstr(line, "2, from HPCT_HOSTS") && strstr(line, "node 1 is 127.0.0.2"),
	          "nodes line '%s', expected 2 nodes from HPCT_HOSTS, node 1 is 127.0.0.2", line);

	/* The peer table: every rank, in order, after the RANK NODE ... header. */
	const char *tab = strstr(res.out, "\n  RANK ");
	cr_assert_not_null(tab, "no peer table:\n%s", res.out);
	tab = strchr(tab + 1, '\n');
	cr_assert_not_null(tab);
	struct peer p[9];
	int n = 0, marked = 0;
	for (const char *l = tab + 1; *l && n < 9; l = strchr(l, '\n') + 1) {
		int off = 0;
		struct peer *q = &p[n];
		cr_assert_eq(sscanf(l, "%d %d %d %63s %63s%n", &q->rank, &q->node, &q->local,
		                    q->host, q->addr, &off),
		             5, "malformed peer row '%.*s'", (int)strcspn(l, "\n"), l);
		q->marked = strncmp(l + off, "   <- this process", 18) == 0;
		marked += q->marked;
		char *colon = strrchr(q->addr, ':');
		cr_assert_not_null(colon, "address '%s' has no port", q->addr);
		q->port = atoi(colon + 1);
		n++;
		if (!strchr(l, '\n'))
			break;
	}
	cr_assert_eq(n, 8, "%d peer rows, expected 8:\n%s", n, res.out);
	cr_assert_eq(marked, 1, "%d rows marked as this process, expected 1:\n%s", marked, res.out);

	for (int r = 0; r < 8; r++) {
		cr_assert_eq(p[r].rank, r, "row %d shows rank %d", r, p[r].rank);
		cr_assert_eq(p[r].node, r / 4, "rank %d on node %d, expected %d", r, p[r].node,
		             r / 4);
		cr_assert_eq(p[r].local, r % 4, "rank %d local %d, expected %d", r, p[r].local,
		             r % 4);
		const char *host = r < 4 ? "127.0.0.1" : "127.0.0.2";
		cr_assert_str_eq(p[r].host, host, "rank %d host %s, expected %s", r, p[r].host,
		                 host);
		char prefix[32];
		snprintf(prefix, sizeof(prefix), "%s:", host);
		cr_assert(strncmp(p[r].addr, prefix, strlen(prefix)) == 0,
		          "rank %d address %s, expected %s<port>", r, p[r].addr, prefix);
		cr_assert(p[r].port >= 10000 && p[r].port < 10000 + 8192,
		          "rank %d port %d outside the default range 10000..18191", r, p[r].port);
		cr_assert_eq(p[r].marked, r == 5, "rank %d %s marked as this process", r,
		             p[r].marked ? "is" : "is not");
	}
	/* Same local index, same port on every node; distinct within a node. */
	for (int l = 0; l < 4; l++) {
		cr_assert_eq(p[l].port, p[4 + l].port, "local %d: port %d on node 0, %d on node 1",
		             l, p[l].port, p[4 + l].port);
		for (int k = 0; k < l; k++)
			cr_assert_neq(p[k].port, p[l].port, "ranks %d and %d share port %d", k, l,
			              p[l].port);
	}
	char want[64];
	snprintf(want, sizeof(want), "127.0.0.2:%d", p[1].port);
	cr_assert_str_eq(p[5].addr, want, "this process's address %s, expected %s", p[5].addr,
	                 want);
}

Test(info, rank_beyond_world_size_is_named)
{
	static const char *const args[] = { NULL };
	static const char *const envp[] = { "RANK=9", "WORLD_SIZE=8", NULL };
	struct result res;
	run(&res, args, envp);
	cr_assert_neq(res.code, 0, "hpct-info accepted RANK=9 of 8:\n%s", res.out);
	cr_assert_lt(res.code, 256, "hpct-info died of signal %d", res.code - 256);
	cr_assert(strstr(res.err, "RANK=9"), "stderr does not name RANK=9:\n%s", res.err);
	cr_assert(strstr(res.err, "world size 8"), "stderr does not name the world size 8:\n%s",
	          res.err);
	cr_assert(strstr(res.err, "HPCT_EBADENV"), "stderr does not name the error code:\n%s",
	          res.err);
	cr_assert_null(strstr(res.out, "\nrank "), "a world was printed anyway:\n%s", res.out);
}

Test(info, hpct_rank_overrides_and_is_named)
{
	static const char *const args[] = { NULL };
	static const char *const envp[] = { "HPCT_RANK=12", "RANK=1", "WORLD_SIZE=8", NULL };
	struct result res;
	run(&res, args, envp);
	cr_assert_neq(res.code, 0, "hpct-info accepted HPCT_RANK=12 of 8:\n%s", res.out);
	cr_assert(strstr(res.err, "HPCT_RANK=12"), "stderr does not name HPCT_RANK=12:\n%s",
	          res.err);
	cr_assert(strstr(res.err, "world size 8"), "stderr does not name the world size 8:\n%s",
	          res.err);
}

Test(info, rootless_without_node_list_says_why)
{
	static const char *const args[] = { NULL };
	static const char *const envp[] = { "RANK=1", "WORLD_SIZE=8", "HPCT_USE_ROOTLESS=1", NULL };
	struct result res;
	run(&res, args, envp);
	cr_assert_eq(res.code, 0, "hpct-info exited %d: %s", res.code, res.err);

	char line[1024];
	cr_assert_not_null(line_starting(res.out, "path ", line, sizeof(line)), "no path line:\n%s",
	                   res.out);
	cr_assert(strstr(line, "standard"), "path line '%s', expected standard", line);
	/* The reason follows on the next line. */
	const char *why = strstr(res.out, line);
	why = strchr(why, '\n');
	cr_assert_not_null(why);
	size_t len = strcspn(why + 1, "\n");
	cr_assert(len > 0, "nothing after the path line");
	char reason[512];
	snprintf(reason, sizeof(reason), "%.*s", (int)len, why + 1);
	cr_assert(strstr(reason, "HPCT_USE_ROOTLESS=1") && strstr(reason, "HPCT_HOSTS"),
	          "reason '%s' does not say HPCT_USE_ROOTLESS=1 needs HPCT_HOSTS", reason);
	cr_assert_null(strstr(res.out, "\n  RANK "), "a peer table without a node list:\n%s",
	               res.out);
}

/* A shared secret: hpct-info says peers prove it, names where it came
 * from, and never prints it; a secret file that cannot be read is named. */
Test(info, secret_is_reported_never_shown)
{
	static const char *const args[] = { NULL };
	static const char *const envp[] = { "RANK=1",
		                            "WORLD_SIZE=2",
		                            "HPCT_USE_ROOTLESS=1",
		                            "HPCT_HOSTS=127.0.0.1",
		                            "HPCT_SECRET=hush-7f3a",
		                            NULL };
	struct result res;
	run(&res, args, envp);
	cr_assert_eq(res.code, 0, "hpct-info exited %d: %s", res.code, res.err);
	char line[1024];
	cr_assert_not_null(line_starting(res.out, "peers ", line, sizeof(line)),
	                   "no peers line:\n%s", res.out);
	cr_assert(strstr(line, "authenticated") && strstr(line, "HPCT_SECRET") &&
	                  !strstr(line, "not authenticated"),
	          "peers line '%s'", line);
	cr_assert_null(strstr(res.out, "hush-7f3a"), "the secret was printed:\n%s", res.out);

	static const char *const env_args[] = { "--env", NULL };
	run(&res, env_args, envp);
	cr_assert_eq(res.code, 0);
	check_row(&res, "HPCT_SECRET", "string", "-", "(hidden)", "shared secret");
	cr_assert_null(strstr(res.out, "hush-7f3a"), "--env printed the secret:\n%s", res.out);

	static const char *const bad_env[] = { "RANK=1",
		                               "WORLD_SIZE=2",
		                               "HPCT_USE_ROOTLESS=1",
		                               "HPCT_HOSTS=127.0.0.1",
		                               "HPCT_SECRET_FILE=/nonexistent/hpct-secret",
		                               NULL };
	run(&res, args, bad_env);
	cr_assert_neq(res.code, 0, "an unreadable secret file was accepted:\n%s", res.out);
	cr_assert(strstr(res.err, "HPCT_SECRET_FILE=/nonexistent/hpct-secret"),
	          "stderr does not name the file:\n%s", res.err);

	static const char *const no_args[] = { NULL };
	static const char *const none[] = { "RANK=1", "WORLD_SIZE=2", NULL };
	run(&res, no_args, none);
	cr_assert_not_null(line_starting(res.out, "peers ", line, sizeof(line)));
	cr_assert(strstr(line, "not authenticated"), "peers line '%s' without a secret", line);
}
