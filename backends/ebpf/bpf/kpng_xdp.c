// SPDX-License-Identifier: Apache-2.0
//
// XDP on the interfaces traffic from outside comes in by: the packets of
// flows the tc ingress program opened, translated as it would translate
// them and sent straight back out the interface they came in by, before
// the node's stack. Everything it does not take (a flow's first packet,
// a SYN, what has no flow, what needs an option inserted, a packet
// whose next hop is not known yet) goes on untouched to the tc programs,
// which decide as without XDP: one home for every decision. Part of
// kpng_sock.c's compilation unit.

#include "kpng_common.h"

// How each interface's program is attached (the loader writes it): its
// checksum arithmetic depends on it (docs/open-work.md).
#define XDP_GENERIC 1
#define XDP_NATIVE 2

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);   // ifindex
	__type(value, __u32); // XDP_GENERIC or XDP_NATIVE
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_xdp_modes SEC(".maps");

// A next hop older than this is not used: the packet goes through the
// stack (and tc egress learns it again).
#define NEXTHOP_FRESH_NS (5ULL * 1000000000ULL)

// The folded (not complemented) one's-complement sum of the
// pseudo-header of `p` (of L4 length `len`): what the L4 checksum field
// of a packet whose checksum is left to be finished holds.
static __always_inline __u16 pseudo_sum(struct packet *p, __u32 len)
{
	__u32 words[2];
	__s64 sum;

	if (p->family == FAMILY_V4) {
		words[0] = bpf_htonl((__u32)p->proto << 16 | (len & 0xffff));
		sum = bpf_csum_diff(0, 0, p->saddr, 4, 0);
		sum = bpf_csum_diff(0, 0, p->daddr, 4, (__u32)sum);
		sum = bpf_csum_diff(0, 0, words, 4, (__u32)sum);
	} else {
		words[0] = bpf_htonl(len);
		words[1] = bpf_htonl(p->proto);
		sum = bpf_csum_diff(0, 0, p->saddr, 16, 0);
		sum = bpf_csum_diff(0, 0, p->daddr, 16, (__u32)sum);
		sum = bpf_csum_diff(0, 0, words, 8, (__u32)sum);
	}
	return ~csum_fold_(sum);
}

// A translation to write: the new addresses and ports (as the packet
// holds them).
struct xlat {
	__u32 saddr[4];
	__u32 daddr[4];
	__u16 sport;
	__u16 dport;
};

// Writes `x` into packet `p` of `ctx`, with its checksums: the IPv4
// header's always in full; the L4 one in full (RFC 1624), or, when it
// holds only the pseudo-header's sum (`partial`), that sum updated for
// the addresses alone. 0 when the packet cannot be written.
static __noinline int xdp_write(struct xdp_md *ctx, struct packet *p, struct xlat *x,
				int partial)
{
	__u32 alen = p->family == FAMILY_V4 ? 4 : 16;
	__u32 ports_old = (__u32)p->sport | (__u32)p->dport << 16;
	__u32 ports_new = (__u32)x->sport | (__u32)x->dport << 16;
	__u16 check;
	__s64 sum;

	if (p->family == FAMILY_V4) {
		if (bpf_xdp_load_bytes(ctx, p->ip_csum_off, &check, 2))
			return 0;
		sum = bpf_csum_diff(p->saddr, 4, x->saddr, 4, (__u16)~check);
		sum = bpf_csum_diff(p->daddr, 4, x->daddr, 4, (__u32)sum);
		check = csum_fold_(sum);
		if (bpf_xdp_store_bytes(ctx, p->ip_csum_off, &check, 2))
			return 0;
	}
	if (bpf_xdp_load_bytes(ctx, p->csum_off, &check, 2))
		return 0;
	// (a UDP datagram over IPv4 without a checksum keeps none)
	if (!(p->proto == IPPROTO_UDP && p->family == FAMILY_V4 && check == 0)) {
		if (partial) {
			sum = bpf_csum_diff(p->saddr, alen, x->saddr, alen, check);
			sum = bpf_csum_diff(p->daddr, alen, x->daddr, alen, (__u32)sum);
			check = ~csum_fold_(sum);
		} else {
			sum = bpf_csum_diff(p->saddr, alen, x->saddr, alen, (__u16)~check);
			sum = bpf_csum_diff(p->daddr, alen, x->daddr, alen, (__u32)sum);
			sum = bpf_csum_diff(&ports_old, 4, &ports_new, 4, (__u32)sum);
			check = csum_fold_(sum);
			if (p->proto == IPPROTO_UDP && check == 0)
				check = 0xffff;
		}
		if (bpf_xdp_store_bytes(ctx, p->csum_off, &check, 2))
			return 0;
	}
	return !bpf_xdp_store_bytes(ctx, p->saddr_off, x->saddr, alen) &&
	       !bpf_xdp_store_bytes(ctx, p->daddr_off, x->daddr, alen) &&
	       !bpf_xdp_store_bytes(ctx, p->l4_off, &x->sport, 2) &&
	       !bpf_xdp_store_bytes(ctx, p->l4_off + 2, &x->dport, 2);
}

