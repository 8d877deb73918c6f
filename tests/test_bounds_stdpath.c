/* The standard path's rendezvous server against hostile clients (issue 16):
 * each test runs the server in a process of its own (its log in a file, its
 * VmRSS read from /proc), lets raw clients try one exhaustion, and checks
 * that it is refused or capped (by the log line naming the client), that the
 * server's VmRSS grew less than the figure the test states, and that real
 * ranks still complete a checked allgather through it.  Every wait is on an
 * event (a log line, a reply, a pipe) with a generous deadline naming what
 * hung. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/base/auth.h"
#include "bootstrap/base/bytes.h"
#include "bootstrap/base/util.h"
#include "bootstrap/stdpath/stdpath.h"
#include "hpct/hpct.h"
#include "tests/harness.h"

#define HOST   "127.0.0.1"
#define JOB    0x626f756e64733136ULL
#define WAIT_S 60.0 /* the deadline of every wait: a hang guard only */
#define MiB    (1024L * 1024L)

/* ---- the server, in a process of its own ---- */

struct srv_opts {
	int nranks;
	const char *store_mb, *store_keys, *timeout; /* settings; NULL: default */
	int fd_room; /* > 0: descriptors left after RLIMIT_NOFILE, all taken by a hog */
	const struct hpct_auth_key *key;
};

struct srv {
	pid_t pid;
	int ctl, ans; /* commands to it, its answers */
	int port;
	char log[96];
	long rss0; /* VmRSS once serving, kB */
};

