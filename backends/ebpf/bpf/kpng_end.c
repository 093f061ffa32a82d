// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
//
// Ending sockets whose endpoint left their Service: two socket
// iterators the backend runs in each network namespace of its cgroup
// after a round that removed endpoints.
//
// - `iter/udp` (issue #28): a connected UDP socket sent through a
//   Service (`kpng_reverse`, which the socket programs of kpng_sock.c
//   write at connect) to an endpoint the round took from the Service's
//   endpoint sets (`kpng_gone`).
// - `iter/tcp` (issue #38, opt-in): a TCP socket connected through a
//   Service to an endpoint that left the node's view altogether
//   (`kpng_gone_tcp`; one that drains, terminating but serving, is not
//   there).
//
// Each is ended with the kfunc `bpf_sock_destroy` (Linux 6.5): a UDP
// socket's owner's next send or receive fails with ECONNABORTED, and its
// next connect reaches a live endpoint; a TCP socket is aborted
// (tcp_abort: a reset to the peer where the state asks for one, the
// owner's blocked or next call fails with ECONNABORTED). A socket
// connected to the endpoint's address itself has no `kpng_reverse`
// entry and is left alone.
//
// A separate object from kpng_sock.c: the kernel lets only programs of
// a GPL-compatible license call kfuncs, and the license an object
// declares is its every program's. This file alone is also offered
// under GPL-2.0.
//
// The kfunc call is written as its raw instruction (aya 0.14 does not
// resolve `__ksym` externs): `call` with src_reg BPF_PSEUDO_KFUNC_CALL
// and the placeholder 0x44537068 ("hpSD") as its BTF id, once in each
// program; the backend writes bpf_sock_destroy's id in the running
// kernel's BTF there before loading (src/sockets.rs).

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define FAMILY_V4 4
#define FAMILY_V6 6
#define AF_INET 2
#define AF_INET6 10
#define TCP_ESTABLISHED 1 // a connected UDP socket's state
#define TCP_CLOSE 7
#define TCP_LISTEN 10

// As kpng_sock.c declares them.
struct endpoint {
	__u32 addr[4];
	__u16 port;
	__u8 family;
	__u8 flags;
};

struct reverse_key {
	__u64 cookie;
	struct endpoint endpoint;
	__u32 pad;
};

// kpng_sock.c's map, opened from its pin: (socket, endpoint) -> the
// Service address the socket asked for.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct reverse_key);
	__type(value, struct endpoint);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_reverse SEC(".maps");

// A Service address and an endpoint the round took from it (flags 0).
struct gone_key {
	struct endpoint service;
	struct endpoint endpoint;
};

// The pairs a round removed: written by the backend before it runs the
// iterator, emptied after (this object's own, not pinned).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 12);
	__type(key, struct gone_key);
	__type(value, __u8);
} kpng_gone SEC(".maps");

// The pairs of TCP Service ports whose endpoint left the view: as
// kpng_gone, for the TCP iterator.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 12);
	__type(key, struct gone_key);
	__type(value, __u8);
} kpng_gone_tcp SEC(".maps");

// UDP: [0] sockets ended, [1] sockets the kfunc failed to end; TCP: [2]
// and [3].
#define ENDED_UDP 0
#define ENDED_TCP 2

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} kpng_ended SEC(".maps");

// The kernel's types, as far as read here (CO-RE: the loader finds each
// field's offset in the running kernel's BTF).
struct in6_addr {
	union {
		__u32 u6_addr32[4];
	} in6_u;
} __attribute__((preserve_access_index));

struct sock_common {
	__u32 skc_daddr;
	__u16 skc_dport;
	unsigned short skc_family;
	unsigned char skc_state;
	struct in6_addr skc_v6_daddr;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
} __attribute__((preserve_access_index));

struct bpf_iter_meta;

struct bpf_iter__udp {
	struct bpf_iter_meta *meta;
	struct sock *udp_sk;
};

struct bpf_iter__tcp {
	struct bpf_iter_meta *meta;
	struct sock_common *sk_common;
	__u32 uid;
};

