/* Faults: a rank that never starts, a rank killed mid-collective, strangers
 * (another job, epoch, or shared secret)
 * knocking on a rank's port, a port already taken.  Children check the
 * error they got (code and that the message names the culprit) and report
 * through their exit code. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hpct/hpct.h"
#include "tests/harness.h"

struct cfg {
	int n, port, rootless, victim;
	double timeout;
};

static void env_cb(int r, void *arg)
{
	struct cfg *c = arg;
	ht_setenv_world(r, c->n, 1, c->port, c->rootless, c->timeout);
}

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Exit 0 when err is one of the expected codes and the message names the
 * victim ("rank V at 127.0.0.1:P"). */
static int check_error(int rc, int victim, int port)
{
	if (rc == 0)
		return 40;
	if (rc != HPCT_ETIMEDOUT && rc != HPCT_EPEERDEAD && rc != HPCT_EABORTED)
		return 41;
	char want[64];
	snprintf(want, sizeof(want), "rank %d at 127.0.0.1:%d", victim, port);
	if (!strstr(hpct_last_error(), want)) {
		fprintf(stderr, "expected '%s' in: %s\n", want, hpct_last_error());
		return 42;
	}
	return 0;
}

static int never_starts(int r, void *arg)
{
	struct cfg *c = arg;
	if (r == c->victim)
		return 0;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 2;
	char addr[HPCT_ADDRSTRLEN];
	hpct_world_peer_addr(w, c->victim, addr);
	int port = atoi(strrchr(addr, ':') + 1);
	double t0 = mono();
	int item = r, all[8];
	int rc = hpct_allgather(hpct_world_group(w), &item, sizeof(item), all);
	double took = mono() - t0;
	hpct_world_destroy(w);
	if (took > c->timeout + 2)
		return 43;
	return check_error(rc, c->victim, port);
}

Test(faults, rank_never_starts_is_named, .timeout = 60)
{
	struct cfg c = {
		.n = 4, .port = hpct_test_ports(0), .rootless = 1, .victim = 3, .timeout = 3
	};
	int codes[4];
	ht_spawn(4, env_cb, never_starts, &c, 30, NULL, codes);
	for (int r = 0; r < 3; r++)
		cr_expect_eq(codes[r], 0, "rank %d exited %d", r, codes[r]);
}

/* The victim dies after the first allgather, while the others wait for its
 * part of the next; they must fail well before their 20 s deadline, with
 * an error naming it. */
static int killed_midway(int r, void *arg)
{
	struct cfg *c = arg;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 2;
	hpct_group *g = hpct_world_group(w);
	int item = r, all[8];
	if (hpct_allgather(g, &item, sizeof(item), all) != 0)
		return 3;
	if (r == c->victim) {
		usleep(200000); /* die while the others wait for its next item */
		raise(SIGKILL);
	}
	int port = 0;
	char addr[HPCT_ADDRSTRLEN];
	if (c->rootless && hpct_world_peer_addr(w, c->victim, addr) == 0)
		port = atoi(strrchr(addr, ':') + 1);
	double t0 = mono();
	int rc = 0;
	for (int i = 0; i < 50 && rc == 0; i++)
		rc = hpct_allgather(g, &item, sizeof(item), all);
	double took = mono() - t0;
	char msg[1024];
	snprintf(msg, sizeof(msg), "%s", hpct_last_error());
	hpct_world_destroy(w);
	if (took > 5)
		return 44;
	if (c->rootless) {
		int cr = check_error(rc, c->victim, port);
		if (cr == 42 && rc == HPCT_EABORTED && strstr(msg, "rank 2"))
			return 0; /* learned it from a neighbour, which named the victim */
		return cr;
	}
	/* standard path: the store saw the victim leave without goodbye */
	if (rc == 0)
		return 40;
	if (rc != HPCT_EPEERDEAD) {
		fprintf(stderr, "rank %d got %s: %s\n", r, hpct_errname(rc), msg);
		return 41;
	}
	char want[64];
	snprintf(want, sizeof(want), "rank %d at 127.0.0.1:", c->victim);
	if (!strstr(msg, want) || !strstr(msg, "left without saying goodbye")) {
		fprintf(stderr, "expected '%s' in: %s\n", want, msg);
		return 42;
	}
	return 0;
}