/* A "Vm...:" line of /proc/<pid>/status in kB, -1 if none. */
static long vm_kb(pid_t pid, const char *field)
{
	char path[64], line[256], fmt[32];
	long kb = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	snprintf(fmt, sizeof(fmt), "%s: %%ld", field);
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, fmt, &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

static long rss_kb(pid_t pid)
{
	return vm_kb(pid, "VmRSS");
}

static int max_fd(void)
{
	int m = 2;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (atoi(e->d_name) > m)
			m = atoi(e->d_name);
	if (d)
		closedir(d);
	return m;
}

/* The server process: serves until told 'q'; 'w' answers its wakeups,
 * 'c' closes the descriptors its hog holds. */
static void srv_child(const struct srv *sv, const struct srv_opts *o, int ctl, int ans)
{
	int logfd = open(sv->log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
	if (logfd < 0 || dup2(logfd, 2) < 0)
		_exit(3);
	/* this process has logged nothing yet: these are read at its first line */
	setenv("HPCT_DEBUG", "TRACE", 1);
	setenv("HPCT_DEBUG_SUBSYS", "STD", 1);
	unsetenv("HPCT_DEBUG_FILE");
	if (o->store_mb)
		setenv("HPCT_STD_STORE_MB", o->store_mb, 1);
	if (o->store_keys)
		setenv("HPCT_STD_STORE_KEYS", o->store_keys, 1);
	if (o->timeout)
		setenv("HPCT_TIMEOUT", o->timeout, 1);
	struct hpct_std_server *s = NULL;
	int rc = hpct__std_server_start(HOST, sv->port, o->nranks, JOB, o->key, &s);
	static int hog[8192];
	int nhog = 0;
	if (rc == 0 && o->fd_room > 0) {
		struct rlimit rl;
		getrlimit(RLIMIT_NOFILE, &rl);
		rl.rlim_cur = (rlim_t)(max_fd() + 1 + o->fd_room);
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			rc = -errno;
		while (rc == 0 && nhog < 8192 && (hog[nhog] = open("/dev/null", O_RDONLY)) >= 0)
			nhog++;
	}
	char r = rc == 0 ? 'R' : 'E';
	if (write(ans, &r, 1) != 1 || rc)
		_exit(2);
	for (;;) {
		char cmd = 'q';
		if (read(ctl, &cmd, 1) != 1)
			cmd = 'q'; /* the test is gone */
		if (cmd == 'w') {
			uint64_t w = hpct__std_server_wakeups(s);
			if (write(ans, &w, sizeof(w)) != sizeof(w))
				_exit(4);
		} else if (cmd == 'c') {
			while (nhog > 0)
				close(hog[--nhog]);
			if (write(ans, "c", 1) != 1)
				_exit(4);
		} else {
			hpct__std_server_stop(s, hpct__now() + 5);
			_exit(0);
		}
	}
}

static void read_ans(struct srv *sv, void *buf, size_t len, const char *what)
{
	struct pollfd p = { .fd = sv->ans, .events = POLLIN };
	cr_assert_eq(poll(&p, 1, (int)(WAIT_S * 1000)), 1,
	             "the server process did not %s in %.0f s", what, WAIT_S);
	cr_assert_eq(read(sv->ans, buf, len), (ssize_t)len, "the server process died before %s",
	             what);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return strdup("");
	size_t cap = 1 << 16, n = 0;
	char *b = malloc(cap);
	size_t r;
	while (b && (r = fread(b + n, 1, cap - n - 1, f)) > 0) {
		n += r;
		if (n + 1 == cap) {
			char *nb = realloc(b, cap *= 2);
			if (!nb)
				break;
			b = nb;
		}
	}
	fclose(f);
	if (b)
		b[n] = 0;
	return b;
}

static void srv_start(struct srv *sv, int slot, const struct srv_opts *o)
{
	int ctl[2], ans[2];
	memset(sv, 0, sizeof(*sv));
	sv->port = hpct_test_ports(slot);
	snprintf(sv->log, sizeof(sv->log), "/tmp/hpct-bounds-%d-%d.log", (int)getpid(), slot);
	cr_assert_eq(pipe(ctl), 0);
	cr_assert_eq(pipe(ans), 0);
	fflush(NULL);
	sv->pid = fork();
	cr_assert_geq(sv->pid, 0);
	if (sv->pid == 0) {
		close(ctl[1]);
		close(ans[0]);
		srv_child(sv, o, ctl[0], ans[1]);
	}
	close(ctl[0]);
	close(ans[1]);
	sv->ctl = ctl[1];
	sv->ans = ans[0];
	char r = 0;
	read_ans(sv, &r, 1, "start serving");
	char *log = slurp(sv->log);
	cr_assert_eq(r, 'R', "the server did not start on %d:\n%s", sv->port, log);
	free(log);
	sv->rss0 = rss_kb(sv->pid);
	cr_assert_gt(sv->rss0, 0);
}

static void srv_stop(struct srv *sv)
{
	cr_expect_eq(write(sv->ctl, "q", 1), 1);
	int status = -1;
	double dl = hpct__now() + WAIT_S;
	while (waitpid(sv->pid, &status, WNOHANG) == 0) {
		if (hpct__now() > dl) {
			kill(sv->pid, SIGKILL);
			waitpid(sv->pid, &status, 0);
			cr_expect_fail("the server process did not stop in %.0f s", WAIT_S);
			break;
		}
		usleep(10000);
	}
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the server process ended %d",
	          status);
	close(sv->ctl);
	close(sv->ans);
	unlink(sv->log);
}

static int count_in(const char *text, const char *needle, char *first, size_t flen)
{
	int n = 0;
	for (const char *p = text; (p = strstr(p, needle)); p++) {
		if (n++ == 0 && first) {
			const char *b = p, *e = strchr(p, '\n');
			while (b > text && b[-1] != '\n')
				b--;
			snprintf(first, flen, "%.*s", (int)(e ? e - b : (long)strlen(b)), b);
		}
	}
	return n;
}

/* Waits until the server's log holds `min` lines with `needle`; the first
 * such line goes to first (may be NULL). */
static void wait_log(struct srv *sv, const char *needle, int min, char *first, size_t flen)
{
	double dl = hpct__now() + WAIT_S;
	for (;;) {
		char *log = slurp(sv->log);
		int n = count_in(log, needle, first, flen);
		if (n >= min) {
			free(log);
			return;
		}
		if (hpct__now() > dl) {
			size_t len = strlen(log);
			cr_assert_fail(
			        "the server's log has %d of %d lines with '%s' after %.0f s; "
			        "its end:\n%s",
			        n, min, needle, WAIT_S, log + (len > 3000 ? len - 3000 : 0));
		}
		free(log);
		usleep(10000);
	}
}

/* Under AddressSanitizer freed blocks stay in its quarantine (256 MiB) and
 * every allocation touches shadow memory: the figures hold for the plain
 * build, a sanitized one gets that much more. */
#if defined(__SANITIZE_ADDRESS__)
#define SAN_SLACK_KB (320L * 1024)
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SAN_SLACK_KB (320L * 1024)
#endif
#endif
#ifndef SAN_SLACK_KB
#define SAN_SLACK_KB 0L
#endif

static void expect_rss_within(struct srv *sv, long max_growth_kb, const char *what)
{
	long now = rss_kb(sv->pid);
	max_growth_kb += SAN_SLACK_KB;
	cr_expect_lt(now - sv->rss0, max_growth_kb,
	             "%s: the server's VmRSS grew from %ld kB to %ld kB (figure: under %ld kB)",
	             what, sv->rss0, now, max_growth_kb);
	cr_log_info("%s: server VmRSS %ld kB -> %ld kB (+%ld kB, figure %ld kB)\n", what, sv->rss0,
	            now, now - sv->rss0, max_growth_kb);
}

/* ---- real ranks: an allgather through the server ---- */

struct rank_arg {
	int port, rank, size, nreal;
	const struct hpct_auth_key *key;
	const char *tag;
	int rc;
	char msg[1024];
};

static void *real_rank(void *p)
{
	struct rank_arg *a = p;
	struct hpct_std_client *c = NULL;
	double dl = hpct__now() + WAIT_S;
	a->rc = hpct__std_client_connect(HOST, a->port, a->rank, a->size, JOB, a->key, dl, &c);
	if (a->rc == 0) {
		char key[64], keys[8][64];
		const char *kp[8];
		uint64_t mine = 1000u * (uint64_t)a->rank + 7, got[8];
		void *bufs[8];
		size_t lens[8];
		int n = 0;
		snprintf(key, sizeof(key), "%s/%d", a->tag, a->rank);
		a->rc = hpct__std_set(c, key, &mine, sizeof(mine), a->nreal - 1, dl);
		for (int i = 0; i < a->nreal && a->rc == 0; i++) {
			if (i == a->rank)
				continue;
			snprintf(keys[n], sizeof(keys[n]), "%s/%d", a->tag, i);
			kp[n] = keys[n];
			bufs[n] = &got[i];
			lens[n++] = sizeof(uint64_t);
		}
		if (a->rc == 0)
			a->rc = hpct__std_mget(c, kp, n, bufs, lens, dl);
		for (int i = 0; i < a->nreal && a->rc == 0; i++)
			if (i != a->rank && got[i] != 1000u * (uint64_t)i + 7) {
				a->rc = -1;
				snprintf(a->msg, sizeof(a->msg), "rank %d: item of rank %d is %llu",
				         a->rank, i, (unsigned long long)got[i]);
			}
	}
	if (a->rc > 0 || (a->rc < 0 && a->rc != -1))
		snprintf(a->msg, sizeof(a->msg), "%s", hpct_last_error());
	hpct__std_client_close(c);
	return NULL;
}

/* Ranks 0..2 of a world of `size` allgather one checked item each under
 * keys tag/<rank>; 0 or the first failure (its message in why). */
static int allgather3(struct srv *sv, int size, const struct hpct_auth_key *key, const char *tag,
                      char *why, size_t wlen)
{
	struct rank_arg a[3];
	pthread_t th[3];
	for (int r = 0; r < 3; r++) {
		a[r] = (struct rank_arg){ .port = sv->port,
			                  .rank = r,
			                  .size = size,
			                  .nreal = 3,
			                  .key = key,
			                  .tag = tag };
		pthread_create(&th[r], NULL, real_rank, &a[r]);
	}
	int rc = 0;
	for (int r = 0; r < 3; r++) {
		pthread_join(th[r], NULL);
		if (a[r].rc && !rc) {
			rc = a[r].rc;
			snprintf(why, wlen, "%s", a[r].msg);
		}
	}
	return rc;
}

static void expect_allgather(struct srv *sv, int size, const struct hpct_auth_key *key,
                             const char *tag)
{
	char why[1024] = "";
	int rc = allgather3(sv, size, key, tag, why, sizeof(why));
	cr_expect_eq(rc, 0, "the real ranks' allgather '%s' failed (%s): %s", tag, hpct_errname(rc),
	             why);
}

/* ---- raw clients ---- */

static int raw_connect(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, HOST, &sa.sin_addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	cr_assert(fd >= 0);
	/* a request in two sends must not wait for a delayed ACK */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect to %d: %s", port,
	             strerror(errno));
	return fd;
}

