// SPDX-License-Identifier: Apache-2.0
//
// North-south: tc programs on the node's interfaces. Part of
// kpng_sock.c's compilation unit.

#include "kpng_common.h"

// ---------------------------------------------------------------------
// North-south: tc programs on the node's interfaces, for packets from
// outside the node to NodePorts (on the node's addresses), external IPs
// and LB IPs. At ingress the destination is rewritten to an endpoint;
// at egress the endpoint's replies get the Service address back. Under
// `externalTrafficPolicy: Local` the endpoint is a local one and the
// client address is kept; under `Cluster`, a flow to another node's
// endpoint is also masqueraded: egress writes the node's address and a
// port of its own as its source, and ingress gives a reply its client
// back; or, with EXT_DSR, the flow keeps its client's address and
// carries the Service's address and port to the endpoint's node in an IP
// option (direct server return, below), whose programs restore them. A
// ClusterIP reached from outside is served alike (masqueraded as
// kube-proxy's rules do); what has no endpoint is refused with an ICMP
// port unreachable built here, an unallocated Service address dropped.
// Everything else goes on to the node's stack. (These maps are loaded
// with one entry when no interface is given: src/datapath.rs.)

// (flags of an external record)
#define EXT_RANGES 4 // loadBalancerSourceRanges: other sources are dropped
#define EXT_SNAT 8   // externalTrafficPolicy: Cluster: masquerade to a
		     // remote endpoint
#define EXT_SNAT_ALL 64	    // a ClusterIP from outside: masquerade to every
			    // endpoint, local ones too
#define EXT_POD_SOURCES 128 // ... but not a source in kpng_ranges (the pod
			    // networks, --cluster-cidr)
#define EXT_DSR 8192	    // externalTrafficPolicy: Cluster, returned
			    // directly from a remote endpoint

// Frontend -> record (set: the endpoints, local ones for Local; flags:
// EMPTY_*, EXT_RANGES, EXT_SNAT; affinity).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 17);
	__type(key, struct frontend);
	__type(value, struct service);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_external SEC(".maps");

// (frontend, source prefix) -> allowed: an LPM trie whose keys are the
// frontend's 20 bytes, then a source address; the prefix length counts
// the frontend's 160 bits.
struct range_key {
	__u32 prefixlen;
	struct frontend frontend;
	__u32 addr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 14);
	__type(key, struct range_key);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_ranges SEC(".maps");

// A client (address and port) of a frontend.
struct conn_key {
	__u32 client[4];
	__u16 client_port;
	__u8 proto;
	__u8 family;
	struct frontend frontend;
};

// Its endpoint, the source port it was masqueraded to (0: not), whether
// it is returned directly, where the endpoint was found (set and slot; a
// slot past the set's: not from a slot), a TCP flow's first SYN's
// sequence number, and when it last sent.
struct conn_value {
	struct endpoint endpoint;
	__u16 snat_port;
	__u16 dsr;
	__u32 set;
	__u32 index;
	__u32 isn;
	__u32 pad2;
	__u64 last_ns;
};

#define NO_SLOT 0xffffffff