static void killed_test(int rootless, int slot)
{
	struct cfg c = { .n = 8,
		         .port = hpct_test_ports(slot),
		         .rootless = rootless,
		         .victim = 2,
		         .timeout = 20 };
	int codes[8];
	ht_spawn(8, env_cb, killed_midway, &c, 40, NULL, codes);
	for (int r = 0; r < 8; r++)
		if (r != c.victim)
			cr_expect_eq(codes[r], 0, "rank %d exited %d", r, codes[r]);
	cr_expect_eq(codes[c.victim], 128 + SIGKILL);
}

Test(faults, rank_killed_midway_fails_fast, .timeout = 60)
{
	killed_test(1, 1);
}
Test(faults, rank_killed_midway_fails_fast_standard, .timeout = 60)
{
	killed_test(0, 6);
}

/* A stranger: a world of another job (or epoch) whose host table points its
 * rank 0 at the real job's rank 0.  It must be refused; the real job must
 * not notice. */
struct stranger {
	struct cfg real;
	const char *job, *epoch;
	const char *secret, *stranger_secret; /* HPCT_SECRET of the real ranks, the stranger's */
	int loris; /* the stranger is a slow-loris: a byte a second to rank 0's port */
	int stranger_port;
};

static void stranger_env(int r, void *arg)
{
	struct stranger *s = arg;
	if (r < 2) {
		ht_setenv_world(r, 2, 1, s->real.port, 1, 10);
		/* one window: rank 0 listens at HPCT_PORT_BASE whatever the job */
		setenv("HPCT_PORT_RANGE", "2", 1);
		if (s->secret)
			setenv("HPCT_SECRET", s->secret, 1);
		return;
	}
	/* rank 1 of a 2-rank world whose rank 0 is the real job's rank 0 */
	char path[64], line[256];
	snprintf(path, sizeof(path), "/tmp/hpct-stranger-%d", (int)getpid());
	FILE *f = fopen(path, "w");
	snprintf(line, sizeof(line), "0 127.0.0.1:%d\n1 127.0.0.1:%d\n", s->real.port + 1,
	         s->stranger_port);
	fputs(line, f);
	fclose(f);
	ht_setenv_world(1, 2, 1, s->real.port, 1, 3);
	unsetenv("HPCT_HOSTS");
	unsetenv("HPCT_TASKS_PER_NODE");
	setenv("HPCT_HOSTFILE", path, 1);
	if (s->job)
		setenv("HPCT_JOB_ID", s->job, 1);
	if (s->epoch)
		setenv("HPCT_EPOCH", s->epoch, 1);
	if (s->stranger_secret)
		setenv("HPCT_SECRET", s->stranger_secret, 1);
}

/* Opens a connection to rank 0 and sends it a HELLO-sized frame a byte a
 * second for 4 s. */
static int slow_loris(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	for (int k = 0; k < 50 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0; k++) {
		close(fd); /* rank 0 not listening yet */
		usleep(20000);
		fd = socket(AF_INET, SOCK_STREAM, 0);
	}
	for (int k = 0; k < 4; k++) {
		if (send(fd, "H", 1, MSG_NOSIGNAL) != 1)
			break; /* dropped: fine, as long as nobody waited for it */
		sleep(1);
	}
	close(fd);
	return 0;
}