/* "127.0.0.1:<port>" of the client end of fd: how the server names it. */
static const char *raw_name(int fd, char *buf, size_t len)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	snprintf(buf, len, "127.0.0.1:%d", ntohs(sa.sin_port));
	return buf;
}

static void send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t r = send(fd, p, len, MSG_NOSIGNAL);
		cr_assert_gt(r, 0, "send: %s", strerror(errno));
		p += r;
		len -= (size_t)r;
	}
}

static void recv_all(int fd, void *buf, size_t len, const char *what)
{
	char *p = buf;
	double dl = hpct__now() + WAIT_S;
	while (len > 0) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		cr_assert(hpct__now() < dl, "no reply to %s in %.0f s", what, WAIT_S);
		if (poll(&pf, 1, 100) <= 0)
			continue;
		ssize_t r = recv(fd, p, len, 0);
		cr_assert_gt(r, 0, "the server closed the connection instead of answering %s",
		             what);
		p += r;
		len -= (size_t)r;
	}
}

/* A reply's status; an error's reason goes to msg. */
static int raw_reply(int fd, char *msg, size_t mlen, const char *what)
{
	unsigned char b[4];
	recv_all(fd, b, 4, what);
	int st = (int)hpct__get32(b);
	msg[0] = 0;
	if (st != 0) {
		recv_all(fd, b, 4, what);
		uint32_t len = hpct__get32(b);
		cr_assert_lt(len, mlen, "a %u-byte reason to %s", len, what);
		recv_all(fd, msg, len, what);
		msg[len] = 0;
	}
	return st;
}

static void raw_hello(int fd, int rank, int size)
{
	unsigned char h[21] = { HPCT_STD_HELLO };
	char msg[512];
	hpct__put32(h + 1, (uint32_t)rank);
	hpct__put32(h + 5, HPCT_STD_MAGIC);
	hpct__put32(h + 9, (uint32_t)size);
	hpct__put64(h + 13, JOB);
	send_all(fd, h, sizeof(h));
	cr_assert_eq(raw_reply(fd, msg, sizeof(msg), "HELLO"), 0, "HELLO of rank %d: %s", rank,
	             msg);
}

