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

enum hpct_hello_type {
	HPCT_HELLO = 1,
	HPCT_HELLO_ACK = 2,
	HPCT_HELLO_REFUSE = 3,
	/* with a shared secret (HPCT_SECRET): HELLO carries the connector's
	 * nonce; the acceptor answers CHALLENGE (its nonce and its proof), the
	 * connector AUTH (its proof) and is ready; the acceptor admits on a
	 * good proof, else REFUSEs */
	HPCT_HELLO_CHALLENGE = 4,
	HPCT_HELLO_AUTH = 5,
};

/* Why an acceptor refused a connection (carried in REFUSE). */
enum hpct_refuse_reason {
	HPCT_REFUSE_NONE = 0,
	HPCT_REFUSE_JOB = 1,    /* another job */
	HPCT_REFUSE_EPOCH = 2,  /* another restart epoch */
	HPCT_REFUSE_RANK = 3,   /* the destination rank is not this process */
	HPCT_REFUSE_SIZE = 4,   /* another world size */
	HPCT_REFUSE_DUP = 5,    /* that source rank is already connected */
	HPCT_REFUSE_SRC = 6,    /* source rank out of range */
	HPCT_REFUSE_AUTH = 7,   /* no proof of the shared secret, or a wrong one */
	HPCT_REFUSE_NOAUTH = 8, /* a proof offered to a rank that has no secret */
};

/* With a secret every handshake frame is a HELLO followed by a 32-byte
 * nonce and a 32-byte HMAC-SHA256 (zero where a frame has none). */
#define HPCT_AUTH_NONCE 32
#define HPCT_AUTH_MAC   32
#define HPCT_AUTH_LEN   (HPCT_HELLO_LEN + HPCT_AUTH_NONCE + HPCT_AUTH_MAC)

struct hpct_hello {
	uint16_t type;
	uint64_t job, epoch, group;
	uint32_t src, dst, size;
	uint32_t reason;
};

void hpct__hello_encode(const struct hpct_hello *h, unsigned char out[HPCT_HELLO_LEN]);
/* HPCT_EPROTO for a wrong length, magic, version or type.  An
 * HPCT_AUTH_LEN frame decodes too: its nonce and MAC go to nonce/mac when
 * those are not NULL (else they are zeroed). */
int hpct__hello_decode(const void *buf, size_t len, struct hpct_hello *h_out);
int hpct__hello_decode_auth(const void *buf, size_t len, struct hpct_hello *h_out,
                            unsigned char nonce[HPCT_AUTH_NONCE], unsigned char mac[HPCT_AUTH_MAC]);
/* libcrypto (libcrypto.so.3, loaded on first use) is there. */
int hpct__auth_available(void);
/* Two MACs are equal (in constant time). */
int hpct__auth_equal(const unsigned char *a, const unsigned char *b);
/* The proof one side gives: HMAC-SHA256 under the secret of who it is
 * ('A' acceptor, 'C' connector), both nonces (its own first) and the
 * handshake's job, epoch, group, connector rank and acceptor rank.
 * 0, or HPCT_EINVAL when libcrypto fails. */
int hpct__auth_mac(const void *secret, size_t slen, char who, const unsigned char *own_nonce,
                   const unsigned char *peer_nonce, const struct hpct_hello *h, uint32_t connector,
                   uint32_t acceptor, unsigned char mac[HPCT_AUTH_MAC]);
/* HMAC-SHA256 under the secret of len bytes of data, for messages that
 * carry their own tag (the exchange's datagrams).  0, or HPCT_EINVAL when
 * libcrypto is missing or fails. */
int hpct__auth_hmac(const void *secret, size_t slen, const void *data, size_t len,
                    unsigned char mac[HPCT_AUTH_MAC]);
const char *hpct__refuse_reason_str(uint32_t reason);

/* Engine messages. */
#define HPCT_MSG_HDR_LEN 16
/* EPOCH: a survivor of an in-process recovery tells a peer over an
 * existing link which epoch it is at now (payload: 8 bytes).  PING: a rank
 * whose deadline passed while it waits on a connected peer asks whether that
 * peer is alive; the peer answers PONG (both empty). */
enum hpct_msg_type {
	HPCT_MSG_DATA = 16,
	HPCT_MSG_ABORT = 17,
	HPCT_MSG_EPOCH = 18,
	HPCT_MSG_PING = 19,
	HPCT_MSG_PONG = 20,
};

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
