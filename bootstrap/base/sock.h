/* Blocking-with-deadline socket helpers shared by the clients that talk to
 * one server at a time (the standard path's rendezvous, the rootless
 * store).  Deadlines are CLOCK_MONOTONIC seconds (hpct__now). */
#ifndef HPCT_SOCK_H
#define HPCT_SOCK_H

#include "bootstrap/base/private_api.h"

#include <stdint.h>
#include <sys/socket.h>

/* 1: ready, 0: deadline passed, <0: -errno. */
HPCT_PRIVATE int hpct__sock_wait(int fd, short events, double deadline);
/* One connect attempt: the connected fd (blocking, TCP_NODELAY), -errno,
 * or HPCT_ETIMEDOUT when the deadline came first. */
int hpct__sock_connect(const struct sockaddr_storage *ss, socklen_t sl, double deadline);
/* After a send or recv on fd returned < 0: 0 to try again (interrupted,
 * or fd became ready for `events`), else what to return: -errno, or
 * HPCT_ETIMEDOUT when the deadline passed first. */
HPCT_PRIVATE int hpct__sock_again(int fd, short events, double deadline);
/* Errors worth another connect attempt (nobody listening yet, ...). */
int hpct__sock_retryable(int err);
HPCT_PRIVATE void hpct__sleep(double s);
/* All of buf, or HPCT_ETIMEDOUT / -errno; recv_all: HPCT_EPEERDEAD when the
 * peer closed first. */
HPCT_PRIVATE int hpct__sock_send_all(int fd, const void *buf, size_t len, double deadline);
HPCT_PRIVATE int hpct__sock_recv_all(int fd, void *buf, size_t len, double deadline);

#endif