static int raw_rank(int port, int rank, int size)
{
	int fd = raw_connect(port);
	raw_hello(fd, rank, size);
	return fd;
}

static void set_hdr(int fd, int rank, const char *key, uint32_t readers, uint32_t vlen)
{
	unsigned char h[9 + HPCT_STD_MAX_KEY + 8] = { HPCT_STD_SET };
	uint32_t kl = (uint32_t)strlen(key);
	hpct__put32(h + 1, (uint32_t)rank);
	hpct__put32(h + 5, kl);
	memcpy(h + 9, key, kl);
	hpct__put32(h + 9 + kl, readers);
	hpct__put32(h + 13 + kl, vlen);
	send_all(fd, h, 17 + kl);
}

/* A whole SET; its status, the reason in msg. */
static int raw_set(int fd, int rank, const char *key, uint32_t readers, const void *val,
                   uint32_t vlen, char *msg, size_t mlen)
{
	set_hdr(fd, rank, key, readers, vlen);
	send_all(fd, val, vlen);
	return raw_reply(fd, msg, mlen, key);
}

/* MGET of n keys; its status; a success's values are read and dropped. */
static int raw_mget(int fd, int rank, const char *const *keys, uint32_t n, char *msg, size_t mlen)
{
	unsigned char h[9];
	h[0] = HPCT_STD_MGET;
	hpct__put32(h + 1, (uint32_t)rank);
	hpct__put32(h + 5, n);
	send_all(fd, h, 9);
	for (uint32_t i = 0; i < n; i++) {
		unsigned char l[4];
		hpct__put32(l, (uint32_t)strlen(keys[i]));
		send_all(fd, l, 4);
		send_all(fd, keys[i], strlen(keys[i]));
	}
	int st = raw_reply(fd, msg, mlen, keys[0]);
	for (uint32_t i = 0; st == 0 && i < n; i++) {
		unsigned char l[4];
		recv_all(fd, l, 4, keys[i]);
		uint32_t len = hpct__get32(l);
		char *v = malloc(len ? len : 1);
		recv_all(fd, v, len, keys[i]);
		free(v);
	}
	return st;
}

/* ADD of 1 to "alive": the connection is still in step after a refusal. */
static int64_t raw_add(int fd, int rank)
{
	unsigned char h[9 + 5 + 8] = { HPCT_STD_ADD };
	char msg[512];
	hpct__put32(h + 1, (uint32_t)rank);
	hpct__put32(h + 5, 5);
	memcpy(h + 9, "alive", 5);
	hpct__put64(h + 14, 1);
	send_all(fd, h, sizeof(h));
	cr_assert_eq(raw_reply(fd, msg, sizeof(msg), "ADD"), 0, "ADD: %s", msg);
	unsigned char v[8];
	recv_all(fd, v, 8, "ADD");
	return (int64_t)hpct__get64(v);
}

/* ---- the tests ---- */

/* Twelve ranks each announce a 64 MiB value and send a trickle of it: the
 * server holds what arrived plus a window, not 768 MiB; the job goes on;
 * one of them then sends its whole value, which is stored intact. */
Test(bounds_stdpath, set_header_then_trickle, .timeout = 300)
{
	struct srv sv;
	struct srv_opts o = { .nranks = 16 };
	srv_start(&sv, 0, &o);
	long data0 = vm_kb(sv.pid, "VmData");
	const uint32_t big = HPCT_STD_MAX_VALUE;
	unsigned char trickle[1000];
	memset(trickle, 0xab, sizeof(trickle));
	int fds[16];
	for (int r = 4; r < 16; r++) {
		char key[32];
		fds[r] = raw_rank(sv.port, r, 16);
		snprintf(key, sizeof(key), "big/%d", r);
		set_hdr(fds[r], r, key, 1, big);
		send_all(fds[r], trickle, sizeof(trickle));
	}
	wait_log(&sv, "bytes announced", 12, NULL, 0);
	for (int r = 4; r < 16; r++)
		send_all(fds[r], trickle, sizeof(trickle)); /* and a little more */
	/* 12 x 64 MiB announced; what arrived and the windows are under 1 MiB */
	expect_allgather(&sv, 16, NULL, "ag");
	expect_rss_within(&sv, 16 * 1024, "12 ranks announcing 64 MiB each");
	/* an allocation never touched is not resident, but it is data: the
	 * 768 MiB announced must not be there either (figure: 64 MiB) */
	long data = vm_kb(sv.pid, "VmData");
	cr_expect_lt(data - data0, 64 * 1024 + SAN_SLACK_KB,
	             "the server's VmData grew from %ld kB to %ld kB after 768 MiB announced",
	             data0, data);
	cr_log_info("12 ranks announcing 64 MiB each: server VmData %ld kB -> %ld kB (+%ld kB)\n",
	            data0, data, data - data0);

	/* The rest of rank 4's value: the grown buffer holds it intact. */
	size_t rest = big - 2 * sizeof(trickle);
	unsigned char *v = malloc(big);
	cr_assert_not_null(v);
	for (size_t i = 0; i < big; i++)
		v[i] = i < 2 * sizeof(trickle) ? 0xab : (unsigned char)(i * 7 + (i >> 16));
	send_all(fds[4], v + 2 * sizeof(trickle), rest);
	char msg[512];
	cr_expect_eq(raw_reply(fds[4], msg, sizeof(msg), "the 64 MiB SET"), 0, "%s", msg);
	struct hpct_std_client *c = NULL;
	cr_assert_eq(
	        hpct__std_client_connect(HOST, sv.port, 0, 16, JOB, NULL, hpct__now() + WAIT_S, &c),
	        0, "%s", hpct_last_error());
	void *got = NULL;
	size_t len = 0;
	cr_expect_eq(hpct__std_get(c, "big/4", &got, &len, hpct__now() + WAIT_S), 0, "%s",
	             hpct_last_error());
	cr_expect(len == big && memcmp(got, v, big) == 0, "the 64 MiB value came back altered");
	free(got);
	free(v);
	hpct__std_client_close(c);
	for (int r = 4; r < 16; r++)
		close(fds[r]);
	srv_stop(&sv);
}

