//! The tc programs run by the kernel on packets made here
//! (`BPF_PROG_TEST_RUN`), their maps written by hand, the packets they
//! give back checked byte by byte: SCTP translated with its CRC32c kept
//! valid (a port change updates it), and REJECT's ICMP and ICMPv6 port
//! unreachable with valid checksums. (The lab's packets cross veths,
//! whose receivers may skip checksums: this checks them.) Run as root;
//! otherwise each test prints SKIPPED and passes.

mod tc_support;

use tc_support::*;

/// SCTP from outside to a frontend whose endpoint listens on another
/// port: the destination and its port are rewritten, the CRC32c stays
/// valid; the endpoint's reply gets the frontend's address and port
/// back, its CRC32c valid too. In IPv4 and IPv6.
#[test]
fn sctp_is_translated_with_its_crc32c_kept_valid() {
    let Some(mut loaded) = Loaded::new() else {
        return;
    };
    let (client, vip, pod) = ([203, 0, 113, 10], [10, 96, 0, 80], [10, 244, 1, 10]);
    loaded.serve(
        frontend(vip.into(), 80, 132),
        EMPTY_DROP,
        Some(endpoint(pod.into(), 8080)),
    );
    // Lengths whose count of bytes after the port (m) sets each bit from
    // 2 to 11 (the CRC update multiplies by x^(8m) bit by bit; bit 1 is
    // the reply's below; bits 12-15 need packets longer than a test run
    // takes).
    let extras = [0, 4, 252, 508, 1020, 1448, 2044];
    for (init, extra) in [(true, 0)].into_iter().chain(extras.map(|e| (false, e))) {
        let packet = ipv4(client, vip, 132, &sctp_padded(40000, 80, init, extra));
        let (verdict, out) = loaded.run("kpng_tc_ingress", &packet);
        assert_eq!(verdict, TC_ACT_OK);
        assert_eq!(out.len(), packet.len());
        assert_eq!(&out[30..34], &pod, "{out:?}");
        assert_eq!(inet_sum(&out[14..34]), 0, "IPv4 header checksum");
        assert_eq!(
            &out[34..38],
            &[40000u16.to_be_bytes(), 8080u16.to_be_bytes()].concat()[..]
        );
        assert!(sctp_valid(&out[34..]), "CRC32c after DNAT: {out:?}");
    }
    let reply = ipv4(pod, client, 132, &sctp(8080, 40000, false));
    let (verdict, out) = loaded.run("kpng_tc_egress", &reply);
    assert_eq!(verdict, TC_ACT_OK);
    assert_eq!(&out[26..30], &vip);
    assert_eq!(&out[34..36], &80u16.to_be_bytes());
    assert!(sctp_valid(&out[34..]), "CRC32c of the reply");

    let v6 = |s: &str| s.parse::<std::net::Ipv6Addr>().expect("v6").octets();
    let (client, vip, pod) = (
        v6("2001:db8:1::10"),
        v6("fd00:96::80"),
        v6("fd00:244:1::10"),
    );
    loaded.serve(
        frontend(vip.into(), 80, 132),
        EMPTY_DROP,
        Some(endpoint(pod.into(), 8080)),
    );
    let packet = ipv6(client, vip, 132, &sctp(40001, 80, true));
    let (verdict, out) = loaded.run("kpng_tc_ingress", &packet);
    assert_eq!(verdict, TC_ACT_OK);
    assert_eq!(&out[38..54], &pod);
    assert_eq!(&out[56..58], &8080u16.to_be_bytes());
    assert!(sctp_valid(&out[54..]), "CRC32c after DNAT (IPv6)");
}