// Whether the L4 checksum of `p` holds only its pseudo-header's sum, and
// whether this interface's mode can translate it (generic: yes).
// Returns -1: leave it to tc; 0: a full checksum; 1: a partial one.
static __always_inline int partial_of(struct xdp_md *ctx, struct packet *p)
{
	__u32 *mode, ifindex = ctx->ingress_ifindex;
	__u16 check, len;

	if (bpf_xdp_load_bytes(ctx, p->csum_off, &check, 2))
		return -1;
	if (p->family == FAMILY_V4) {
		if (bpf_xdp_load_bytes(ctx, ETH_HLEN + 2, &len, 2))
			return -1;
		len = bpf_ntohs(len) - (p->l4_off - ETH_HLEN);
	} else {
		if (bpf_xdp_load_bytes(ctx, ETH_HLEN + 4, &len, 2))
			return -1;
		len = bpf_ntohs(len);
	}
	if (check != pseudo_sum(p, len))
		return 0;
	// Partial: generic XDP keeps the state, native loses it at XDP_TX
	// (the full checksum would have to be computed here).
	mode = bpf_map_lookup_elem(&kpng_xdp_modes, &ifindex);
	return mode && *mode == XDP_GENERIC ? 1 : -1;
}

// The next hop towards `addr` out of this interface, when fresh.
static __always_inline struct nexthop *hop_to(struct xdp_md *ctx, __u32 *addr,
					      __u8 family, __u64 now)
{
	struct nexthop_key key = {};
	struct nexthop *hop;

	__builtin_memcpy(key.addr, addr, 16);
	key.ifindex = ctx->ingress_ifindex;
	key.family = family;
	hop = bpf_map_lookup_elem(&kpng_nexthop, &key);
	if (!hop || now - hop->last_ns > NEXTHOP_FRESH_NS)
		return 0;
	return hop;
}

// Sends the translated packet back out: its Ethernet addresses those of
// `hop`.
static __always_inline int send_to(struct xdp_md *ctx, struct nexthop *hop)
{
	if (bpf_xdp_store_bytes(ctx, 0, hop->dst, 6) || bpf_xdp_store_bytes(ctx, 6, hop->src, 6))
		return XDP_PASS;
	count(COUNT_XDP);
	return XDP_TX;
}