/* An MGET of a million keys is refused at its count, its keys are read and
 * dropped, and the connection stays in step; so is one whose keys' bytes
 * pass the limit. */
Test(bounds_stdpath, mget_of_a_million_keys, .timeout = 300)
{
	struct srv sv;
	struct srv_opts o = { .nranks = 5 };
	srv_start(&sv, 1, &o);
	int fd = raw_rank(sv.port, 4, 5);
	char who[64], line[1024], msg[512], want[160];
	raw_name(fd, who, sizeof(who));
	const uint32_t n = 1000000;
	unsigned char h[9] = { HPCT_STD_MGET };
	hpct__put32(h + 1, 4);
	hpct__put32(h + 5, n);
	send_all(fd, h, 9);
	cr_expect_eq(raw_reply(fd, msg, sizeof(msg), "the MGET of a million keys"), HPCT_EINVAL);
	cr_expect(strstr(msg, "MGET of 1000000 keys: one MGET may name 69 (the world size 5 + 64)"),
	          "%s", msg);
	wait_log(&sv, "MGET of 1000000 keys", 1, line, sizeof(line));
	snprintf(want, sizeof(want), "%s (rank 4): MGET of 1000000 keys", who);
	cr_expect(strstr(line, want) && strstr(line, "69"), "%s", line);
	/* the million keys follow, 16 MB of them: read and dropped */
	size_t klen = 12, chunk = 10000, per = 4 + klen;
	unsigned char *keys = malloc(chunk * per + 1); /* + snprintf's last NUL */
	cr_assert_not_null(keys);
	for (uint32_t i = 0; i < n; i += (uint32_t)chunk) {
		for (size_t j = 0; j < chunk; j++) {
			hpct__put32(keys + j * per, (uint32_t)klen);
			snprintf((char *)keys + j * per + 4, klen + 1, "k/%010zu", i + j);
		}
		send_all(fd, keys, chunk * per);
	}
	free(keys);
	cr_expect_eq(raw_add(fd, 4), 1);
	expect_rss_within(&sv, 16 * 1024, "an MGET of a million keys");

	/* 60 keys, under the count, of 4000 bytes: over (5 + 64) x 512 bytes */
	static char kbuf[60][4001];
	const char *kp[60];
	for (int i = 0; i < 60; i++) {
		memset(kbuf[i], 'a' + i % 26, 4000);
		kbuf[i][4000] = 0;
		kp[i] = kbuf[i];
	}
	cr_expect_eq(raw_mget(fd, 4, kp, 60, msg, sizeof(msg)), HPCT_EINVAL);
	cr_expect(strstr(msg, "names take over 35328 bytes"), "%s", msg);
	wait_log(&sv, "names take over", 1, line, sizeof(line));
	snprintf(want, sizeof(want), "%s (rank 4): MGET of 60 keys", who);
	cr_expect(strstr(line, want), "%s", line);
	cr_expect_eq(raw_add(fd, 4), 2);
	expect_allgather(&sv, 5, NULL, "ag");
	expect_rss_within(&sv, 16 * 1024, "oversized MGETs");
	close(fd);
	srv_stop(&sv);
}

struct filler {
	int fd, rank, nkeys;
	char keys[256][32];
};

/* SETs values of `size` bytes (readers 1) under <prefix><i> until refused;
 * returns how many it stored, the refusal in msg. */