/// REJECT built by the ingress program: a TCP SYN to a frontend with no
/// endpoint, and a UDP datagram, come back (redirected out their
/// interface) as an ICMP port unreachable from the frontend to the
/// client, Ethernet addresses swapped, quoting the packet's start, every
/// checksum valid; in IPv6 an ICMPv6 one, its checksum over the
/// pseudo-header valid.
#[test]
fn reject_is_a_port_unreachable_with_valid_checksums() {
    let Some(mut loaded) = Loaded::new() else {
        return;
    };
    let (client, vip) = ([203, 0, 113, 10], [10, 96, 0, 81]);
    loaded.serve(frontend(vip.into(), 80, 6), EMPTY_REJECT, None);
    loaded.serve(frontend(vip.into(), 53, 17), EMPTY_REJECT, None);
    let syn = [
        &40000u16.to_be_bytes()[..],
        &80u16.to_be_bytes(),
        &[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0],
    ]
    .concat();
    let udp = [
        &40001u16.to_be_bytes()[..],
        &53u16.to_be_bytes(),
        &[0, 10, 0, 0, b'h', b'i'],
    ]
    .concat();
    for (proto, payload) in [(6u8, syn.clone()), (17, udp)] {
        let packet = ipv4(client, vip, proto, &payload);
        let (verdict, out) = loaded.run("kpng_tc_ingress", &packet);
        assert_eq!(verdict, TC_ACT_REDIRECT, "back out the interface");
        assert_eq!(out.len(), 14 + 20 + 8 + 28, "{out:?}");
        assert_eq!(&out[..6], &MACS[6..]);
        assert_eq!(&out[6..12], &MACS[..6]);
        assert_eq!(out[14 + 9], 1, "ICMP");
        assert_eq!(&out[26..30], &vip);
        assert_eq!(&out[30..34], &client);
        assert_eq!(inet_sum(&out[14..34]), 0, "IPv4 header checksum");
        assert_eq!(&out[34..36], &[3, 3], "port unreachable");
        assert_eq!(inet_sum(&out[34..]), 0, "ICMP checksum");
        assert_eq!(&out[42..70], &packet[14..42], "the quote");
    }

    let v6 = |s: &str| s.parse::<std::net::Ipv6Addr>().expect("v6").octets();
    let (client, vip) = (v6("2001:db8:1::10"), v6("fd00:96::81"));
    loaded.serve(frontend(vip.into(), 80, 6), EMPTY_REJECT, None);
    let packet = ipv6(client, vip, 6, &syn);
    let (verdict, out) = loaded.run("kpng_tc_ingress", &packet);
    assert_eq!(verdict, TC_ACT_REDIRECT);
    assert_eq!(out.len(), 14 + 40 + 8 + 48, "{out:?}");
    assert_eq!(out[20], 58, "ICMPv6");
    assert_eq!(&out[22..38], &vip);
    assert_eq!(&out[38..54], &client);
    assert_eq!(&out[54..56], &[1, 4], "port unreachable");
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&out[22..54]);
    pseudo.extend_from_slice(&56u32.to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    pseudo.extend_from_slice(&out[54..]);
    assert_eq!(inet_sum(&pseudo), 0, "ICMPv6 checksum");
    assert_eq!(&out[62..110], &packet[14..62], "the quote");
}

/// A TCP segment from `sport` to `dport` with `flags` (0x02: SYN) and
/// `sequence`, its checksum set for `src` and `dst` (4 or 16 bytes).
fn tcp(src: &[u8], dst: &[u8], sport: u16, dport: u16, flags: u8, sequence: u32) -> Vec<u8> {
    let mut out = [
        &sport.to_be_bytes()[..],
        &dport.to_be_bytes(),
        &sequence.to_be_bytes(),
        &[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0],
    ]
    .concat();
    let sum = inet_sum(&pseudo(src, dst, 6, &out));
    out[16..18].copy_from_slice(&sum.to_be_bytes());
    out
}

/// The pseudo-header of `src` and `dst`, then `l4` (of protocol `proto`):
/// its Internet sum is 0 when `l4`'s checksum is right.
fn pseudo(src: &[u8], dst: &[u8], proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(src);
    out.extend_from_slice(dst);
    if src.len() == 4 {
        out.extend_from_slice(&[0, proto]);
        out.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    } else {
        out.extend_from_slice(&(l4.len() as u32).to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, proto]);
    }
    out.extend_from_slice(l4);
    out
}

