// SPDX-License-Identifier: Apache-2.0
//
// Socket-level load balancing: cgroup sock_addr programs that send a
// socket straight to a Service's endpoint, so no packet of the
// connection is translated. Part of kpng_sock.c's compilation unit.

#include "kpng_common.h"

// An LB IP with loadBalancerSourceRanges, for a socket of `netns`, as
// kube-proxy's rules decide by the packet's source: the node's sockets
// (its network namespace: a node address) translate when a node address
// is in the ranges, else are dropped; a pod's, when every pod network is
// in them, dropped when none is, and left alone otherwise (its source is
// not known at connect).
static __always_inline int ranged(struct service *svc, __u64 netns)
{
	struct settings *settings;
	__u32 zero = 0;

	settings = bpf_map_lookup_elem(&kpng_settings, &zero);
	if (settings && settings->node_netns == netns)
		return (svc->flags & RANGED_NODE) ? TRANSLATE : DROP;
	if (svc->flags & RANGED_PODS)
		return TRANSLATE;
	if (svc->flags & RANGED_NO_PODS)
		return DROP;
	return PASS;
}

// The endpoint for a socket of `netns` asking for `fe`; `flow`: the
// socket's cookie when its datagrams are to stay with one endpoint
// (sendmsg), 0 otherwise.
static __always_inline int pick(struct frontend *fe, __u64 netns, __u64 flow,
				struct endpoint *out)
{
	struct flow_key fkey = {};
	struct flow_value *f;
	struct service *svc;
	struct page *first;
	struct endpoint *ep;
	struct set_key key = {};
	struct affinity_key akey = {};
	struct affinity_value *aff;
	__u64 now = 0;
	__u32 n, i;

	svc = bpf_map_lookup_elem(&kpng_services, fe);
	if (!svc)
		return no_service(fe);
	// A localhost NodePort is the node's: a pod's loopback is its own.
	if ((svc->flags & NODE_NETNS) && !node_netns(netns))
		return PASS;
	if (svc->flags & SOCK_RANGED) {
		int what = ranged(svc, netns);

		if (what != TRANSLATE)
			return what;
	}
	key.set = svc->set;
	first = bpf_map_lookup_elem(&kpng_slots, &key);
	n = first ? first->count : 0;
	if (n == 0)
		return (svc->flags & EMPTY_REJECT) ? REFUSE : DROP;

	if (svc->affinity) {
		now = bpf_ktime_get_ns();
		akey.netns = netns;
		akey.set = svc->set;
		aff = bpf_map_lookup_elem(&kpng_affinity, &akey);
		if (still_affine(aff, svc, now)) {
			*out = aff->endpoint;
			aff->last_ns = now;
			// A datagram's flow was counted at its first.
			return flow ? KNOWN : TRANSLATE;
		}
	}

	if (flow) {
		if (!now)
			now = bpf_ktime_get_ns();
		fkey.cookie = flow;
		fkey.frontend = *fe;
		f = bpf_map_lookup_elem(&kpng_flows, &fkey);
		if (f && f->set == svc->set && f->index < n &&
		    now - f->last_ns <= FLOW_IDLE_NS) {
			// Still in the slot it was found in: still an endpoint.
			ep = slot_of(first, svc->set, f->index);
			if (ep && same(ep, &f->endpoint)) {
				*out = f->endpoint;
				f->last_ns = now;
				return KNOWN;
			}
		}
	}

	i = in_turn(svc, first, n);
	ep = slot_of(first, svc->set, i);
	if (!ep) {
		count(COUNT_MISSING);
		return DROP;
	}
	*out = *ep;
	if (svc->affinity) {
		struct affinity_value value = {};

		value.endpoint = *out;
		value.last_ns = now;
		bpf_map_update_elem(&kpng_affinity, &akey, &value, BPF_ANY);
	}
	if (flow) {
		struct flow_value value = {};

		value.endpoint = *out;
		value.set = svc->set;
		value.index = i;
		value.last_ns = now;
		bpf_map_update_elem(&kpng_flows, &fkey, &value, BPF_ANY);
	}
	return TRANSLATE;
}

static __always_inline void remember(__u64 cookie, struct endpoint *ep,
				     struct frontend *fe)
{
	struct reverse_key key = {};
	struct endpoint service = {};
	int i;

	key.cookie = cookie;
	key.endpoint = *ep;
	key.endpoint.flags = 0; // as the packet's address reads it back
	for (i = 0; i < 4; i++)
		service.addr[i] = fe->addr[i];
	service.port = fe->port;
	service.family = fe->family;
	bpf_map_update_elem(&kpng_reverse, &key, &service, BPF_ANY);
}

static __always_inline int verdict(int what)
{
	if (what == REFUSE) {
		count(COUNT_REFUSED);
		bpf_set_retval(-ECONNREFUSED);
		return 0;
	}
	count(COUNT_DROPPED);
	bpf_set_retval(-EPERM);
	return 0;
}