static int fill(struct filler *f, const char *prefix, uint32_t size, char *msg, size_t mlen)
{
	unsigned char *v = calloc(1, size ? size : 1);
	int stored = 0;
	cr_assert_not_null(v);
	for (;;) {
		cr_assert_lt(f->nkeys, 256, "rank %d stored 256 keys and was never refused",
		             f->rank);
		snprintf(f->keys[f->nkeys], sizeof(f->keys[0]), "%s%d", prefix, f->nkeys);
		int st = raw_set(f->fd, f->rank, f->keys[f->nkeys], 1, v, size, msg, mlen);
		if (st != 0) {
			cr_expect_eq(st, HPCT_ENOMEM, "%s", msg);
			break;
		}
		f->nkeys++;
		stored++;
	}
	free(v);
	return stored;
}

/* Reads every key f stored once: they had one reader, so they go. */
static void drain(struct filler *f)
{
	char msg[512];
	for (int i = 0; i < f->nkeys; i++) {
		const char *k = f->keys[i];
		cr_expect_eq(raw_mget(f->fd, f->rank, &k, 1, msg, sizeof(msg)), 0, "%s", msg);
	}
	f->nkeys = 0;
}

/* With a 16 MiB store: one rank is stopped at half of it, the job goes on;
 * three fill it and the third is stopped at the whole; an MGET whose answer
 * would pass it is refused; real ranks are then refused too, naming the
 * server, until the keys are read away; the key count has its limit too. */
Test(bounds_stdpath, store_fills_to_its_limits, .timeout = 300)
{
	struct srv sv;
	struct srv_opts o = { .nranks = 6, .store_mb = "16", .store_keys = "200" };
	srv_start(&sv, 2, &o);
	struct filler f[6];
	char who[64], line[1024], msg[512], want[128];
	for (int r = 3; r < 6; r++) {
		f[r] = (struct filler){ .fd = raw_rank(sv.port, r, 6), .rank = r };
	}

	/* one rank: at most half the store */
	int n3 = fill(&f[3], "h3/", (uint32_t)MiB, msg, sizeof(msg));
	cr_expect(n3 >= 6 && n3 <= 8, "rank 3 stored %d MiB of an 8 MiB share", n3);
	cr_expect(strstr(msg, "rank 3's keys hold") &&
	                  strstr(msg, "8388608 bytes one rank may keep"),
	          "%s", msg);
	wait_log(&sv, "one rank may keep", 1, line, sizeof(line));
	raw_name(f[3].fd, who, sizeof(who));
	snprintf(want, sizeof(want), "%s (rank 3): SET of 'h3/", who);
	cr_expect(strstr(line, want), "%s", line);
	expect_allgather(&sv, 6, NULL, "ag1");

	/* three ranks: the whole store, down to the last bytes */
	fill(&f[4], "h4/", (uint32_t)MiB, msg, sizeof(msg));
	for (uint32_t sz = (uint32_t)MiB; sz >= 1; sz /= 2)
		fill(&f[5], "h5/", sz, msg, sizeof(msg));
	cr_expect(strstr(msg, "the store holds") && strstr(msg, "of its 16777216 bytes"), "%s",
	          msg);
	raw_name(f[5].fd, who, sizeof(who));
	snprintf(want, sizeof(want), "%s (rank 5): SET of 'h5/", who);
	wait_log(&sv, want, 1, line, sizeof(line));
	cr_expect(strstr(line, "of its 16777216 bytes (HPCT_STD_STORE_MB"), "%s", line);
	expect_rss_within(&sv, 32 * 1024, "a full 16 MiB store");

	/* an answer larger than the store: a key named 40 times */
	const char *same[40];
	for (int i = 0; i < 40; i++)
		same[i] = f[3].keys[0];
	cr_expect_eq(raw_mget(f[5].fd, 5, same, 40, msg, sizeof(msg)), HPCT_ENOMEM);
	cr_expect(strstr(msg, "an answer of"), "%s", msg);
	wait_log(&sv, "an answer of", 1, line, sizeof(line));
	cr_expect(strstr(line, "(rank 5)"), "%s", line);

	/* real ranks are refused now, and told so naming the server */
	char why[1024] = "";
	int rc = allgather3(&sv, 6, NULL, "ag2", why, sizeof(why));
	snprintf(want, sizeof(want), "the rendezvous at 127.0.0.1:%d refused SET of 'ag2/",
	         sv.port);
	cr_expect_eq(rc, HPCT_ENOMEM, "%s: %s", hpct_errname(rc), why);
	cr_expect(strstr(why, want) && strstr(why, "HPCT_STD_STORE_MB"), "%s", why);

	/* read away, the store takes the job's keys again */
	for (int r = 3; r < 6; r++)
		drain(&f[r]);
	expect_allgather(&sv, 6, NULL, "ag3");

	/* the key count: 200, the store being empty */
	int nk = fill(&f[3], "k/", 0, msg, sizeof(msg));
	cr_expect_eq(nk, 200, "rank 3 stored %d empty keys", nk);
	cr_expect(strstr(msg, "the store holds 200 keys, its limit (HPCT_STD_STORE_KEYS)"), "%s",
	          msg);
	wait_log(&sv, "its limit (HPCT_STD_STORE_KEYS)", 1, line, sizeof(line));
	cr_expect(strstr(line, "(rank 3)"), "%s", line);
	drain(&f[3]);
	expect_allgather(&sv, 6, NULL, "ag4");
	expect_rss_within(&sv, 32 * 1024, "the store drained");
	for (int r = 3; r < 6; r++)
		close(f[r].fd);
	srv_stop(&sv);
}