/// Direct server return, byte by byte. The first node: a SYN to a
/// frontend whose endpoint is on another node (`EXT_DSR`) is translated
/// and carries the frontend in an IPv4 option (type 0x1E, 8 bytes: the
/// port, the address), header length and checksum updated, the TCP
/// checksum valid; the flow's next segment carries nothing. The
/// endpoint's node: the option is taken out (the packet is then the
/// translated one, checksums valid) and the endpoint's reply leaves with
/// the frontend's address and port. Then the same in IPv6, with a
/// destination options header of 24 bytes.
#[test]
fn direct_server_return_carries_and_restores_the_frontend() {
    const EXT_DSR: u32 = 8192;
    let Some(mut loaded) = Loaded::new() else {
        return;
    };
    let (client, vip, pod) = ([203, 0, 113, 10], [192, 168, 1, 1], [10, 244, 2, 10]);
    let remote = remote_endpoint(pod.into(), 8080);
    loaded.serve(
        frontend(vip.into(), 30080, 6),
        EMPTY_DROP | EXT_DSR,
        Some(remote),
    );
    let syn = ipv4(client, vip, 6, &tcp(&client, &vip, 40000, 30080, 0x02, 7));
    let (verdict, carried) = loaded.run("kpng_tc_ingress", &syn);
    assert_eq!(verdict, TC_ACT_OK);
    assert_eq!(carried.len(), syn.len() + 8, "{carried:?}");
    assert_eq!(carried[14], 0x47, "header length 7 words");
    assert_eq!(
        &carried[16..18],
        &((syn.len() - 14 + 8) as u16).to_be_bytes()
    );
    assert_eq!(
        inet_sum(&carried[14..42]),
        0,
        "IPv4 header checksum over the option"
    );
    assert_eq!(&carried[26..30], &client, "the client's address kept");
    assert_eq!(&carried[30..34], &pod);
    assert_eq!(
        &carried[34..42],
        &[0x1e, 8, 0x75, 0x80, 192, 168, 1, 1],
        "the option"
    );
    assert_eq!(&carried[44..46], &8080u16.to_be_bytes());
    assert_eq!(
        inet_sum(&pseudo(&client, &pod, 6, &carried[42..])),
        0,
        "TCP checksum"
    );
    let ack = ipv4(client, vip, 6, &tcp(&client, &vip, 40000, 30080, 0x10, 8));
    let (_, next) = loaded.run("kpng_tc_ingress", &ack);
    assert_eq!(
        (next.len(), next[14]),
        (ack.len(), 0x45),
        "no option after the SYN"
    );
    assert_eq!(&next[30..34], &pod);

    // The endpoint's node.
    let (verdict, restored) = loaded.run("kpng_tc_ingress", &carried);
    assert_eq!(verdict, TC_ACT_OK);
    assert_eq!(restored.len(), syn.len());
    assert_eq!(restored[14], 0x45);
    assert_eq!(inet_sum(&restored[14..34]), 0, "IPv4 header checksum");
    assert_eq!(&restored[34..], &carried[42..], "the segment as it came");
    let reply = ipv4(pod, client, 6, &tcp(&pod, &client, 8080, 40000, 0x12, 99));
    let (verdict, out) = loaded.run("kpng_tc_egress", &reply);
    assert_eq!(verdict, TC_ACT_OK);
    assert_eq!(&out[26..30], &vip, "the reply from the frontend");
    assert_eq!(&out[34..36], &30080u16.to_be_bytes());
    assert_eq!(inet_sum(&out[14..34]), 0);
    assert_eq!(
        inet_sum(&pseudo(&vip, &client, 6, &out[34..])),
        0,
        "TCP checksum"
    );

    let v6 = |s: &str| s.parse::<std::net::Ipv6Addr>().expect("v6").octets();
    let (client, vip, pod) = (
        v6("2001:db8:1::10"),
        v6("fd00:f::1:1"),
        v6("fd00:244:0:2::a"),
    );
    let remote = remote_endpoint(pod.into(), 8080);
    loaded.serve(
        frontend(vip.into(), 30080, 6),
        EMPTY_DROP | EXT_DSR,
        Some(remote),
    );
    let syn = ipv6(client, vip, 6, &tcp(&client, &vip, 40000, 30080, 0x02, 7));
    let (verdict, carried) = loaded.run("kpng_tc_ingress", &syn);
    assert_eq!(verdict, TC_ACT_OK);
    assert_eq!(carried.len(), syn.len() + 24, "{carried:?}");
    assert_eq!(carried[20], 60, "a destination options header next");
    assert_eq!(
        &carried[18..20],
        &((syn.len() - 54 + 24) as u16).to_be_bytes()
    );
    assert_eq!(&carried[38..54], &pod);
    let mut option = vec![6, 2, 0x1e, 18];
    option.extend_from_slice(&vip);
    option.extend_from_slice(&30080u16.to_be_bytes());
    option.extend_from_slice(&[1, 0]);
    assert_eq!(&carried[54..78], &option[..], "the option");
    assert_eq!(
        inet_sum(&pseudo(&client, &pod, 6, &carried[78..])),
        0,
        "TCP checksum"
    );
    let (verdict, restored) = loaded.run("kpng_tc_ingress", &carried);
    assert_eq!(verdict, TC_ACT_OK);
    assert_eq!(restored.len(), syn.len());
    assert_eq!((restored[20], &restored[18..20]), (6, &syn[18..20]));
    assert_eq!(&restored[54..], &carried[78..]);
    let reply = ipv6(pod, client, 6, &tcp(&pod, &client, 8080, 40000, 0x12, 99));
    let (_, out) = loaded.run("kpng_tc_egress", &reply);
    assert_eq!(&out[22..38], &vip);
    assert_eq!(
        inet_sum(&pseudo(&vip, &client, 6, &out[54..])),
        0,
        "TCP checksum"
    );
}