static int stranger_main(int r, void *arg)
{
	const struct stranger *s = arg;
	hpct_world *w;
	int rc;
	if (r == 2 && s->loris)
		return slow_loris(s->real.port + 1);
	if (r == 2) {
		/* knock first, while the real job is still starting */
		if ((rc = hpct_world_create(&w)) != 0)
			return 2;
		int item = 7, all[2];
		rc = hpct_allgather(hpct_world_group(w), &item, sizeof(item), all);
		int ok = rc == HPCT_EREFUSED && strstr(hpct_last_error(), "rank 0 at 127.0.0.1:");
		if (!ok)
			fprintf(stderr, "stranger got %d: %s\n", rc, hpct_last_error());
		hpct_world_destroy(w);
		return ok ? 0 : 50;
	}
	usleep(300000);
	if (hpct_world_create(&w) != 0)
		return 2;
	int item = r, all[2];
	/* a raw socket sends garbage to rank 0's port too */
	if (r == 1) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = { .sin_family = AF_INET };
		char addr[HPCT_ADDRSTRLEN];
		hpct_world_peer_addr(w, 0, addr);
		a.sin_port = htons((uint16_t)atoi(strrchr(addr, ':') + 1));
		inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
			(void)!write(
			        fd, "\0\0\0\x30GET / HTTP/1.0\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
			        52);
		close(fd);
	}
	/* keep working for ~1.5 s, so the stranger's knock lands mid-job; no
	 * allgather may wait on the stranger */
	for (int i = 0; i < 30; i++) {
		double t0 = mono();
		if ((rc = hpct_allgather(hpct_world_group(w), &item, sizeof(item), all)) != 0)
			return 3;
		if (mono() - t0 > 1.0)
			return 6;
		if (all[0] != 0 || all[1] != 1)
			return 4;
		usleep(50000);
	}
	struct hpct_world_stats st;
	hpct_world_get_stats(w, &st);
	if (r == 0 && st.conns_refused < 1 && !s->loris)
		return 5; /* the stranger or the garbage was not refused by rank 0 */
	hpct_world_destroy(w);
	return 0;
}

static void stranger_test(int slot, const char *job, const char *epoch, const char *secret,
                          const char *stranger_secret, int loris)
{
	struct stranger s = { .real = { .n = 2, .port = hpct_test_ports(slot), .rootless = 1 },
		              .job = job,
		              .epoch = epoch,
		              .secret = secret,
		              .stranger_secret = stranger_secret,
		              .loris = loris };
	s.stranger_port = s.real.port + 100;
	int codes[3];
	int delays[3] = { 300, 0, 0 };
	ht_spawn(3, stranger_env, stranger_main, &s, 40, delays, codes);
	cr_expect_eq(codes[0], 0, "real rank 0 exited %d", codes[0]);
	cr_expect_eq(codes[1], 0, "real rank 1 exited %d", codes[1]);
	cr_expect_eq(codes[2], 0, "stranger exited %d", codes[2]);
}

Test(faults, foreign_job_refused, .timeout = 60)
{
	stranger_test(2, "another-job", NULL, NULL, NULL, 0);
}
Test(faults, stale_epoch_refused, .timeout = 60)
{
	stranger_test(3, NULL, "7", NULL, NULL, 0);
}
/* Same job and epoch, but not the secret: refused both ways (the real job
 * runs with HPCT_SECRET, the stranger with another one, or none) */
Test(faults, wrong_secret_refused, .timeout = 60)
{
	stranger_test(8, NULL, NULL, "the-real-secret", "not-the-secret", 0);
}
Test(faults, no_secret_refused, .timeout = 60)
{
	stranger_test(9, NULL, NULL, "the-real-secret", NULL, 0);
}
/* A slow-loris on rank 0's port (a byte a second) delays no allgather. */
Test(faults, slow_loris_delays_nobody, .timeout = 60)
{
	stranger_test(2, NULL, NULL, NULL, NULL, 1);
}

static int port_taken(int r, void *arg)
{
	struct cfg *c = arg;
	(void)r;
	hpct_world *w;
	int rc = hpct_world_create(&w);
	if (rc != HPCT_EADDRINUSE)
		return 60;
	/* the port depends on the job's window: any port of the held range */
	const char *m = strstr(hpct_last_error(), "cannot listen on 127.0.0.1:");
	if (!m || !strstr(hpct_last_error(), "HPCT_PORT_BASE="))
		return 61;
	int port = atoi(m + strlen("cannot listen on 127.0.0.1:"));
	return port > c->port && port <= c->port + 16 ? 0 : 62;
}