/* 300 connections that never say HELLO: past 2 x 4 + 256 the oldest are
 * closed at once, the rest at the HELLO deadline (HPCT_TIMEOUT, 5 s here),
 * as are one stuck in the secret's proof and one with half a HELLO, each
 * named; a client that proves and says HELLO slowly, byte by byte, within
 * the deadline is served. */
Test(bounds_stdpath, idle_connections_are_closed, .timeout = 300)
{
	struct hpct_auth_key key = { .secret = "bounds", .len = 6, .epoch = 1 };
	struct srv sv;
	struct srv_opts o = { .nranks = 4, .timeout = "5", .key = &key };
	srv_start(&sv, 3, &o);
	enum { NIDLE = 300 };
	static int idle[NIDLE];
	char who[64], line[1024], want[160];
	for (int i = 0; i < NIDLE; i++)
		idle[i] = raw_connect(sv.port);
	wait_log(&sv, "over the limit of 264 (2 x world size + 256)", NIDLE - 264, line,
	         sizeof(line));
	cr_expect(strstr(line, "it sent nothing"), "%s", line);

	/* stuck in the proof: 2 bytes of its first frame */
	int proof = raw_connect(sv.port);
	send_all(proof, "\0\0", 2);
	/* through the proof, then half a HELLO */
	struct hpct_auth_id id = { .job = JOB,
		                   .epoch = 1,
		                   .service = HPCT_AUTH_SERVICE_STDPATH,
		                   .client = 3,
		                   .server = 0,
		                   .size = 4 };
	int half = raw_connect(sv.port);
	cr_assert_eq(
	        hpct__auth_client(half, key.secret, key.len, &id, hpct__now() + WAIT_S, "test"), 0,
	        "%s", hpct_last_error());
	unsigned char h[21] = { HPCT_STD_HELLO };
	hpct__put32(h + 1, 3);
	hpct__put32(h + 5, HPCT_STD_MAGIC);
	hpct__put32(h + 9, 4);
	hpct__put64(h + 13, JOB);
	send_all(half, h, 10);
	/* slow but within the deadline: a byte every 20 ms, 0.4 s of 5 */
	int slow = raw_connect(sv.port);
	cr_assert_eq(
	        hpct__auth_client(slow, key.secret, key.len, &id, hpct__now() + WAIT_S, "test"), 0,
	        "%s", hpct_last_error());
	for (size_t i = 0; i < sizeof(h); i++) {
		send_all(slow, h + i, 1);
		usleep(20000);
	}
	char msg[512];
	cr_expect_eq(raw_reply(slow, msg, sizeof(msg), "the slow HELLO"), 0, "%s", msg);

	snprintf(want, sizeof(want), "%s: no HELLO within 5.0 s of connecting (HPCT_TIMEOUT)",
	         raw_name(proof, who, sizeof(who)));
	wait_log(&sv, want, 1, line, sizeof(line));
	cr_expect(strstr(line, "did not finish proving the shared secret (HPCT_SECRET)"), "%s",
	          line);
	snprintf(want, sizeof(want), "%s: no HELLO within 5.0 s of connecting (HPCT_TIMEOUT)",
	         raw_name(half, who, sizeof(who)));
	wait_log(&sv, want, 1, line, sizeof(line));
	cr_expect(strstr(line, "its HELLO is incomplete"), "%s", line);
	/* every idle one sees its connection closed */
	for (int i = 0; i < NIDLE; i++) {
		char b;
		struct pollfd p = { .fd = idle[i], .events = POLLIN };
		cr_expect_eq(poll(&p, 1, (int)(WAIT_S * 1000)), 1,
		             "idle connection %d still open after %.0f s", i, WAIT_S);
		cr_expect_leq(recv(idle[i], &b, 1, 0), 0);
		close(idle[i]);
	}
	wait_log(&sv, "no HELLO within 5.0 s of connecting (HPCT_TIMEOUT): it sent nothing", 1,
	         NULL, 0);
	expect_rss_within(&sv, 16 * 1024, "300 idle connections");

	/* the slow one was served and stays so: it leaves with BYE */
	unsigned char bye[5] = { HPCT_STD_BYE, 0, 0, 0, 3 };
	send_all(slow, bye, sizeof(bye));
	expect_allgather(&sv, 4, &key, "ag");
	close(slow);
	close(half);
	close(proof);
	srv_stop(&sv);
}

/* Out of descriptors (RLIMIT_NOFILE, the rest held elsewhere in the
 * process): the accept loop pauses without spinning, resumes once
 * descriptors free up though none of its connections closed, and the job
 * goes on. */
