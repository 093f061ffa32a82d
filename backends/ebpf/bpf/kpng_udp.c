// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only
//
// Ending connected UDP sockets whose endpoint left their Service (issue
// #28): a socket iterator the backend runs in each network namespace of
// its cgroup after a round that removed endpoints of UDP Services. A
// socket connected through a Service (`kpng_reverse`, which the socket
// programs of kpng_sock.c write at connect) to an endpoint the round
// removed (`kpng_gone`) is ended with the kfunc `bpf_sock_destroy`
// (Linux 6.5): its owner's next send or receive fails with
// ECONNABORTED, and its next connect reaches a live endpoint. A socket
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
// and the placeholder 0x44537068 ("hpSD") as its BTF id; the backend
// writes bpf_sock_destroy's id in the running kernel's BTF there before
// loading (src/sockets.rs).

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define FAMILY_V4 4
#define FAMILY_V6 6
#define AF_INET 2
#define AF_INET6 10
#define TCP_ESTABLISHED 1 // a connected UDP socket's state

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

// [0] sockets ended, [1] sockets the kfunc failed to end.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
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

SEC("iter/udp")
int kpng_udp_end(struct bpf_iter__udp *ctx)
{
	struct sock *sk = ctx->udp_sk;
	struct reverse_key key = {};
	struct gone_key gone = {};
	struct endpoint *service;
	unsigned short family;

	if (!sk)
		return 0;
	if (sk->__sk_common.skc_state != TCP_ESTABLISHED)
		return 0; // not connected: each datagram is balanced anew
	family = sk->__sk_common.skc_family;
	if (family == AF_INET) {
		key.endpoint.addr[0] = sk->__sk_common.skc_daddr;
		key.endpoint.family = FAMILY_V4;
	} else if (family == AF_INET6) {
		key.endpoint.addr[0] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[0];
		key.endpoint.addr[1] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[1];
		key.endpoint.addr[2] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[2];
		key.endpoint.addr[3] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[3];
		key.endpoint.family = FAMILY_V6;
	} else {
		return 0;
	}
	key.endpoint.port = sk->__sk_common.skc_dport;
	key.cookie = bpf_get_socket_cookie(sk);
	service = bpf_map_lookup_elem(&kpng_reverse, &key);
	if (!service)
		return 0; // not sent there by a Service
	gone.service = *service;
	gone.endpoint = key.endpoint;
	if (!bpf_map_lookup_elem(&kpng_gone, &gone))
		return 0;
	if (sock_destroy(sk)) {
		count_ended(1);
		return 0;
	}
	bpf_map_delete_elem(&kpng_reverse, &key);
	count_ended(0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