Test(faults, port_taken_is_named)
{
	struct cfg c = { .n = 1, .port = hpct_test_ports(4), .rootless = 1, .timeout = 5 };
	/* hold every port of the derived range (HPCT_PORT_BASE = port + 1, 16 ports) */
	int fds[16];
	for (int i = 0; i < 16; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = { .sin_family = AF_INET,
			                 .sin_port = htons((uint16_t)(c.port + 1 + i)) };
		inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
		cr_assert(bind(fds[i], (struct sockaddr *)&a, sizeof(a)) == 0 &&
		          listen(fds[i], 1) == 0);
	}
	int codes[1];
	ht_spawn(1, env_cb, port_taken, &c, 20, NULL, codes);
	for (int i = 0; i < 16; i++)
		close(fds[i]);
	cr_expect_eq(codes[0], 0, "exit %d: want HPCT_EADDRINUSE naming 127.0.0.1:port", codes[0]);
}

static int bad_ifname(int r, void *arg)
{
	(void)r;
	(void)arg;
	hpct_world *w;
	setenv("HPCT_SOCKET_IFNAME", "nosuch9", 1);
	int rc = hpct_world_create(&w);
	if (rc != HPCT_EBADENV)
		return 70;
	if (!strstr(hpct_last_error(), "HPCT_SOCKET_IFNAME=nosuch9 matches no interface (have: lo"))
		return 71;
	/* an interface that exists but does not hold the node's address */
	setenv("HPCT_SOCKET_IFNAME", "=lo", 1);
	setenv("HPCT_HOSTS", "127.0.0.1", 1);
	if ((rc = hpct_world_create(&w)) != 0)
		return 72; /* lo serves all of 127/8 */
	hpct_world_destroy(w);
	return 0;
}

Test(faults, unknown_interface_is_named)
{
	struct cfg c = { .n = 1, .port = hpct_test_ports(5), .rootless = 1, .timeout = 5 };
	int codes[1];
	ht_spawn(1, env_cb, bad_ifname, &c, 20, NULL, codes);
	cr_expect_eq(codes[0], 0, "exit %d", codes[0]);
}

/* After a world collective failed because one rank never came, the
 * survivors can still form a group among themselves and work in it: the
 * failed group's undeliverable sends must not hold up their collectives. */
static int survivors(int r, void *arg)
{
	struct cfg *c = arg;
	if (r == c->victim)
		return 0;
	hpct_world *w;
	if (hpct_world_create(&w) != 0)
		return 2;
	hpct_group *world = hpct_world_group(w);
	char b[16] = "from rank 0";
	if (hpct_broadcast(world, b, sizeof(b), 0) == 0 && r == 0)
		return 3; /* rank 0 must have failed: it sends to rank 2 */
	int members[2] = { 0, 1 }, item = r * 7, all[2];
	hpct_group *g;
	if (hpct_group_create(world, members, 2, &g) != 0 || !g)
		return 4;
	double t0 = mono();
	if (hpct_barrier(g) != 0 || hpct_allgather(g, &item, sizeof(item), all) != 0)
		return 5;
	if (all[0] != 0 || all[1] != 7)
		return 6;
	/* rank 1 waits out rank 0's failing broadcast in the barrier; after
	 * that, nothing may take a deadline */
	if (mono() - t0 > c->timeout + 2)
		return 7;
	hpct_group_destroy(g);
	hpct_world_destroy(w);
	return 0;
}

Test(faults, survivors_form_a_group_after_a_failure, .timeout = 60)
{
	struct cfg c = {
		.n = 3, .port = hpct_test_ports(7), .rootless = 1, .victim = 2, .timeout = 3
	};
	int codes[3];
	ht_spawn(3, env_cb, survivors, &c, 30, NULL, codes);
	for (int r = 0; r < 2; r++)
		cr_expect_eq(codes[r], 0, "rank %d exited %d", r, codes[r]);
}