Test(bounds_stdpath, emfile_pauses_and_resumes, .timeout = 300)
{
	struct srv sv;
	struct srv_opts o = { .nranks = 4, .fd_room = 40 };
	srv_start(&sv, 4, &o);
	int idle[10];
	for (int i = 0; i < 10; i++)
		idle[i] = raw_connect(sv.port); /* in the backlog: accept fails */
	char line[1024];
	wait_log(&sv, "cannot accept (Too many open files)", 1, line, sizeof(line));
	cr_expect(strstr(line, "pausing new connections"), "%s", line);
	uint64_t w0, w1;
	cr_assert_eq(write(sv.ctl, "w", 1), 1);
	read_ans(&sv, &w0, sizeof(w0), "count its wakeups");
	/* a window to watch it in: a spinning loop wakes millions of times,
	 * a paused one a few times per ACCEPT_RETRY_S */
	usleep(1000 * 1000);
	cr_assert_eq(write(sv.ctl, "w", 1), 1);
	read_ans(&sv, &w1, sizeof(w1), "count its wakeups");
	cr_expect_lt(w1 - w0, 200, "the paused server woke %llu times in 1 s: it spins",
	             (unsigned long long)(w1 - w0));
	cr_log_info("paused: %llu wakeups in 1 s\n", (unsigned long long)(w1 - w0));

	char c;
	cr_assert_eq(write(sv.ctl, "c", 1), 1);
	read_ans(&sv, &c, 1, "free its descriptors");
	wait_log(&sv, "accepting connections again", 1, NULL, 0);
	expect_allgather(&sv, 4, NULL, "ag");
	expect_rss_within(&sv, 16 * 1024, "out of descriptors");
	for (int i = 0; i < 10; i++)
		close(idle[i]);
	srv_stop(&sv);
}

/* The defaults follow stdpath.h's formulas; and the client's side of a
 * refusal: its code, a message naming this rank, the server's host:port and
 * the limit with its value, and a connection that stays usable. */
Test(bounds_stdpath, refused_client_is_told_and_goes_on, .timeout = 120)
{
	struct hpct_std_limits lim;
	cr_assert_eq(hpct__std_limits_default(2, &lim), 0, "%s", hpct_last_error());
	cr_expect_eq(lim.mget_keys, 2 + 64);
	cr_expect_eq(lim.mget_key_bytes, (2 + 64) * 512);
	cr_expect_eq(lim.store_bytes, (size_t)(128 + 2 * 2) << 20);
	cr_expect_eq(lim.rank_bytes, lim.store_bytes / 2);
	cr_expect_eq(lim.store_keys, 4 * 34 * 34);
	cr_expect_eq(lim.early_conns, 2 * 2 + 256);

	int port = hpct_test_ports(5);
	lim.store_bytes = 1 << 20;
	lim.rank_bytes = 1 << 19;
	struct hpct_std_server *s = NULL;
	cr_assert_eq(hpct__std_server_start_limits(HOST, port, 2, JOB, NULL, &lim, &s), 0, "%s",
	             hpct_last_error());
	struct hpct_std_client *a = NULL;
	double dl = hpct__now() + WAIT_S;
	cr_assert_eq(hpct__std_client_connect(HOST, port, 0, 2, JOB, NULL, dl, &a), 0, "%s",
	             hpct_last_error());
	char want[128];
	snprintf(want, sizeof(want), "rank 0: the rendezvous at 127.0.0.1:%d refused SET of 'big'",
	         port);
	void *v = calloc(1, 600 * 1024);
	cr_assert_not_null(v);
	cr_expect_eq(hpct__std_set(a, "big", v, 600 * 1024, 0, dl), HPCT_ENOMEM);
	cr_expect(strstr(hpct_last_error(), want) &&
	                  strstr(hpct_last_error(), "of the 524288 bytes one rank may keep"),
	          "%s", hpct_last_error());
	free(v);
	cr_expect_eq(hpct__std_set(a, "small", "ok", 3, 0, dl), 0, "%s", hpct_last_error());

	static char keys[70][16];
	const char *kp[70];
	void *bufs[70];
	size_t lens[70];
	char out[70][3];
	for (int i = 0; i < 70; i++) {
		snprintf(keys[i], sizeof(keys[i]), "small");
		kp[i] = keys[i];
		bufs[i] = out[i];
		lens[i] = 3;
	}
	snprintf(want, sizeof(want), "rank 0: the rendezvous at 127.0.0.1:%d refused MGET of",
	         port);
	cr_expect_eq(hpct__std_mget(a, kp, 70, bufs, lens, dl), HPCT_EINVAL);
	cr_expect(strstr(hpct_last_error(), want) &&
	                  strstr(hpct_last_error(), "one MGET may name 66 (the world size 2 + 64)"),
	          "%s", hpct_last_error());
	cr_expect_eq(hpct__std_mget(a, kp, 66, bufs, lens, dl), 0, "%s", hpct_last_error());
	cr_expect_str_eq(out[65], "ok");
	hpct__std_client_close(a);
	hpct__std_server_stop(s, hpct__now() + 5);
}
