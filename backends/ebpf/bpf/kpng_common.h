// SPDX-License-Identifier: Apache-2.0
//
// What the socket programs (kpng_cgroup.c) and the tc programs
// (kpng_tc.c) share: the records and maps the backend writes (a
// frontend, its record, its endpoint sets in pages, affinity), the
// counters, and the helpers that read them (the empty-set verdict, a
// set's slots, affinity, the turn). Included by kpng_sock.c.

#ifndef KPNG_COMMON_H
#define KPNG_COMMON_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define FAMILY_V4 4
#define FAMILY_V6 6

#define EPERM 1
#define ECONNREFUSED 111

// What a Service does when its endpoint set is empty.
#define EMPTY_REJECT 1 // no endpoint at all: refuse, as a REJECT does
#define EMPTY_DROP 2   // endpoints, but none for a Local policy: drop
// (balancing flags of a record; none: at random)
#define BAL_MAGLEV 16 // by the flow's Maglev slot (tc; sockets: at random)
#define BAL_RR 32     // in turn, by the set's counter
// (a socket record of an LB IP with loadBalancerSourceRanges, made when no
// netfilter rules check its sources: which sockets it translates)
#define SOCK_RANGED 256	     // the node's and pods' sources are decided here:
#define RANGED_NODE 512	     // the node's sockets (a node address in range)
#define RANGED_PODS 1024     // pods' sockets (every pod network in range)
#define RANGED_NO_PODS 2048  // no pod's (no pod network in range); neither
			     // flag: pods' sockets left alone
// (a socket record of a NodePort on a loopback address: a localhost
// NodePort) served to the node's own network namespace only
// (kpng_settings[0].node_netns); another namespace's loopback (a pod's)
// is its own
#define NODE_NETNS 4096

// Lookups of one program: the Service address the socket asked for.
struct frontend {
	__u32 addr[4]; // IPv4: addr[0], the rest zero
	__u16 port;
	__u8 proto; // IPPROTO_TCP, _UDP or _SCTP
	__u8 family;
};

struct service {
	__u32 set;	// its endpoint set
	__u32 affinity; // ClientIP affinity timeout in seconds; 0: none
	__u32 flags;	// EMPTY_*
	__u32 pad;
};

struct set_key {
	__u32 set;
	__u32 page; // endpoints page*8 .. page*8+7
};

struct endpoint {
	__u32 addr[4];
	__u16 port;
	__u8 family;
	__u8 flags; // ENDPOINT_LOCAL: on this node
};

#define ENDPOINT_LOCAL 1

#define PAGE 8

// A page of a set's slots. Page 0 also holds the set's endpoint count:
// one element write changes the count and the first slots together.
struct page {
	__u32 count; // page 0 only
	__u32 pad;
	struct endpoint slot[PAGE];
};

struct member_key {
	__u32 set;
	struct endpoint endpoint;
};

struct affinity_key {
	__u64 netns; // the client: its network namespace (a pod)
	__u32 set;
	__u32 pad;
};

struct affinity_value {
	struct endpoint endpoint;
	__u32 pad;
	__u64 last_ns;
};

struct reverse_key {
	__u64 cookie; // the socket
	struct endpoint endpoint;
	__u32 pad;
};

struct live_key {
	__u32 addr[4];
	__u8 family;
	__u8 pad[3];
};

struct cidr_key {
	__u32 prefixlen; // in bits, counting the family byte
	__u8 family;
	__u8 addr[16];
	__u8 pad[3];
};

// Frontend (a Service address, port and protocol) -> its service record.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 19);
	__type(key, struct frontend);
	__type(value, struct service);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_services SEC(".maps");

// (set, page) -> up to 8 endpoints; page 0 holds the count.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 19);
	__type(key, struct set_key);
	__type(value, struct page);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_slots SEC(".maps");

// (set, endpoint) -> present: whether a remembered endpoint is still in
// its set (sets of Services with ClientIP affinity only).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 18);
	__type(key, struct member_key);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_members SEC(".maps");

// ClientIP affinity: (client, set) -> the endpoint it last got, and when.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 14);
	__type(key, struct affinity_key);
	__type(value, struct affinity_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_affinity SEC(".maps");

// (socket, endpoint) -> the Service address it asked for: what
// getpeername and a UDP reply show.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct reverse_key);
	__type(value, struct endpoint);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_reverse SEC(".maps");

// Datagrams of an unconnected UDP socket to one Service address stay
// with one endpoint while they keep coming (as a conntrack flow does):
// (socket, frontend) -> the endpoint, where it was found, and when.
struct flow_key {
	__u64 cookie;
	struct frontend frontend;
	__u32 pad;
};

struct flow_value {
	struct endpoint endpoint;
	__u32 set;
	__u32 index;
	__u32 pad;
	__u64 last_ns;
};

// A flow idle this long is balanced again (the kernel's default UDP
// conntrack timeout).
#define FLOW_IDLE_NS (30ULL * 1000000000ULL)

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 14);
	__type(key, struct flow_key);
	__type(value, struct flow_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_flows SEC(".maps");

// ClusterIPs in use: a port no Service serves on them is refused.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 17);
	__type(key, struct live_key);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_live SEC(".maps");

// The Service CIDRs: an address in them that no Service holds is dropped.
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1024);
	__type(key, struct cidr_key);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_cidrs SEC(".maps");

