/* The transport interface under the rootless engine.
 *
 * A transport moves whole messages between this process and its peers.  It is
 * a const table of functions plus a context; nothing blocks except
 * progress(), which waits for events up to a timeout and reports them through
 * a callback.  "Not yet" is a return value or a later event, never a sleep.
 * The TCP transport frames messages on a byte stream; a message-oriented
 * transport (libfabric) or a simulated one fits the same table. */
#ifndef HPCT_TRANSPORT_H
#define HPCT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Largest message a transport accepts; longer ones are refused with
 * -EMSGSIZE on send and close the connection (HPCT_EPROTO) on receive. */
#define HPCT_TRANSPORT_MAX_MSG (256u << 20)

/* An address that is not an IP and port: a provider's endpoint name (EFA,
 * verbs), passed where a struct sockaddr is expected, in a sockaddr_storage
 * whose family is AF_UNSPEC. */
#define HPCT_RAW_ADDR_MAX 96
struct hpct_raw_addr {
	sa_family_t family; /* AF_UNSPEC */
	uint16_t len;
	unsigned char bytes[HPCT_RAW_ADDR_MAX];
};

/* Every transport's connection begins with this; `user` belongs to the
 * caller. */
struct hpct_tconn {
	void *user;
};

enum hpct_tevent_type {
	HPCT_TEV_CONNECTED,      /* an outgoing connection completed */
	HPCT_TEV_CONNECT_FAILED, /* an outgoing connection failed: err (-ECONNREFUSED also when
	                          * it met itself); the conn is closed after the callback (the
	                          * transport frees it; close() on it does nothing) */
	HPCT_TEV_ACCEPTED,       /* a new incoming connection; peer is its address */
	HPCT_TEV_MESSAGE,        /* one whole message: data, len (valid during the callback only) */
	HPCT_TEV_CLOSED, /* the peer closed (err 0) or the connection failed (err < 0); the conn is
	                    freed after the callback */
};

struct hpct_tevent {
	enum hpct_tevent_type type;
	struct hpct_tconn *conn;
	int err; /* -errno, or HPCT_EPROTO for a bad frame */
	const void *data;
	size_t len;
	const struct sockaddr *peer; /* ACCEPTED: the remote address */
	socklen_t peer_len;
};

typedef void (*hpct_tevent_cb)(void *arg, const struct hpct_tevent *ev);

struct hpct_transport_ops {
	const char *name;
	/* A context for one process's endpoint. */
	int (*create)(void **ctx_out);
	/* Closes every connection and the listener, then frees ctx. */
	void (*destroy)(void *ctx);
	/* Listens at exactly this address (no wildcard).  -EADDRINUSE when taken.
	 * Called again, it moves the listener: the new one is open before the
	 * old one closes (connections not yet accepted there are dropped). */
	int (*listen)(void *ctx, const struct sockaddr *addr, socklen_t len);
	/* Starts a connection; its outcome arrives as CONNECTED or
	 * CONNECT_FAILED.  Messages may be sent before it completes.  A failure
	 * known at once is returned as -errno and no conn is made. */
	int (*connect)(void *ctx, const struct sockaddr *addr, socklen_t len, void *user,
	               struct hpct_tconn **conn_out);
	/* Queues one whole message; the transport copies it.  0 or -errno. */
	int (*send)(struct hpct_tconn *conn, const void *buf, size_t len);
	/* Largest message this conn may receive (default HPCT_TRANSPORT_MAX_MSG);
	 * a longer frame closes it with HPCT_EPROTO.  Kept small until a peer
	 * has identified itself, so a stranger cannot make us allocate. */
	void (*set_max_msg)(struct hpct_tconn *conn, size_t max);
	/* Bytes accepted by send() and not yet handed to the network. */
	size_t (*pending)(struct hpct_tconn *conn);
	/* The same over every conn of the context. */
	size_t (*backlog)(void *ctx);
	/* Waits up to timeout_ms (0: poll once) for events, moves bytes, and
	 * calls cb for each event.  cb may call send() and close() on any conn.
	 * Returns the number of events or -errno. */
	int (*progress)(void *ctx, int timeout_ms, hpct_tevent_cb cb, void *arg);
	/* Closes a conn now; no further events for it.  Queued bytes are dropped. */
	void (*close)(struct hpct_tconn *conn);
	/* The remote address of a conn as text. */
	void (*peer_name)(struct hpct_tconn *conn, char *buf, size_t len);
	/* What the last failing call of this thread meant, in words naming the
	 * culprit (provider, address), or ""; NULL when the transport's codes
	 * say it all. */
	const char *(*why)(void);
	/* This endpoint's own name as peers must be given it (an address to
	 * exchange when it cannot be derived); NULL when addresses are IP and
	 * port only.  0 or -errno (-ENOSPC when *len is too small). */
	int (*self_name)(void *ctx, void *buf, size_t *len);
	/* Pays what the transport costs once per process (loading a library,
	 * initialising its providers) ahead of the first create; NULL when
	 * there is nothing to pay.  0 or -errno. */
	int (*prepare)(void);
};

/* Where a transport says what it refused or capped (a stranger's
 * connections, a broken peer's pieces): one line naming the peer, without a
 * newline.  The layer above sets it before its first create
 * (bootstrap/rootless/path.c: hpct's log at WARN, subsystem NET); until
 * then such lines are dropped (the fuzz targets).  The lines are counted
 * by the transport either way. */
typedef void (*hpct_transport_log_fn)(const char *line);
void hpct__transport_set_log(hpct_transport_log_fn fn);
void hpct__transport_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Where a transport says what its own start and connections cost this
 * process (what a slow start is to be read from): set by the layer above
 * only when such lines are wanted (bootstrap/rootless/path.c: hpct's log at
 * INFO, subsystem NET), so hpct__transport_info_on() says whether to
 * measure and format them at all. */
void hpct__transport_set_info(hpct_transport_log_fn fn);
int hpct__transport_info_on(void);
void hpct__transport_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Transports by name ("tcp"); NULL when unknown. */
const struct hpct_transport_ops *hpct_transport_find(const char *name);
/* Comma-separated names of the transports built in. */
const char *hpct_transport_names(void);

extern const struct hpct_transport_ops hpct_transport_tcp;
#ifdef HPCT_HAVE_OFI
extern const struct hpct_transport_ops hpct_transport_ofi;
#endif

#endif