// bpf_sock_destroy(sk): 0, or a negative errno.
static __always_inline long sock_destroy(struct sock *sk)
{
	register struct sock *r1 asm("r1") = sk;
	register long r0 asm("r0");

	asm volatile(".byte 0x85, 0x20, 0x00, 0x00, 0x68, 0x70, 0x53, 0x44"
		     : "=r"(r0), "+r"(r1)
		     :
		     : "r2", "r3", "r4", "r5", "memory");
	return r0;
}

static __always_inline void count_ended(__u32 what)
{
	__u64 *n = bpf_map_lookup_elem(&kpng_ended, &what);

	if (n)
		*n += 1;
}

// The (Service address, endpoint) pair that sent socket `skc` (cookie
// `cookie`) to its peer, in `gone`'s key; 0 when a Service did not send
// it there. `key` is the socket's `kpng_reverse` key.
static __always_inline int sent_by(struct sock_common *skc, __u64 cookie,
				   struct reverse_key *key,
				   struct gone_key *gone)
{
	struct endpoint *service;
	unsigned short family = skc->skc_family;

	if (family == AF_INET) {
		key->endpoint.addr[0] = skc->skc_daddr;
		key->endpoint.family = FAMILY_V4;
	} else if (family == AF_INET6) {
		key->endpoint.addr[0] = skc->skc_v6_daddr.in6_u.u6_addr32[0];
		key->endpoint.addr[1] = skc->skc_v6_daddr.in6_u.u6_addr32[1];
		key->endpoint.addr[2] = skc->skc_v6_daddr.in6_u.u6_addr32[2];
		key->endpoint.addr[3] = skc->skc_v6_daddr.in6_u.u6_addr32[3];
		key->endpoint.family = FAMILY_V6;
	} else {
		return 0;
	}
	key->endpoint.port = skc->skc_dport;
	key->cookie = cookie;
	service = bpf_map_lookup_elem(&kpng_reverse, key);
	if (!service)
		return 0; // not sent there by a Service
	gone->service = *service;
	gone->endpoint = key->endpoint;
	return 1;
}

SEC("iter/udp")
int kpng_udp_end(struct bpf_iter__udp *ctx)
{
	struct sock *sk = ctx->udp_sk;
	struct reverse_key key = {};
	struct gone_key gone = {};

	if (!sk)
		return 0;
	if (sk->__sk_common.skc_state != TCP_ESTABLISHED)
		return 0; // not connected: each datagram is balanced anew
	if (!sent_by(&sk->__sk_common, bpf_get_socket_cookie(sk), &key, &gone))
		return 0;
	if (!bpf_map_lookup_elem(&kpng_gone, &gone))
		return 0;
	if (sock_destroy(sk)) {
		count_ended(ENDED_UDP + 1);
		return 0;
	}
	bpf_map_delete_elem(&kpng_reverse, &key);
	count_ended(ENDED_UDP);
	return 0;
}

// TCP sockets connected (or connecting) through a Service to an
// endpoint that left: full sockets only (bpf_sock_destroy takes no
// request or TIME_WAIT socket, and the iterator locks full ones only),
// not listeners, not closed ones.
SEC("iter/tcp")
int kpng_tcp_end(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct reverse_key key = {};
	struct gone_key gone = {};
	unsigned char state;

	if (!skc)
		return 0;
	if (!bpf_skc_to_tcp_sock(skc))
		return 0; // a request or TIME_WAIT socket
	state = skc->skc_state;
	if (state == TCP_LISTEN || state == TCP_CLOSE)
		return 0;
	if (!sent_by(skc, bpf_get_socket_cookie(skc), &key, &gone))
		return 0;
	if (!bpf_map_lookup_elem(&kpng_gone_tcp, &gone))
		return 0;
	if (sock_destroy((struct sock *)skc)) {
		count_ended(ENDED_TCP + 1);
		return 0;
	}
	bpf_map_delete_elem(&kpng_reverse, &key);
	count_ended(ENDED_TCP);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