/// `CLOCK_MONOTONIC` in nanoseconds: `bpf_ktime_get_ns`'s clock.
fn monotonic_ns() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("clock");
    now.tv_sec() as u64 * 1_000_000_000 + now.tv_nsec() as u64
}

/// Masquerade ports are given again once their flow is over: with every
/// port of (endpoint, node address) held by a live flow a new flow is
/// dropped; a UDP flow idle 30 s frees its port, a TCP flow only after a
/// FIN or RST and 60 s idle (an open one holds its port for 24 h, as
/// kube-proxy's conntrack timeout). (Before, a port was never given
/// again: a node masqueraded about 4,500 flows to an endpoint in its
/// life, then dropped every new one.)
#[test]
fn masquerade_ports_are_given_again_once_their_flow_is_over() {
    use aya::maps::HashMap;
    const EXT_SNAT: u32 = 8;
    let Some(mut loaded) = Loaded::new() else {
        return;
    };
    let (client, node, pod) = ([203, 0, 113, 10], [192, 168, 1, 1], [10, 244, 2, 10]);
    loaded.set_node(node);
    // (the sizes of `struct snat_key` and `struct snat_value`)
    let fill = |loaded: &mut Loaded, proto: u8, dport: u16, closing: bool, age_s: u64| {
        let mut snat: HashMap<_, [u8; 40], [u8; 56]> =
            HashMap::try_from(loaded.ebpf().map_mut("kpng_snat").expect("map")).expect("lru");
        let last = monotonic_ns() - age_s * 1_000_000_000;
        for port in 61000u16..=65535 {
            let mut key = [0u8; 40];
            key[..4].copy_from_slice(&pod);
            key[16..18].copy_from_slice(&dport.to_be_bytes());
            key[18] = 4;
            key[20..24].copy_from_slice(&node);
            key[36..38].copy_from_slice(&port.to_be_bytes());
            key[38] = proto;
            let mut value = [0u8; 56];
            value[..4].copy_from_slice(&[198, 51, 100, 1]); // another client
            value[16..18].copy_from_slice(&port.to_be_bytes());
            value[18] = u8::from(closing);
            value[48..56].copy_from_slice(&last.to_ne_bytes());
            snat.insert(key, value, 0).expect("snat");
        }
    };
    let remote = remote_endpoint(pod.into(), 5353);
    loaded.serve(
        frontend(node.into(), 30053, 17),
        EMPTY_DROP | EXT_SNAT,
        Some(remote),
    );
    let udp = |sport: u16| {
        let payload = [
            &sport.to_be_bytes()[..],
            &30053u16.to_be_bytes(),
            &[0, 10, 0, 0, b'h', b'i'],
        ]
        .concat();
        ipv4(client, node, 17, &payload)
    };
    fill(&mut loaded, 17, 5353, false, 0);
    let (verdict, _) = loaded.run("kpng_tc_ingress", &udp(40000));
    assert_eq!(verdict, 2, "every port held by a live flow: dropped");
    fill(&mut loaded, 17, 5353, false, 31);
    let (verdict, out) = loaded.run("kpng_tc_ingress", &udp(40001));
    assert_eq!(
        verdict, TC_ACT_OK,
        "a port of a UDP flow idle 31 s is given again"
    );
    assert_eq!(&out[30..34], &pod);

    let remote = remote_endpoint(pod.into(), 8080);
    loaded.serve(
        frontend(node.into(), 30080, 6),
        EMPTY_DROP | EXT_SNAT,
        Some(remote),
    );
    let syn = |sport: u16| ipv4(client, node, 6, &tcp(&client, &node, sport, 30080, 0x02, 7));
    fill(&mut loaded, 6, 8080, false, 3600);
    let (verdict, _) = loaded.run("kpng_tc_ingress", &syn(40002));
    assert_eq!(verdict, 2, "open TCP flows idle an hour keep their ports");
    fill(&mut loaded, 6, 8080, true, 30);
    let (verdict, _) = loaded.run("kpng_tc_ingress", &syn(40003));
    assert_eq!(
        verdict, 2,
        "closed 30 s ago: the endpoint may still be in TIME_WAIT"
    );
    fill(&mut loaded, 6, 8080, true, 61);
    let (verdict, out) = loaded.run("kpng_tc_ingress", &syn(40004));
    assert_eq!(verdict, TC_ACT_OK, "closed and idle 61 s: given again");
    assert_eq!(&out[30..34], &pod);
}

