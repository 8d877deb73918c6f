/* What hpct puts on the wire between ranks: the handshake that opens every
 * connection and the header of every engine message.  All integers are
 * big-endian; decoders check every length and never read past the buffer. */
#ifndef HPCT_WIRE_H
#define HPCT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define HPCT_WIRE_MAGIC   0x48504354u /* "HPCT" */
#define HPCT_WIRE_VERSION 1
#define HPCT_HELLO_LEN    48

enum hpct_hello_type { HPCT_HELLO = 1, HPCT_HELLO_ACK = 2, HPCT_HELLO_REFUSE = 3 };

/* Why an acceptor refused a connection (carried in REFUSE). */
enum hpct_refuse_reason {
	HPCT_REFUSE_NONE = 0,
	HPCT_REFUSE_JOB = 1,   /* another job */
	HPCT_REFUSE_EPOCH = 2, /* another restart epoch */
	HPCT_REFUSE_RANK = 3,  /* the destination rank is not this process */
	HPCT_REFUSE_SIZE = 4,  /* another world size */
	HPCT_REFUSE_DUP = 5,   /* that source rank is already connected */
	HPCT_REFUSE_SRC = 6,   /* source rank out of range */
};

struct hpct_hello {
	uint16_t type;
	uint64_t job, epoch, group;
	uint32_t src, dst, size;
	uint32_t reason;
};

void hpct__hello_encode(const struct hpct_hello *h, unsigned char out[HPCT_HELLO_LEN]);
/* HPCT_EPROTO for a wrong length, magic, version or type. */
int hpct__hello_decode(const void *buf, size_t len, struct hpct_hello *h_out);
const char *hpct__refuse_reason_str(uint32_t reason);

/* Engine messages. */
#define HPCT_MSG_HDR_LEN 16
/* EPOCH: a survivor of an in-process recovery tells a peer over an
 * existing link which epoch it is at now (payload: 8 bytes). */
enum hpct_msg_type { HPCT_MSG_DATA = 16, HPCT_MSG_ABORT = 17, HPCT_MSG_EPOCH = 18 };

struct hpct_msg_hdr {
	uint8_t type;
	uint16_t round;
	uint32_t seq;
	uint64_t group;
};

void hpct__msg_hdr_encode(const struct hpct_msg_hdr *h, unsigned char out[HPCT_MSG_HDR_LEN]);
int hpct__msg_hdr_decode(const void *buf, size_t len, struct hpct_msg_hdr *h_out);

/* ABORT payload: why a rank gave up on a group, so others fail fast with the
 * first cause instead of waiting for their deadline. */
struct hpct_abort {
	int32_t code;
	uint32_t origin; /* rank that first failed */
	int32_t culprit; /* rank it blames, -1 when none */
	char text[256];  /* its error message, NUL-terminated */
};
/* Returns the encoded length; out must hold 12 + 256 bytes. */
size_t hpct__abort_encode(const struct hpct_abort *a, unsigned char *out);
int hpct__abort_decode(const void *buf, size_t len, struct hpct_abort *a_out);

#endif