static __always_inline int forward4(struct bpf_sock_addr *ctx, int datagram)
{
	struct frontend fe = {};
	struct endpoint ep;
	int what;

	fe.addr[0] = ctx->user_ip4;
	fe.port = (__u16)ctx->user_port;
	fe.proto = (__u8)ctx->protocol;
	fe.family = FAMILY_V4;
	what = pick(&fe, bpf_get_netns_cookie(ctx),
		    datagram ? bpf_get_socket_cookie(ctx) : 0, &ep);
	if (what == PASS)
		return 1;
	if (what != TRANSLATE && what != KNOWN)
		return verdict(what);
	if (ep.family != FAMILY_V4)
		return verdict(DROP);
	if (what == TRANSLATE)
		count_traffic(&fe, &ep);
	ctx->user_ip4 = ep.addr[0];
	ctx->user_port = (__u32)ep.port;
	remember(bpf_get_socket_cookie(ctx), &ep, &fe);
	count(COUNT_TRANSLATED);
	return 1;
}

static __always_inline int forward6(struct bpf_sock_addr *ctx, int datagram)
{
	struct frontend fe = {};
	struct endpoint ep;
	int what;

	fe.addr[0] = ctx->user_ip6[0];
	fe.addr[1] = ctx->user_ip6[1];
	fe.addr[2] = ctx->user_ip6[2];
	fe.addr[3] = ctx->user_ip6[3];
	fe.port = (__u16)ctx->user_port;
	fe.proto = (__u8)ctx->protocol;
	fe.family = FAMILY_V6;
	what = pick(&fe, bpf_get_netns_cookie(ctx),
		    datagram ? bpf_get_socket_cookie(ctx) : 0, &ep);
	if (what == PASS)
		return 1;
	if (what != TRANSLATE && what != KNOWN)
		return verdict(what);
	if (ep.family != FAMILY_V6)
		return verdict(DROP);
	if (what == TRANSLATE)
		count_traffic(&fe, &ep);
	ctx->user_ip6[0] = ep.addr[0];
	ctx->user_ip6[1] = ep.addr[1];
	ctx->user_ip6[2] = ep.addr[2];
	ctx->user_ip6[3] = ep.addr[3];
	ctx->user_port = (__u32)ep.port;
	remember(bpf_get_socket_cookie(ctx), &ep, &fe);
	count(COUNT_TRANSLATED);
	return 1;
}

// The address a peer shows: the Service's, when the socket was sent to
// one of its endpoints.
static __always_inline int reverse4(struct bpf_sock_addr *ctx)
{
	struct reverse_key key = {};
	struct endpoint *service;

	key.cookie = bpf_get_socket_cookie(ctx);
	key.endpoint.addr[0] = ctx->user_ip4;
	key.endpoint.port = (__u16)ctx->user_port;
	key.endpoint.family = FAMILY_V4;
	service = bpf_map_lookup_elem(&kpng_reverse, &key);
	if (service) {
		ctx->user_ip4 = service->addr[0];
		ctx->user_port = (__u32)service->port;
	}
	return 1;
}

static __always_inline int reverse6(struct bpf_sock_addr *ctx)
{
	struct reverse_key key = {};
	struct endpoint *service;

	key.cookie = bpf_get_socket_cookie(ctx);
	key.endpoint.addr[0] = ctx->user_ip6[0];
	key.endpoint.addr[1] = ctx->user_ip6[1];
	key.endpoint.addr[2] = ctx->user_ip6[2];
	key.endpoint.addr[3] = ctx->user_ip6[3];
	key.endpoint.port = (__u16)ctx->user_port;
	key.endpoint.family = FAMILY_V6;
	service = bpf_map_lookup_elem(&kpng_reverse, &key);
	if (service) {
		ctx->user_ip6[0] = service->addr[0];
		ctx->user_ip6[1] = service->addr[1];
		ctx->user_ip6[2] = service->addr[2];
		ctx->user_ip6[3] = service->addr[3];
		ctx->user_port = (__u32)service->port;
	}
	return 1;
}

SEC("cgroup/connect4")
int kpng_connect4(struct bpf_sock_addr *ctx)
{
	return forward4(ctx, 0);
}

SEC("cgroup/connect6")
int kpng_connect6(struct bpf_sock_addr *ctx)
{
	return forward6(ctx, 0);
}

SEC("cgroup/sendmsg4")
int kpng_sendmsg4(struct bpf_sock_addr *ctx)
{
	return forward4(ctx, 1);
}

SEC("cgroup/sendmsg6")
int kpng_sendmsg6(struct bpf_sock_addr *ctx)
{
	return forward6(ctx, 1);
}

SEC("cgroup/recvmsg4")
int kpng_recvmsg4(struct bpf_sock_addr *ctx)
{
	return reverse4(ctx);
}

SEC("cgroup/recvmsg6")
int kpng_recvmsg6(struct bpf_sock_addr *ctx)
{
	return reverse6(ctx);
}

SEC("cgroup/getpeername4")
int kpng_getpeername4(struct bpf_sock_addr *ctx)
{
	return reverse4(ctx);
}

SEC("cgroup/getpeername6")
int kpng_getpeername6(struct bpf_sock_addr *ctx)
{
	return reverse6(ctx);
}