// The flows: every packet of a client's flow goes to the endpoint its
// first went to (as a conntrack entry keeps it).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct conn_key);
	__type(value, struct conn_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_ext_flows SEC(".maps");

// A reply's key: the client and the endpoint it was sent to.
struct reply_key {
	__u32 client[4];
	__u16 client_port;
	__u8 proto;
	__u8 family;
	struct endpoint endpoint;
};

// The reverse: (client, endpoint) -> the frontend, for the replies.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct reply_key);
	__type(value, struct frontend);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_ext_replies SEC(".maps");

// Masqueraded flows, by the reply's view: (endpoint, node address and
// the port given to the client) -> the client and the frontend.
struct snat_key {
	struct endpoint endpoint;
	__u32 node[4];
	__u16 port;
	__u8 proto;
	__u8 pad;
};

struct snat_value {
	__u32 client[4];
	__u16 client_port;
	__u16 closing; // a TCP FIN or RST was seen, either way
	struct frontend frontend;
	__u32 pad;
	__u64 last_ns; // its last packet, either way
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct snat_key);
	__type(value, struct snat_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_snat SEC(".maps");

// The same flows as they leave towards the endpoint: (client, endpoint)
// -> the node address and port they leave from.
struct snat_out_key {
	__u32 client[4];
	__u16 client_port;
	__u8 proto;
	__u8 pad;
	struct endpoint endpoint;
};

struct snat_out_value {
	__u32 node[4];
	__u16 port;
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct snat_out_key);
	__type(value, struct snat_out_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_snat_out SEC(".maps");

// The node's addresses to masquerade to: [0] IPv4, [1] IPv6 (an all-zero
// address: none).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct endpoint);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_node SEC(".maps");

// Masquerade ports: outside Linux's default ephemeral range (32768-60999),
// so they do not meet the node's own connections.
#define SNAT_PORT_MIN 61000
#define SNAT_PORTS 4536
#define SNAT_TRIES 32

// When a masquerade port of (endpoint, node address) is free again: its
// flow idle this long (as conntrack forgets a flow, with kube-proxy's
// settings): UDP 30 s; TCP after a FIN or RST 60 s (the endpoint's
// TIME_WAIT), else, as SCTP, 24 h (kube-proxy's established timeout).
#define SNAT_IDLE_UDP_NS (30ULL * 1000000000ULL)
#define SNAT_IDLE_CLOSED_NS (60ULL * 1000000000ULL)
#define SNAT_IDLE_OPEN_NS (86400ULL * 1000000000ULL)

// ClientIP affinity of external clients: (client address, set).
struct ext_affinity_key {
	__u32 client[4];
	__u32 set;
	__u32 family;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 14);
	__type(key, struct ext_affinity_key);
	__type(value, struct affinity_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_ext_affinity SEC(".maps");

#define ETH_P_IPV4 0x0800
#define ETH_P_IPV6_ 0x86DD
#define IP_MF 0x2000
#define IP_OFFSET 0x1FFF
#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_RST 0x04
#define TCP_FLAG_ACK 0x10
#define SCTP_CHUNK_INIT 1

// A parsed packet: where its addresses, ports and checksums are.
struct packet {
	__u32 saddr[4];
	__u32 daddr[4];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 family;
	__u8 syn; // a TCP SYN without ACK: a new connection
	__u8 fin; // a TCP FIN or RST
	__u32 seq; // a SYN's sequence number (as it came)
	__u32 saddr_off;
	__u32 daddr_off;
	__u32 l4_off;
	__u32 csum_off;	   // the L4 checksum
	__u32 ip_csum_off; // IPv4 only, else 0
};

// Loads `len` bytes at `off` of the packet `ctx`: an skb (tc) or, with
// `xdp`, an xdp_md. (`xdp` is a constant at each call: the other helper
// is compiled out.)
static __always_inline long load_at(void *ctx, int xdp, __u32 off, void *to, __u32 len)
{
	if (xdp)
		return bpf_xdp_load_bytes(ctx, off, to, len);
	return bpf_skb_load_bytes(ctx, off, to, len);
}

// Parses packet `ctx` (an skb, or with `xdp` an xdp_md) into `p`.
static __always_inline int parse_any(void *ctx, int xdp, struct packet *p)
{
	__u16 eth_proto;
	__u8 byte;

	// An Ethernet header (the EtherType where the stack read it):
	// interfaces without one are not parsed.
	if (load_at(ctx, xdp, 12, &eth_proto, 2))
		return 0;
	if (!xdp && (__u32)eth_proto != ((struct __sk_buff *)ctx)->protocol)
		return 0;
	if (eth_proto == bpf_htons(ETH_P_IPV4)) {
		__u16 frag;

		if (load_at(ctx, xdp, ETH_HLEN, &byte, 1))
			return 0;
		if ((byte >> 4) != 4)
			return 0;
		p->l4_off = ETH_HLEN + (byte & 0xf) * 4;
		if (load_at(ctx, xdp, ETH_HLEN + 6, &frag, 2))
			return 0;
		if (frag & bpf_htons(IP_MF | IP_OFFSET))
			return 0; // fragments go on to the stack
		if (load_at(ctx, xdp, ETH_HLEN + 9, &p->proto, 1))
			return 0;
		p->family = FAMILY_V4;
		p->saddr_off = ETH_HLEN + 12;
		p->daddr_off = ETH_HLEN + 16;
		p->ip_csum_off = ETH_HLEN + 10;
		if (load_at(ctx, xdp, p->saddr_off, &p->saddr[0], 4) ||
		    load_at(ctx, xdp, p->daddr_off, &p->daddr[0], 4))
			return 0;
	} else if (eth_proto == bpf_htons(ETH_P_IPV6_)) {
		if (load_at(ctx, xdp, ETH_HLEN + 6, &p->proto, 1))
			return 0;
		p->family = FAMILY_V6;
		p->l4_off = ETH_HLEN + 40; // extension headers go on to the stack
		p->saddr_off = ETH_HLEN + 8;
		p->daddr_off = ETH_HLEN + 24;
		p->ip_csum_off = 0;
		if (load_at(ctx, xdp, p->saddr_off, p->saddr, 16) ||
		    load_at(ctx, xdp, p->daddr_off, p->daddr, 16))
			return 0;
	} else {
		return 0;
	}
	if (p->proto == IPPROTO_TCP) {
		p->csum_off = p->l4_off + 16;
		if (load_at(ctx, xdp, p->l4_off + 13, &byte, 1))
			return 0;
		p->syn = (byte & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN;
		p->fin = (byte & (TCP_FLAG_FIN | TCP_FLAG_RST)) != 0;
		if (p->syn && load_at(ctx, xdp, p->l4_off + 4, &p->seq, 4))
			return 0;
	} else if (p->proto == IPPROTO_UDP) {
		p->csum_off = p->l4_off + 6;
	} else if (p->proto == IPPROTO_SCTP) {
		// The CRC32c; an INIT chunk first: a new association.
		p->csum_off = p->l4_off + 8;
		if (load_at(ctx, xdp, p->l4_off + 12, &byte, 1))
			return 0;
		p->syn = byte == SCTP_CHUNK_INIT;
		// The initiate tag: new for each association, as a SYN's
		// sequence number.
		if (p->syn && load_at(ctx, xdp, p->l4_off + 16, &p->seq, 4))
			return 0;
	} else {
		return 0;
	}
	if (load_at(ctx, xdp, p->l4_off, &p->sport, 2) ||
	    load_at(ctx, xdp, p->l4_off + 2, &p->dport, 2))
		return 0;
	return 1;
}

static __always_inline int parse(struct __sk_buff *skb, struct packet *p)
{
	return parse_any(skb, 0, p);
}

// Rewrites the address at `off` (and the checksums over it).
static __always_inline int rewrite_addr(struct __sk_buff *skb, struct packet *p,
					__u32 off, __u32 *old, __u32 *new)
{
	__u64 l4_flags = BPF_F_PSEUDO_HDR;

	if (p->proto == IPPROTO_UDP)
		l4_flags |= BPF_F_MARK_MANGLED_0;
	if (p->family == FAMILY_V4) {
		// (SCTP's CRC32c covers no address: nothing to update)
		if (p->proto != IPPROTO_SCTP &&
		    bpf_l4_csum_replace(skb, p->csum_off, old[0], new[0], l4_flags | 4))
			return 0;
		if (bpf_l3_csum_replace(skb, p->ip_csum_off, old[0], new[0], 4))
			return 0;
		return !bpf_skb_store_bytes(skb, off, new, 4, 0);
	}
	__s64 diff = bpf_csum_diff(old, 16, new, 16, 0);

	if (p->proto != IPPROTO_SCTP &&
	    bpf_l4_csum_replace(skb, p->csum_off, 0, diff, l4_flags))
		return 0;
	return !bpf_skb_store_bytes(skb, off, new, 16, 0);
}

// SCTP's CRC32c (the Castagnoli polynomial, bit-reflected).
#define CRC32C_POLY 0x82F63B78

// a * b mod P, in the CRC's reflected representation (bit 31: x^0).
static __always_inline __u32 crc_mul(__u32 a, __u32 b)
{
	__u32 p = 0;
	int i;

#pragma clang loop unroll(disable)
	for (i = 0; i < 32; i++) {
		p ^= b & -((a >> (31 - i)) & 1);
		b = (b >> 1) ^ (CRC32C_POLY & -(b & 1));
	}
	return p;
}

// r times x^(8*2^i) mod P (`power`), when bit i of m is set.
#define ZEROS(i, power)                                                        \
	if (m & (1U << (i)))                                                   \
	r = crc_mul(r, (power))

// A port of an SCTP packet rewritten, and its CRC32c updated without
// reading the packet: the CRC is linear, so the new one is the old one
// xor the CRC (no initial value, no final xor) of the change alone: the
// two bytes that changed, then as many zero bytes as follow them (a
// multiplication by x^(8m) mod P). `ports`: the old port,
// and the new one in the upper half (as the packet holds them). A global
// function, so that the verifier walks its loops once, not at each call.
__attribute__((noinline)) int kpng_sctp_port(struct __sk_buff *skb, __u32 family,
					     __u32 l4_off, __u32 off, __u32 ports)
{
	__u32 crc, r;
	__u32 len, m;
	__u16 field, new = ports >> 16;
	int i;

	if (l4_off > 255 || off < l4_off || off > l4_off + 2)
		return 0;
	if (family == FAMILY_V4) {
		if (bpf_skb_load_bytes(skb, ETH_HLEN + 2, &field, 2))
			return 0;
		len = bpf_ntohs(field) - (l4_off - ETH_HLEN);
	} else {
		if (bpf_skb_load_bytes(skb, ETH_HLEN + 4, &field, 2))
			return 0;
		len = bpf_ntohs(field);
	}
	if (len > 0xffff || len < off - l4_off + 2 ||
	    bpf_skb_load_bytes(skb, l4_off + 8, &crc, 4))
		return 0;
	// The change's two bytes (in packet order: the low byte of a
	// little-endian load first) into a zero register.
	r = (__u16)(ports ^ new);
#pragma clang loop unroll(disable)
	for (i = 0; i < 16; i++)
		r = (r >> 1) ^ (CRC32C_POLY & -(r & 1));
	m = len - (off - l4_off) - 2;
	// x^(8m) by the bits of m: x^(8*2^i) mod P precomputed (x^8 squared
	// i times), so that the verifier walks 16 multiplications, not 32.
	ZEROS(0, 0x00800000);
	ZEROS(1, 0x00008000);
	ZEROS(2, 0x82F63B78);
	ZEROS(3, 0x6EA2D55C);
	ZEROS(4, 0x18B8EA18);
	ZEROS(5, 0x510AC59A);
	ZEROS(6, 0xB82BE955);
	ZEROS(7, 0xB8FDB1E7);
	ZEROS(8, 0x88E56F72);
	ZEROS(9, 0x74C360A4);
	ZEROS(10, 0xE4172B16);
	ZEROS(11, 0x0D65762A);
	ZEROS(12, 0x35D73A62);
	ZEROS(13, 0x28461564);
	ZEROS(14, 0xBF455269);
	ZEROS(15, 0xE2EA32DC);
	crc ^= r;
	if (bpf_skb_store_bytes(skb, l4_off + 8, &crc, 4, 0))
		return 0;
	return !bpf_skb_store_bytes(skb, off, &new, 2, 0);
}

static __always_inline int rewrite_port(struct __sk_buff *skb, struct packet *p,
					__u32 off, __u16 old, __u16 new)
{
	__u64 l4_flags = 2;

	if (p->proto == IPPROTO_SCTP)
		return kpng_sctp_port(skb, p->family, p->l4_off, off,
				      old | (__u32)new << 16);

	if (p->proto == IPPROTO_UDP)
		l4_flags |= BPF_F_MARK_MANGLED_0;
	if (bpf_l4_csum_replace(skb, p->csum_off, old, new, l4_flags))
		return 0;
	return !bpf_skb_store_bytes(skb, off, &new, 2, 0);
}

// The masquerade entry of the flow whose reply `p` is (from its endpoint
// to the node's address and the flow's masquerade port), or 0.
static __always_inline struct snat_value *masqueraded_reply(struct packet *p)
{
	struct snat_key key = {};

	__builtin_memcpy(key.endpoint.addr, p->saddr, 16);
	key.endpoint.port = p->sport;
	key.endpoint.family = p->family;
	__builtin_memcpy(key.node, p->daddr, 16);
	key.port = p->dport;
	key.proto = p->proto;
	return bpf_map_lookup_elem(&kpng_snat, &key);
}

// Packet `p` of masqueraded flow `v`, either way, at `now`: the flow is
// alive, and closing once a FIN or RST is seen.
static __always_inline void snat_seen(struct snat_value *v, struct packet *p, __u64 now)
{
	v->last_ns = now;
	if (p->fin)
		v->closing = 1;
}

// A reply of a masqueraded flow, arriving for the node's address and
// port: to the client's address and port (the egress program then gives
// it the frontend's source, as any reply of a translated flow). The
// node's stack forwards it, and its conntrack sees the reply of the flow
// it saw going out (client to endpoint).
static __always_inline int unmasquerade(struct __sk_buff *skb, struct packet *p)
{
	struct snat_value *v = masqueraded_reply(p);
	__u32 dst[4];

	if (!v)
		return -1;
	snat_seen(v, p, bpf_ktime_get_ns());
	__builtin_memcpy(dst, v->client, 16);
	if (!rewrite_addr(skb, p, p->daddr_off, p->daddr, dst))
		return TC_ACT_SHOT;
	if (v->client_port != p->dport &&
	    !rewrite_port(skb, p, p->l4_off + 2, p->dport, v->client_port))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

// Whether masquerade entry `v` (of protocol `proto`) is free for a new
// flow at `now`: its own flow idle past its timeout.
static __always_inline int snat_free(struct snat_value *v, __u8 proto, __u64 now)
{
	__u64 idle = now - v->last_ns;

	if (proto == IPPROTO_UDP)
		return idle > SNAT_IDLE_UDP_NS;
	return idle > (v->closing ? SNAT_IDLE_CLOSED_NS : SNAT_IDLE_OPEN_NS);
}

// Plans the masquerade of a flow of `p` to remote endpoint `ep`: the
// node's address and a port of its own (`*port`, 0: choose one: one
// unused, or whose flow is over), which the egress program writes as the
// source when the flow leaves; or, for a packet of a flow masqueraded
// already, refreshes its entries (a FIN or RST marks it closing; 0 when
// its port went to another flow). Its own function: its records stay off
// ingress's stack.
static __noinline int masquerade(struct packet *p, struct frontend *fe,
				 struct endpoint *ep, __u16 *port, __u64 now)
{
	// The two maps' records in turn, in one place (the stack is short).
	union {
		struct {
			struct snat_key key;
			struct snat_value value;
		} in;
		struct {
			struct snat_out_key key;
			struct snat_out_value value;
		} out;
	} r;
	struct snat_value *old;
	struct endpoint *node;
	__u32 index = p->family == FAMILY_V4 ? 0 : 1;
	__u16 chosen;
	int i;

	node = bpf_map_lookup_elem(&kpng_node, &index);
	if (!node || !(node->addr[0] | node->addr[1] | node->addr[2] | node->addr[3]))
		return 0;
	__builtin_memset(&r, 0, sizeof(r));
	r.in.key.endpoint = *ep;
	r.in.key.endpoint.flags = 0;
	__builtin_memcpy(r.in.key.node, node->addr, 16);
	r.in.key.proto = p->proto;
	if (*port) {
		r.in.key.port = *port;
		old = bpf_map_lookup_elem(&kpng_snat, &r.in.key);
		if (old) {
			// Another client's now: this flow was over (idle past
			// its timeout) and its port given to another.
			if (old->client_port != p->sport ||
			    old->client[0] != p->saddr[0] || old->client[1] != p->saddr[1] ||
			    old->client[2] != p->saddr[2] || old->client[3] != p->saddr[3])
				return 0;
			snat_seen(old, p, now);
			goto out; // its egress entry written again (below)
		}
		// (evicted: written again)
	} else {
		// A free port: the first of SNAT_TRIES from one at random.
		__u32 start = bpf_get_prandom_u32();

		for (i = 0; i < SNAT_TRIES; i++) {
			r.in.key.port = bpf_htons(SNAT_PORT_MIN + (start + i) % SNAT_PORTS);
			old = bpf_map_lookup_elem(&kpng_snat, &r.in.key);
			if (!old || snat_free(old, p->proto, now))
				break;
		}
		if (i == SNAT_TRIES)
			return 0;
		*port = r.in.key.port;
	}
	__builtin_memcpy(r.in.value.client, p->saddr, 16);
	r.in.value.client_port = p->sport;
	r.in.value.closing = p->fin;
	r.in.value.frontend = *fe;
	r.in.value.last_ns = now;
	bpf_map_update_elem(&kpng_snat, &r.in.key, &r.in.value, BPF_ANY);
out:
	// The egress entry, at every packet: a flow of the same client
	// address and port to the same endpoint that is not masqueraded (see
	// forget_masquerade) may have dropped it since.
	chosen = *port;
	__builtin_memset(&r, 0, sizeof(r));
	__builtin_memcpy(r.out.key.client, p->saddr, 16);
	r.out.key.client_port = p->sport;
	r.out.key.proto = p->proto;
	r.out.key.endpoint = *ep;
	r.out.key.endpoint.flags = 0;
	__builtin_memcpy(r.out.value.node, node->addr, 16);
	r.out.value.port = chosen;
	bpf_map_update_elem(&kpng_snat_out, &r.out.key, &r.out.value, BPF_ANY);
	return 1;
}

// A packet of a flow of `p` to endpoint `ep` that is not masqueraded
// (returned directly, or to a local endpoint): a masqueraded flow of the
// same client address and port to the same endpoint (through another
// frontend: a client may use one port towards two destinations) leaves a
// kpng_snat_out entry that the egress program, which sees only (client,
// endpoint), would apply to this packet. It is dropped; the masqueraded
// flow's next packet writes it again. A forwarded packet goes from
// ingress to egress within one softirq on one CPU, so each gets its own
// flow's (two such flows' packets at the same moment on two CPUs can
// still meet).
static __noinline void forget_masquerade(struct packet *p, struct endpoint *ep)
{
	struct snat_out_key key = {};

	__builtin_memcpy(key.client, p->saddr, 16);
	key.client_port = p->sport;
	key.proto = p->proto;
	key.endpoint = *ep;
	key.endpoint.flags = 0;
	if (bpf_map_lookup_elem(&kpng_snat_out, &key))
		bpf_map_delete_elem(&kpng_snat_out, &key);
}

// A masqueraded flow leaving towards its endpoint: the node's address and
// port as its source.
static __always_inline int snat_out(struct __sk_buff *skb, struct packet *p)
{
	struct snat_out_key key = {};
	struct snat_out_value *v;
	__u32 src[4];

	__builtin_memcpy(key.client, p->saddr, 16);
	key.client_port = p->sport;
	key.proto = p->proto;
	__builtin_memcpy(key.endpoint.addr, p->daddr, 16);
	key.endpoint.port = p->dport;
	key.endpoint.family = p->family;
	v = bpf_map_lookup_elem(&kpng_snat_out, &key);
	if (!v)
		return -1;
	__builtin_memcpy(src, v->node, 16);
	if (!rewrite_addr(skb, p, p->saddr_off, p->saddr, src))
		return TC_ACT_SHOT;
	if (v->port != p->sport && !rewrite_port(skb, p, p->l4_off, p->sport, v->port))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

// Whether a new flow of `p` to `fe` (record `svc`) to endpoint `ep` is
// masqueraded: under externalTrafficPolicy Cluster towards other nodes'
// endpoints; to a ClusterIP from outside towards every endpoint, unless
// the source is a pod (as kube-proxy's rules do).
static __always_inline int snat_wanted(struct packet *p, struct frontend *fe,
				       struct service *svc, struct endpoint *ep)
{
	if (svc->flags & EXT_SNAT_ALL) {
		struct range_key range = {};

		if (!(svc->flags & EXT_POD_SOURCES))
			return 1;
		range.prefixlen = 160 + (p->family == FAMILY_V4 ? 32 : 128);
		range.frontend = *fe;
		__builtin_memcpy(range.addr, p->saddr, 16);
		return !bpf_map_lookup_elem(&kpng_ranges, &range);
	}
	// (a record returned directly masquerades a flow that cannot carry
	// the option: see dsr_wanted)
	return (svc->flags & (EXT_SNAT | EXT_DSR)) && !(ep->flags & ENDPOINT_LOCAL);
}

// Maglev: each set of a Service with `kpng.io/balancing: maglev` served
// from outside has a table of MAGLEV_SLOTS slots, each the index of an
// endpoint in the set's slots (kpng_model::maglev::table, written with the
// set). A flow's slot is lookup3 of its source address and port, as the
// nftables rule `jhash ip saddr . th sport mod 1021 seed 0x0` computes
// it, so that nftables and eBPF nodes pick alike.
#define MAGLEV_SLOTS 1021

struct maglev {
	__u16 index[MAGLEV_SLOTS + 1]; // the last: padding
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 10);
	__type(key, __u32); // the set
	__type(value, struct maglev);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_maglev SEC(".maps");

#define ROL32(x, k) (((x) << (k)) | ((x) >> (32 - (k))))

// lookup3's mix and final (Bob Jenkins, public domain), as the kernel's
// jhash.
#define JHASH_MIX(a, b, c)                                                     \
	{                                                                      \
		a -= c; a ^= ROL32(c, 4); c += b;                              \
		b -= a; b ^= ROL32(a, 6); a += c;                              \
		c -= b; c ^= ROL32(b, 8); b += a;                              \
		a -= c; a ^= ROL32(c, 16); c += b;                             \
		b -= a; b ^= ROL32(a, 19); a += c;                             \
		c -= b; c ^= ROL32(b, 4); b += a;                              \
	}
#define JHASH_FINAL(a, b, c)                                                   \
	{                                                                      \
		c ^= b; c -= ROL32(b, 14);                                     \
		a ^= c; a -= ROL32(c, 11);                                     \
		b ^= a; b -= ROL32(a, 25);                                     \
		c ^= b; c -= ROL32(b, 16);                                     \
		a ^= c; a -= ROL32(c, 4);                                      \
		b ^= a; b -= ROL32(a, 14);                                     \
		c ^= b; c -= ROL32(b, 24);                                     \
	}

// The flow's slot: lookup3 (seed 0) over the source address and a 4-byte
// word holding the source port's two bytes, scaled to the slots.
static __always_inline __u32 flow_slot(struct packet *p)
{
	__u32 port = p->sport; // its two bytes as they came, then zeros
	__u32 len = p->family == FAMILY_V4 ? 8 : 20;
	__u32 a, b, c;

	a = b = c = 0xdeadbeef + len;
	if (p->family == FAMILY_V4) {
		a += p->saddr[0];
		b += port;
	} else {
		a += p->saddr[0];
		b += p->saddr[1];
		c += p->saddr[2];
		JHASH_MIX(a, b, c);
		a += p->saddr[3];
		b += port;
	}
	JHASH_FINAL(a, b, c);
	return (__u32)(((__u64)c * MAGLEV_SLOTS) >> 32);
}

// The slot a new flow of `p` takes in `svc`'s set of `n`: the one its
// Maglev slot names; at random while the table is missing or names a
// slot past the set's count (a set being rewritten).
static __always_inline __u32 maglev_slot(struct packet *p, struct service *svc,
					 __u32 n)
{
	struct maglev *table = bpf_map_lookup_elem(&kpng_maglev, &svc->set);
	__u32 slot = flow_slot(p);
	__u32 i;

	if (table && slot < MAGLEV_SLOTS) {
		i = table->index[slot];
		if (i < n)
			return i;
	}
	return bpf_get_prandom_u32() % n;
}

// The local endpoint for a new flow of `p` to `svc`: its client's
// affinity, or one as its balancing says.
static __always_inline int pick_external(struct packet *p, struct service *svc,
					 struct endpoint *out, __u32 *slot, __u64 now)
{
	struct set_key key = {};
	struct page *first;
	struct endpoint *ep;
	struct ext_affinity_key akey = {};
	struct affinity_value *aff;
	__u32 n, i;

	key.set = svc->set;
	first = bpf_map_lookup_elem(&kpng_slots, &key);
	n = first ? first->count : 0;
	if (n == 0)
		return 0;
	if (svc->affinity) {
		__builtin_memcpy(akey.client, p->saddr, 16);
		akey.set = svc->set;
		akey.family = p->family;
		aff = bpf_map_lookup_elem(&kpng_ext_affinity, &akey);
		if (still_affine(aff, svc, now)) {
			*out = aff->endpoint;
			*slot = NO_SLOT;
			aff->last_ns = now;
			return 1;
		}
	}
	i = (svc->flags & BAL_MAGLEV) ? maglev_slot(p, svc, n)
				      : in_turn(svc, first, n);
	ep = slot_of(first, svc->set, i);
	if (!ep) {
		count(COUNT_MISSING);
		return 0;
	}
	*out = *ep;
	*slot = i;
	if (svc->affinity) {
		struct affinity_value value = {};

		value.endpoint = *out;
		value.last_ns = now;
		bpf_map_update_elem(&kpng_ext_affinity, &akey, &value, BPF_ANY);
	}
	return 1;
}

// ---------------------------------------------------------------------
// REJECT from outside, built here: the packet is turned into an ICMP (or
// ICMPv6) port unreachable quoting its start, from the address it was
// sent to, as netfilter's plain `reject` sends, and goes back out the
// interface it came in by (its Ethernet addresses swapped). It never
// reaches the node's stack or netfilter.
//
// A packet a local stack sent over a veth can arrive with its checksum
// still to be filled in (CHECKSUM_PARTIAL, which BPF cannot change): the
// peer it goes back to takes such a packet's checksums as good. Packets
// from a wire never are.

#define ICMP_DEST_UNREACH_ 3
#define ICMP_PORT_UNREACH_ 3
#define ICMPV6_DEST_UNREACH_ 1
#define ICMPV6_PORT_UNREACH_ 4
#define IPPROTO_ICMP_ 1
#define IPPROTO_ICMPV6_ 58

// The first bytes of the IPv4 header (up to its checksum), then ICMP's
// header: the addresses and the quote come from the packet itself, so
// that little is on the stack (the ingress program's is nearly full).
struct reject_ip4 {
	__u8 vihl;
	__u8 tos;
	__u16 len;
	__u16 id;
	__u16 frag;
	__u8 ttl;
	__u8 proto;
	__u16 check;
};

struct reject_icmp {
	__u8 type;
	__u8 code;
	__u16 check;
	__u32 unused;
};

struct reject_ip6 {
	__u32 vtc_flow;
	__u16 len;
	__u8 next;
	__u8 hops;
};

static __always_inline __u16 csum_fold_(__s64 sum)
{
	__u32 s = (__u32)sum;

	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

// The Ethernet addresses swapped: the packet goes back where it came from.
static __always_inline int swap_macs(struct __sk_buff *skb)
{
	__u8 macs[12];

	if (bpf_skb_load_bytes(skb, 0, macs, 12))
		return 0;
	return !bpf_skb_store_bytes(skb, 0, macs + 6, 6, 0) &&
	       !bpf_skb_store_bytes(skb, 6, macs, 6, 0);
}

#define QUOTE4 28 // the IPv4 header and 8 bytes after it
#define QUOTE6 48

static __noinline int reject4(struct __sk_buff *skb, struct packet *p)
{
	struct reject_ip4 ip = {};
	struct reject_icmp icmp = {};
	__u8 quote[QUOTE4];
	__s64 sum;

	if (p->l4_off != ETH_HLEN + 20) // IP options: not quoted here
		return TC_ACT_SHOT;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, quote, QUOTE4) || !swap_macs(skb))
		return TC_ACT_SHOT;
	icmp.type = ICMP_DEST_UNREACH_;
	icmp.code = ICMP_PORT_UNREACH_;
	sum = bpf_csum_diff(0, 0, (__u32 *)&icmp, sizeof(icmp), 0);
	icmp.check = csum_fold_(bpf_csum_diff(0, 0, (__u32 *)quote, QUOTE4, (__u32)sum));
	ip.vihl = 0x45;
	ip.len = bpf_htons(20 + sizeof(icmp) + QUOTE4);
	ip.ttl = 64;
	ip.proto = IPPROTO_ICMP_;
	sum = bpf_csum_diff(0, 0, (__u32 *)&ip, sizeof(ip), 0);
	sum = bpf_csum_diff(0, 0, p->saddr, 4, (__u32)sum);
	ip.check = csum_fold_(bpf_csum_diff(0, 0, p->daddr, 4, (__u32)sum));
	if (bpf_skb_change_tail(skb, ETH_HLEN + 20 + sizeof(icmp) + QUOTE4, 0))
		return TC_ACT_SHOT;
	if (bpf_skb_store_bytes(skb, ETH_HLEN, &ip, sizeof(ip), 0) ||
	    bpf_skb_store_bytes(skb, ETH_HLEN + 12, p->daddr, 4, 0) ||
	    bpf_skb_store_bytes(skb, ETH_HLEN + 16, p->saddr, 4, 0) ||
	    bpf_skb_store_bytes(skb, ETH_HLEN + 20, &icmp, sizeof(icmp), 0) ||
	    bpf_skb_store_bytes(skb, ETH_HLEN + 28, quote, QUOTE4, 0))
		return TC_ACT_SHOT;
	return bpf_redirect(skb->ifindex, 0);
}

static __noinline int reject6(struct __sk_buff *skb, struct packet *p)
{
	struct reject_ip6 ip = {};
	struct reject_icmp icmp = {};
	__u32 pseudo[2]; // ICMPv6's checksum: the length and next header
	__u8 quote[QUOTE6];
	__s64 sum;

	if (bpf_skb_load_bytes(skb, ETH_HLEN, quote, QUOTE6) || !swap_macs(skb))
		return TC_ACT_SHOT;
	icmp.type = ICMPV6_DEST_UNREACH_;
	icmp.code = ICMPV6_PORT_UNREACH_;
	pseudo[0] = bpf_htonl(sizeof(icmp) + QUOTE6);
	pseudo[1] = bpf_htonl(IPPROTO_ICMPV6_);
	sum = bpf_csum_diff(0, 0, p->saddr, 16, 0);
	sum = bpf_csum_diff(0, 0, p->daddr, 16, (__u32)sum);
	sum = bpf_csum_diff(0, 0, pseudo, sizeof(pseudo), (__u32)sum);
	sum = bpf_csum_diff(0, 0, (__u32 *)&icmp, sizeof(icmp), (__u32)sum);
	icmp.check = csum_fold_(bpf_csum_diff(0, 0, (__u32 *)quote, QUOTE6, (__u32)sum));
	ip.vtc_flow = bpf_htonl(0x60000000);
	ip.len = bpf_htons(sizeof(icmp) + QUOTE6);
	ip.next = IPPROTO_ICMPV6_;
	ip.hops = 64;
	if (bpf_skb_change_tail(skb, ETH_HLEN + 40 + sizeof(icmp) + QUOTE6, 0))
		return TC_ACT_SHOT;
	if (bpf_skb_store_bytes(skb, ETH_HLEN, &ip, sizeof(ip), 0) ||
	    bpf_skb_store_bytes(skb, ETH_HLEN + 8, p->daddr, 16, 0) ||
	    bpf_skb_store_bytes(skb, ETH_HLEN + 24, p->saddr, 16, 0) ||
	    bpf_skb_store_bytes(skb, ETH_HLEN + 40, &icmp, sizeof(icmp), 0) ||
	    bpf_skb_store_bytes(skb, ETH_HLEN + 48, quote, QUOTE6, 0))
		return TC_ACT_SHOT;
	return bpf_redirect(skb->ifindex, 0);
}

// Refuses packet `p`: the port unreachable, back out its interface.
static __always_inline int reject(struct __sk_buff *skb, struct packet *p)
{
	count(COUNT_REFUSED);
	return p->family == FAMILY_V4 ? reject4(skb, p) : reject6(skb, p);
}

// ---------------------------------------------------------------------
// Direct server return (EXT_DSR). The first node translates the
// destination to the endpoint and keeps the client's address; the
// packets that open a flow (a TCP SYN, an SCTP INIT) and every UDP
// datagram carry the Service's address and port to the endpoint's node,
// in an IPv4 option (8 bytes) or an IPv6 destination options header (24
// bytes) inserted after the IP header. That node's ingress program takes
// it out before its stack sees the packet and remembers the frontend for
// the (client, endpoint) pair in kpng_ext_replies, so that its egress
// program writes it back as the source of the endpoint's replies, which
// leave that node straight to the client. The option's type is 30 (0x1E),
// RFC 4727's experimental number, in both families: IPv4 copy bit and
// class 0; in IPv6, the high bits 00 (a node that does not know it skips
// it) and 0 (it does not change en route).

#define DSR_OPT 0x1E
#define DSR_LEN4 8
#define DSR_LEN6 24
#define NEXTHDR_DEST_ 60

struct dsr_opt4 {
	__u8 type;
	__u8 len; // 8
	__u16 port;
	__u32 addr;
};

struct dsr_opt6 {
	__u8 next;   // the header after this one
	__u8 hdrlen; // 2: 24 bytes
	__u8 type;
	__u8 len; // 18
	__u32 addr[4];
	__u16 port;
	__u8 pad_type; // PadN, of no data
	__u8 pad_len;
};

// The IPv4 header's first 20 bytes: words for its checksum, halves for
// its fields (the checksum is half[5]).
union ip4_words {
	__u32 word[5];
	__u16 half[10];
};

// Whether a new flow of `p` to `svc`'s remote endpoint `ep` is returned
// directly: the record says so, and the packet can carry the option (an
// IPv4 header without options of its own; IPv6 packets with extension
// headers never reach here). Otherwise it is masqueraded.
static __always_inline int dsr_wanted(struct packet *p, struct service *svc,
				      struct endpoint *ep)
{
	if (!(svc->flags & EXT_DSR) || (ep->flags & ENDPOINT_LOCAL))
		return 0;
	return p->family == FAMILY_V6 || p->l4_off == ETH_HLEN + 20;
}

// Recomputes the checksum of the IPv4 header at ETH_HLEN (`hdr`, its
// first 20 bytes, then `opt`, an option of DSR_LEN4 bytes, or none) and
// stores the 20 bytes.
static __always_inline int store_ip4(struct __sk_buff *skb, union ip4_words *hdr,
				     struct dsr_opt4 *opt)
{
	__s64 sum;

	hdr->half[5] = 0;
	sum = bpf_csum_diff(0, 0, hdr->word, 20, 0);
	if (opt)
		sum = bpf_csum_diff(0, 0, (__u32 *)opt, DSR_LEN4, (__u32)sum);
	hdr->half[5] = csum_fold_(sum);
	return !bpf_skb_store_bytes(skb, ETH_HLEN, hdr->word, 20, 0);
}

// Inserts the option carrying `fe` after the IP header of `p` (already
// translated to its endpoint).
static __noinline int dsr_carry(struct __sk_buff *skb, struct packet *p,
				struct frontend *fe)
{
	if (p->family == FAMILY_V4) {
		struct dsr_opt4 opt = {};
		union ip4_words hdr;

		opt.type = DSR_OPT;
		opt.len = DSR_LEN4;
		opt.port = fe->port;
		opt.addr = fe->addr[0];
		if (bpf_skb_adjust_room(skb, DSR_LEN4, BPF_ADJ_ROOM_NET, 0) ||
		    bpf_skb_store_bytes(skb, ETH_HLEN + 20, &opt, DSR_LEN4, 0) ||
		    bpf_skb_load_bytes(skb, ETH_HLEN, &hdr, 20))
			return 0;
		// Header length 7 words, total length 8 more.
		hdr.half[0] = (hdr.half[0] & bpf_htons(0x00ff)) | bpf_htons(0x4700);
		hdr.half[1] = bpf_htons(bpf_ntohs(hdr.half[1]) + DSR_LEN4);
		return store_ip4(skb, &hdr, &opt);
	} else {
		struct dsr_opt6 opt = {};
		__u8 next = NEXTHDR_DEST_;
		__u16 len;

		opt.next = p->proto;
		opt.hdrlen = 2;
		opt.type = DSR_OPT;
		opt.len = 18;
		__builtin_memcpy(opt.addr, fe->addr, 16);
		opt.port = fe->port;
		opt.pad_type = 1;
		if (bpf_skb_load_bytes(skb, ETH_HLEN + 4, &len, 2) ||
		    bpf_skb_adjust_room(skb, DSR_LEN6, BPF_ADJ_ROOM_NET, 0) ||
		    bpf_skb_store_bytes(skb, ETH_HLEN + 40, &opt, DSR_LEN6, 0))
			return 0;
		len = bpf_htons(bpf_ntohs(len) + DSR_LEN6);
		return !bpf_skb_store_bytes(skb, ETH_HLEN + 4, &len, 2, 0) &&
		       !bpf_skb_store_bytes(skb, ETH_HLEN + 6, &next, 1, 0);
	}
}

// The verdicts of dsr_restore.
#define DSR_NONE 0     // no option
#define DSR_RESTORED 1 // taken out, the frontend recorded
#define DSR_BROKEN 2   // an option, but the packet could not be restored
		       // (counted dropped)

// On the endpoint's node: a packet carrying the option has it taken out,
// and its frontend is remembered for the replies of (client, endpoint).
static __noinline int dsr_restore(struct __sk_buff *skb)
{
	struct frontend fe = {};
	struct packet p = {};
	struct reply_key rkey = {};
	__u16 eth_proto;

	if (bpf_skb_load_bytes(skb, 12, &eth_proto, 2))
		return DSR_NONE;
	if (eth_proto == bpf_htons(ETH_P_IPV4)) {
		struct dsr_opt4 opt;
		union ip4_words hdr;
		__u8 vihl;

		if (bpf_skb_load_bytes(skb, ETH_HLEN, &vihl, 1) || vihl != 0x47)
			return DSR_NONE;
		if (bpf_skb_load_bytes(skb, ETH_HLEN + 20, &opt, DSR_LEN4) ||
		    opt.type != DSR_OPT || opt.len != DSR_LEN4)
			return DSR_NONE;
		fe.addr[0] = opt.addr;
		fe.port = opt.port;
		fe.family = FAMILY_V4;
		if (bpf_skb_adjust_room(skb, -DSR_LEN4, BPF_ADJ_ROOM_NET, 0) ||
		    bpf_skb_load_bytes(skb, ETH_HLEN, &hdr, 20))
			goto broken;
		hdr.half[0] = (hdr.half[0] & bpf_htons(0x00ff)) | bpf_htons(0x4500);
		hdr.half[1] = bpf_htons(bpf_ntohs(hdr.half[1]) - DSR_LEN4);
		if (!store_ip4(skb, &hdr, 0))
			goto broken;
	} else if (eth_proto == bpf_htons(ETH_P_IPV6_)) {
		struct dsr_opt6 opt;
		__u8 next;
		__u16 len;

		if (bpf_skb_load_bytes(skb, ETH_HLEN + 6, &next, 1) || next != NEXTHDR_DEST_)
			return DSR_NONE;
		if (bpf_skb_load_bytes(skb, ETH_HLEN + 40, &opt, DSR_LEN6) ||
		    opt.hdrlen != 2 || opt.type != DSR_OPT || opt.len != 18)
			return DSR_NONE;
		__builtin_memcpy(fe.addr, opt.addr, 16);
		fe.port = opt.port;
		fe.family = FAMILY_V6;
		if (bpf_skb_load_bytes(skb, ETH_HLEN + 4, &len, 2) ||
		    bpf_skb_adjust_room(skb, -DSR_LEN6, BPF_ADJ_ROOM_NET, 0))
			goto broken;
		len = bpf_htons(bpf_ntohs(len) - DSR_LEN6);
		if (bpf_skb_store_bytes(skb, ETH_HLEN + 4, &len, 2, 0) ||
		    bpf_skb_store_bytes(skb, ETH_HLEN + 6, &opt.next, 1, 0))
			goto broken;
	} else {
		return DSR_NONE;
	}
	if (!parse(skb, &p))
		goto broken;
	fe.proto = p.proto;
	__builtin_memcpy(rkey.client, p.saddr, 16);
	rkey.client_port = p.sport;
	rkey.proto = p.proto;
	rkey.family = p.family;
	__builtin_memcpy(rkey.endpoint.addr, p.daddr, 16);
	rkey.endpoint.port = p.dport;
	rkey.endpoint.family = p.family;
	bpf_map_update_elem(&kpng_ext_replies, &rkey, &fe, BPF_ANY);
	return DSR_RESTORED;
broken:
	count(COUNT_DROPPED);
	return DSR_BROKEN;
}

// A packet from outside to no record: an unknown port on a live
// ClusterIP is refused, an unallocated address of the Service CIDRs
// dropped (as the socket programs do), anything else goes on.
static __always_inline int no_record(struct __sk_buff *skb, struct packet *p,
				     struct frontend *fe)
{
	switch (no_service(fe)) {
	case REFUSE:
		return reject(skb, p);
	case DROP:
		count(COUNT_DROPPED);
		return TC_ACT_SHOT;
	default:
		return TC_ACT_OK;
	}
}

// Whether a UDP flow's endpoint is still where it was found (as the
// conntrack cleanup ends a UDP flow to an endpoint that left).
static __always_inline int still_there(struct conn_value *flow)
{
	struct set_key key = {};
	struct page *first;
	struct endpoint *ep;

	if (flow->index == NO_SLOT)
		return 1; // from affinity: its member check came first
	key.set = flow->set;
	first = bpf_map_lookup_elem(&kpng_slots, &key);
	if (!first || flow->index >= first->count)
		return 0;
	ep = slot_of(first, flow->set, flow->index);
	return ep && same(ep, &flow->endpoint);
}

// Whether packet `p` to `fe` (record `svc`) may pass its
// loadBalancerSourceRanges (always, without them).
static __always_inline int in_ranges(struct packet *p, struct frontend *fe,
				     struct service *svc)
{
	struct range_key range = {};

	if (!(svc->flags & EXT_RANGES))
		return 1;
	range.prefixlen = 160 + (p->family == FAMILY_V4 ? 32 : 128);
	range.frontend = *fe;
	__builtin_memcpy(range.addr, p->saddr, 16);
	return bpf_map_lookup_elem(&kpng_ranges, &range) != 0;
}

// Whether packet `p` goes on in `flow` (to `svc`) at `now`: a TCP
// connection (an SCTP association) keeps its endpoint until a new one (a
// SYN with another sequence number, an INIT with another initiate tag:
// not a retransmission) reuses its ports, as conntrack keeps it; a UDP
// flow while it is not idle 30 s and its endpoint stays.
static __always_inline int flow_holds(struct conn_value *flow, struct service *svc,
				      struct packet *p, __u64 now)
{
	if (p->proto != IPPROTO_UDP)
		return !p->syn || (p->seq == flow->isn && now - flow->last_ns <= FLOW_IDLE_NS);
	return flow->set == svc->set && now - flow->last_ns <= FLOW_IDLE_NS &&
	       still_there(flow);
}

// A packet from outside (its own function, so that its stack and
// dsr_restore's are not counted together).
static __noinline int ingress(struct __sk_buff *skb)
{
	struct packet p = {};
	struct frontend fe = {};
	struct service *svc;
	struct conn_key ckey = {};
	struct conn_value *flow, value = {};
	struct reply_key rkey = {};
	struct endpoint ep;
	__u16 snat_port = 0, dsr = 0;
	__u32 slot = NO_SLOT;
	int verdict;
	__u64 now;

	if (!parse(skb, &p))
		return TC_ACT_OK;
	verdict = unmasquerade(skb, &p);
	if (verdict >= 0)
		return verdict;
	__builtin_memcpy(fe.addr, p.daddr, 16);
	fe.port = p.dport;
	fe.proto = p.proto;
	fe.family = p.family;
	svc = bpf_map_lookup_elem(&kpng_external, &fe);
	if (!svc)
		return no_record(skb, &p, &fe);
	if (!in_ranges(&p, &fe, svc)) {
		count(COUNT_DROPPED);
		return TC_ACT_SHOT;
	}
	now = bpf_ktime_get_ns();
	__builtin_memcpy(ckey.client, p.saddr, 16);
	ckey.client_port = p.sport;
	ckey.proto = p.proto;
	ckey.family = p.family;
	ckey.frontend = fe;
	flow = bpf_map_lookup_elem(&kpng_ext_flows, &ckey);
	if (flow && flow_holds(flow, svc, &p, now)) {
		ep = flow->endpoint;
		snat_port = flow->snat_port;
		dsr = flow->dsr;
		flow->last_ns = now;
		// (its masquerade entries refreshed: the LRU keeps them)
		if (snat_port && !masquerade(&p, &fe, &ep, &snat_port, now))
			return TC_ACT_SHOT;
	} else {
		if (!pick_external(&p, svc, &ep, &slot, now)) {
			if (svc->flags & EMPTY_REJECT)
				return reject(skb, &p);
			count(COUNT_DROPPED);
			return TC_ACT_SHOT;
		}
		// Cluster: returned directly by another node's endpoint, or
		// masqueraded towards it, so that its replies come back
		// through this node.
		dsr = dsr_wanted(&p, svc, &ep);
		if (!dsr && snat_wanted(&p, &fe, svc, &ep) &&
		    !masquerade(&p, &fe, &ep, &snat_port, now)) {
			count(COUNT_DROPPED);
			return TC_ACT_SHOT;
		}

		value.endpoint = ep;
		value.snat_port = snat_port;
		value.dsr = dsr;
		value.set = svc->set;
		value.index = slot;
		value.isn = p.seq;
		value.last_ns = now;
		bpf_map_update_elem(&kpng_ext_flows, &ckey, &value, BPF_ANY);
		count_traffic(&fe, &ep);
	}
	if (!snat_port)
		forget_masquerade(&p, &ep);
	__builtin_memcpy(rkey.client, p.saddr, 16);
	rkey.client_port = p.sport;
	rkey.proto = p.proto;
	rkey.family = p.family;
	rkey.endpoint = ep;
	rkey.endpoint.flags = 0; // as the reply's address reads it back
	bpf_map_update_elem(&kpng_ext_replies, &rkey, &fe, BPF_ANY);

	if (ep.family != p.family)
		return TC_ACT_SHOT;
	if (!rewrite_addr(skb, &p, p.daddr_off, p.daddr, ep.addr))
		return TC_ACT_SHOT;
	if (ep.port != p.dport &&
	    !rewrite_port(skb, &p, p.l4_off + 2, p.dport, ep.port))
		return TC_ACT_SHOT;
	// (a UDP datagram within the option's length of the interface's
	// MTU cannot carry it, and is dropped)
	if (dsr && (p.syn || p.proto == IPPROTO_UDP) && !dsr_carry(skb, &p, &fe)) {
		count(COUNT_DROPPED);
		return TC_ACT_SHOT;
	}
	count(COUNT_TRANSLATED);
	return TC_ACT_OK;
}

// Next hops learned at egress, for the XDP program (kpng_xdp.c) to send
// the packets of flows the tc programs opened straight back out the
// interface they came in by: (address, interface) -> the Ethernet
// addresses a packet to it last left with, and when.
struct nexthop_key {
	__u32 addr[4];
	__u32 ifindex;
	__u32 family;
};

struct nexthop {
	__u8 dst[6];
	__u8 src[6];
	__u32 pad;
	__u64 last_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 14);
	__type(key, struct nexthop_key);
	__type(value, struct nexthop);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_nexthop SEC(".maps");

// Remembers the Ethernet addresses packet `p`, translated here, leaves
// interface `skb->ifindex` with towards its destination.
static __always_inline void learn(struct __sk_buff *skb, struct packet *p)
{
	struct nexthop_key key = {};
	struct nexthop hop = {};

	if (bpf_skb_load_bytes(skb, 0, hop.dst, 6) || bpf_skb_load_bytes(skb, 6, hop.src, 6))
		return;
	__builtin_memcpy(key.addr, p->daddr, 16);
	key.ifindex = skb->ifindex;
	key.family = p->family;
	hop.last_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&kpng_nexthop, &key, &hop, BPF_ANY);
}

SEC("classifier")
int kpng_tc_ingress(struct __sk_buff *skb)
{
	// (no stack of its own: this function's frame counts with
	// ingress's, which is near the limit with reject4's)
	switch (dsr_restore(skb)) {
	case DSR_NONE:
		return ingress(skb);
	case DSR_RESTORED:
		return TC_ACT_OK;
	default:
		return TC_ACT_SHOT;
	}
}

SEC("classifier")
int kpng_tc_egress(struct __sk_buff *skb)
{
	struct packet p = {};
	struct reply_key rkey = {};
	struct frontend *fe;
	__u32 addr[4];
	int verdict;

	if (!parse(skb, &p))
		return TC_ACT_OK;
	verdict = snat_out(skb, &p);
	if (verdict == TC_ACT_OK)
		learn(skb, &p);
	if (verdict >= 0)
		return verdict;
	// A flow returned directly leaving for its endpoint (its SYN or a
	// datagram carrying the option).
	if (p.family == FAMILY_V4 && p.l4_off == ETH_HLEN + 20 + DSR_LEN4) {
		__u8 type;

		if (!bpf_skb_load_bytes(skb, ETH_HLEN + 20, &type, 1) && type == DSR_OPT) {
			learn(skb, &p);
			return TC_ACT_OK;
		}
	}
	__builtin_memcpy(rkey.client, p.daddr, 16);
	rkey.client_port = p.dport;
	rkey.proto = p.proto;
	rkey.family = p.family;
	__builtin_memcpy(rkey.endpoint.addr, p.saddr, 16);
	rkey.endpoint.port = p.sport;
	rkey.endpoint.family = p.family;
	fe = bpf_map_lookup_elem(&kpng_ext_replies, &rkey);
	if (!fe)
		return TC_ACT_OK;
	__builtin_memcpy(addr, fe->addr, 16);
	if (!rewrite_addr(skb, &p, p.saddr_off, p.saddr, addr))
		return TC_ACT_SHOT;
	if (fe->port != p.sport &&
	    !rewrite_port(skb, &p, p.l4_off, p.sport, fe->port))
		return TC_ACT_SHOT;
	learn(skb, &p);
	return TC_ACT_OK;
}