// Counters, read by the backend: translated, refused, dropped.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 5);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_counters SEC(".maps");

#define COUNT_TRANSLATED 0
#define COUNT_REFUSED 1
#define COUNT_DROPPED 2
#define COUNT_MISSING 3 // a page below a set's count was absent (a bug)
#define COUNT_XDP 4	// packets the XDP program translated

static __always_inline void count(__u32 what)
{
	__u64 *n = bpf_map_lookup_elem(&kpng_counters, &what);
	if (n)
		*n += 1;
}

// Per-Service counters (issue #28): new connections per frontend (a
// Service port's address, or a node's address and node port) and
// endpoint. Counted when `kpng_settings[0]` has SETTING_COUNT set (the
// backend writes it at attach; `--counters`).
struct traffic_key {
	struct frontend frontend;
	struct endpoint endpoint; // flags 0
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct traffic_key);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_traffic SEC(".maps");

// Settings the backend writes, in kpng_settings[0].
struct settings {
	__u32 flags; // SETTING_*
	__u32 pad;
	__u64 node_netns; // the node's network namespace (its cookie)
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct settings);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_settings SEC(".maps");

#define SETTING_COUNT 1

// Whether `netns` (a socket's network namespace cookie) is the node's own.
static __always_inline int node_netns(__u64 netns)
{
	struct settings *settings;
	__u32 zero = 0;

	settings = bpf_map_lookup_elem(&kpng_settings, &zero);
	return settings && settings->node_netns && settings->node_netns == netns;
}

// One more new connection from `fe` to `ep`, when counting is on.
static __always_inline void count_traffic(struct frontend *fe,
					  struct endpoint *ep)
{
	struct traffic_key key = {};
	__u32 zero = 0;
	struct settings *settings;
	__u64 one = 1, *n;

	settings = bpf_map_lookup_elem(&kpng_settings, &zero);
	if (!settings || !(settings->flags & SETTING_COUNT))
		return;
	key.frontend = *fe;
	key.endpoint = *ep;
	key.endpoint.flags = 0;
	n = bpf_map_lookup_elem(&kpng_traffic, &key);
	if (n)
		*n += 1;
	else
		bpf_map_update_elem(&kpng_traffic, &key, &one, BPF_NOEXIST);
}

// The verdicts of `pick`.
#define PASS 0	    // not a Service address: leave the socket alone
#define TRANSLATE 1 // `out` holds the endpoint
#define REFUSE 2    // fail as a REJECT does (ECONNREFUSED)
#define DROP 3	    // fail as a DROP would (EPERM, at once)
#define KNOWN 4	    // as TRANSLATE, for a datagram of a flow already counted

static __always_inline int no_service(struct frontend *fe)
{
	struct live_key live = {};
	struct cidr_key cidr = {};
	int i;

	for (i = 0; i < 4; i++)
		live.addr[i] = fe->addr[i];
	live.family = fe->family;
	if (bpf_map_lookup_elem(&kpng_live, &live))
		return REFUSE;
	cidr.prefixlen = 8 + (fe->family == FAMILY_V4 ? 32 : 128);
	cidr.family = fe->family;
	__builtin_memcpy(cidr.addr, fe->addr, 16);
	if (bpf_map_lookup_elem(&kpng_cidrs, &cidr))
		return DROP;
	return PASS;
}

static __always_inline int same(struct endpoint *a, struct endpoint *b)
{
	return a->addr[0] == b->addr[0] && a->addr[1] == b->addr[1] &&
	       a->addr[2] == b->addr[2] && a->addr[3] == b->addr[3] &&
	       a->port == b->port && a->family == b->family;
}

// Slot `i` of set `set`, whose first page is `first` (`i` below its
// count): the endpoint there, or 0 when its page is missing.
static __always_inline struct endpoint *slot_of(struct page *first, __u32 set,
						__u32 i)
{
	struct set_key key = {};
	struct page *page = first;

	if (i >= PAGE) {
		key.set = set;
		key.page = i / PAGE;
		page = bpf_map_lookup_elem(&kpng_slots, &key);
		if (!page)
			return 0;
	}
	return &page->slot[i & (PAGE - 1)];
}

// Whether a remembered affinity of set `svc->set` holds: not timed out,
// and its endpoint still a member of the set.
static __always_inline int still_affine(struct affinity_value *aff,
					struct service *svc, __u64 now)
{
	struct member_key member = {};

	if (!aff || now - aff->last_ns > (__u64)svc->affinity * 1000000000ULL)
		return 0;
	member.set = svc->set;
	member.endpoint = aff->endpoint;
	return bpf_map_lookup_elem(&kpng_members, &member) != 0;
}

// The slot a new connection to `svc` takes among the `n` of its set
// (whose first page is `first`): the next in turn for round robin (the
// counter kept in page 0, reset when the set changes), else at random. A
// Maglev Service's sockets also pick at random: a socket keeps the
// endpoint it connected to for its life, so there is no flow of it to
// keep in place.
static __always_inline __u32 in_turn(struct service *svc, struct page *first,
				     __u32 n)
{
	if (svc->flags & BAL_RR)
		return __sync_fetch_and_add(&first->pad, 1) % n;
	return bpf_get_prandom_u32() % n;
}

#endif // KPNG_COMMON_H