/// The XDP program sends on the packets of a flow the tc programs opened
/// (here masqueraded to an endpoint on another node), as tc would
/// translate them, straight back out with the Ethernet addresses the tc
/// egress program learned: the SYN goes to tc (a new flow), the next
/// segment is translated by XDP and sent (`XDP_TX`), its checksums valid;
/// the endpoint's reply likewise goes back to the client from the
/// frontend. Without a learned next hop, or with an unknown interface
/// mode for a partial checksum, XDP passes the packet on untouched.
#[test]
fn xdp_sends_on_the_packets_of_flows_tc_opened() {
    use aya::maps::HashMap;
    const EXT_SNAT: u32 = 8;
    const XDP_PASS: u32 = 2;
    const XDP_TX: u32 = 3;
    let Some(mut loaded) = Loaded::new() else {
        return;
    };
    let (client, node, pod) = ([203, 0, 113, 10], [192, 168, 1, 1], [10, 244, 2, 10]);
    loaded.set_node(node);
    let remote = remote_endpoint(pod.into(), 8080);
    loaded.serve(
        frontend(node.into(), 30080, 6),
        EMPTY_DROP | EXT_SNAT,
        Some(remote),
    );

    // The SYN: XDP leaves it to tc, which opens the flow; the stack
    // forwards it and tc egress masquerades it and learns the next hop.
    let syn = ipv4(client, node, 6, &tcp(&client, &node, 40000, 30080, 0x02, 7));
    let (verdict, passed) = loaded.run_xdp(&syn);
    assert_eq!((verdict, &passed), (XDP_PASS, &syn));
    let (_, translated) = loaded.run("kpng_tc_ingress", &syn);
    let mut forwarded = translated.clone();
    forwarded[..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa]);
    let (_, out) = loaded.run("kpng_tc_egress", &forwarded);
    assert_eq!(&out[26..30], &node, "masqueraded by tc egress");
    let snat_port = [out[34], out[35]];

    // The next segment: XDP translates it as tc would, and sends it.
    let ack = ipv4(client, node, 6, &tcp(&client, &node, 40000, 30080, 0x10, 8));
    let (verdict, sent) = loaded.run_xdp(&ack);
    assert_eq!(verdict, XDP_TX, "{sent:?}");
    assert_eq!(&sent[..12], &forwarded[..12], "the learned next hop");
    assert_eq!(&sent[26..30], &node);
    assert_eq!(&sent[30..34], &pod);
    assert_eq!(&sent[34..36], &snat_port);
    assert_eq!(&sent[36..38], &8080u16.to_be_bytes());
    assert_eq!(inet_sum(&sent[14..34]), 0, "IPv4 header checksum");
    assert_eq!(
        inet_sum(&pseudo(&node, &pod, 6, &sent[34..])),
        0,
        "TCP checksum"
    );

    // The reply, once tc has sent one back (and learned the way to the
    // client), goes back to the client from the frontend by XDP.
    let reply = |flags| {
        let port = u16::from_be_bytes(snat_port);
        let mut r = ipv4(pod, node, 6, &tcp(&pod, &node, 8080, port, flags, 99));
        r[..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xa, 2, 0, 0, 0, 0, 0xc]);
        r
    };
    let (verdict, _) = loaded.run_xdp(&reply(0x12));
    assert_eq!(verdict, XDP_PASS, "no way to the client learned yet");
    let (_, back) = loaded.run("kpng_tc_ingress", &reply(0x12));
    let mut towards = back.clone();
    towards[..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xc, 2, 0, 0, 0, 0, 0xa]);
    let (_, out) = loaded.run("kpng_tc_egress", &towards);
    assert_eq!(&out[26..30], &node, "from the frontend");
    let (verdict, sent) = loaded.run_xdp(&reply(0x10));
    assert_eq!(verdict, XDP_TX, "{sent:?}");
    assert_eq!(&sent[..12], &towards[..12]);
    assert_eq!(&sent[26..30], &node);
    assert_eq!(&sent[34..36], &30080u16.to_be_bytes());
    assert_eq!(&sent[30..34], &client);
    assert_eq!(&sent[36..38], &40000u16.to_be_bytes());
    assert_eq!(inet_sum(&sent[14..34]), 0);
    assert_eq!(
        inet_sum(&pseudo(&node, &client, 6, &sent[34..])),
        0,
        "TCP checksum"
    );

    // A partial checksum (only the pseudo-header's sum, as a local stack
    // sends over a veth) with no mode known for the interface: passed.
    let mut partial = ipv4(client, node, 6, &tcp(&client, &node, 40000, 30080, 0x10, 9));
    let mut ph = Vec::new();
    ph.extend_from_slice(&client);
    ph.extend_from_slice(&node);
    ph.extend_from_slice(&[0, 6]);
    ph.extend_from_slice(&((partial.len() - 34) as u16).to_be_bytes());
    let field = !inet_sum(&ph);
    partial[50..52].copy_from_slice(&field.to_be_bytes());
    let (verdict, out) = loaded.run_xdp(&partial);
    assert_eq!((verdict, &out), (XDP_PASS, &partial), "left to tc");
    // In generic mode it is translated, its field updated as a partial
    // one: the pseudo-header sum of the new addresses.
    {
        let mut modes: HashMap<_, u32, u32> =
            HashMap::try_from(loaded.ebpf().map_mut("kpng_xdp_modes").expect("map")).expect("hash");
        modes.insert(1, 1, 0).expect("mode");
    }
    let (verdict, out) = loaded.run_xdp(&partial);
    assert_eq!(verdict, XDP_TX);
    let mut ph = Vec::new();
    ph.extend_from_slice(&node);
    ph.extend_from_slice(&pod);
    ph.extend_from_slice(&[0, 6]);
    ph.extend_from_slice(&((out.len() - 34) as u16).to_be_bytes());
    assert_eq!(&out[50..52], &(!inet_sum(&ph)).to_be_bytes());
}