// A reply of a masqueraded flow (its endpoint to the node's address and
// port): to its client, from its frontend, when the way to the client is
// known.
static __noinline int xdp_reply(struct xdp_md *ctx, struct packet *p, __u64 now)
{
	struct snat_value *v = masqueraded_reply(p);
	struct nexthop *hop;
	struct xlat x = {};
	int partial;

	if (!v)
		return -1;
	hop = hop_to(ctx, v->client, p->family, now);
	if (!hop)
		return XDP_PASS;
	partial = partial_of(ctx, p);
	if (partial < 0)
		return XDP_PASS;
	__builtin_memcpy(x.saddr, v->frontend.addr, 16);
	x.sport = v->frontend.port;
	__builtin_memcpy(x.daddr, v->client, 16);
	x.dport = v->client_port;
	snat_seen(v, p, now);
	if (!xdp_write(ctx, p, &x, partial))
		return XDP_PASS;
	return send_to(ctx, hop);
}

// A packet from outside of a flow the tc programs opened: translated as
// they would, sent back out to the endpoint's next hop (a local
// endpoint: passed up, marked for tc).
static __noinline int xdp_request(struct xdp_md *ctx, struct packet *p, __u64 now)
{
	struct frontend fe = {};
	struct service *svc;
	struct conn_key ckey = {};
	struct conn_value *flow;
	struct endpoint *node;
	struct nexthop *hop = 0;
	struct xlat x = {};
	__u32 index = p->family == FAMILY_V4 ? 0 : 1;
	int partial, local;

	__builtin_memcpy(fe.addr, p->daddr, 16);
	fe.port = p->dport;
	fe.proto = p->proto;
	fe.family = p->family;
	svc = bpf_map_lookup_elem(&kpng_external, &fe);
	if (!svc)
		return XDP_PASS;
	if (!in_ranges(p, &fe, svc)) {
		count(COUNT_DROPPED);
		return XDP_DROP;
	}
	if (p->syn)
		return XDP_PASS; // a new flow: tc decides
	__builtin_memcpy(ckey.client, p->saddr, 16);
	ckey.client_port = p->sport;
	ckey.proto = p->proto;
	ckey.family = p->family;
	ckey.frontend = fe;
	flow = bpf_map_lookup_elem(&kpng_ext_flows, &ckey);
	if (!flow || !flow_holds(flow, svc, p, now))
		return XDP_PASS;
	// A datagram returned directly carries an option: tc inserts it.
	if (flow->dsr && p->proto == IPPROTO_UDP)
		return XDP_PASS;
	local = flow->endpoint.flags & ENDPOINT_LOCAL;
	// Masqueraded to a local endpoint: the source would be the node's
	// own address, which its stack takes for a spoof.
	if (local && flow->snat_port)
		return XDP_PASS;
	if (!local) {
		hop = hop_to(ctx, flow->endpoint.addr, p->family, now);
		if (!hop)
			return XDP_PASS;
	}
	partial = partial_of(ctx, p);
	if (partial < 0)
		return XDP_PASS;
	__builtin_memcpy(x.saddr, p->saddr, 16);
	x.sport = p->sport;
	if (flow->snat_port) {
		node = bpf_map_lookup_elem(&kpng_node, &index);
		if (!node)
			return XDP_PASS;
		__builtin_memcpy(x.saddr, node->addr, 16);
		x.sport = flow->snat_port;
		if (!masquerade(p, &fe, &flow->endpoint, &flow->snat_port, now))
			return XDP_PASS;
	}
	__builtin_memcpy(x.daddr, flow->endpoint.addr, 16);
	x.dport = flow->endpoint.port;
	flow->last_ns = now;
	if (!xdp_write(ctx, p, &x, partial))
		return XDP_PASS;
	if (hop)
		return send_to(ctx, hop);
	count(COUNT_XDP);
	return XDP_PASS;
}

SEC("xdp")
int kpng_xdp(struct xdp_md *ctx)
{
	struct packet p = {};
	__u64 now;
	int verdict;

	if (!parse_any(ctx, 1, &p) || p.proto == IPPROTO_SCTP)
		return XDP_PASS;
	now = bpf_ktime_get_ns();
	verdict = xdp_reply(ctx, &p, now);
	if (verdict >= 0)
		return verdict;
	return xdp_request(ctx, &p, now);
}
