//! The tc programs run by the kernel on packets made here
//! (`BPF_PROG_TEST_RUN`), their maps written by hand, the packets they
//! give back checked byte by byte: SCTP translated with its CRC32c kept
//! valid (a port change updates it), and REJECT's ICMP and ICMPv6 port
//! unreachable with valid checksums. (The lab's packets cross veths,
//! whose receivers may skip checksums: this checks them.) Run as root;
//! otherwise each test prints SKIPPED and passes.

use aya::maps::HashMap;
use aya::programs::{SchedClassifier, TestRun, TestRunOptions};
use kpng_backend_ebpf::object::OBJECT;
use kpng_testkit::bpf::{BpfFs, unavailable};

const TC_ACT_OK: u32 = 0;
const TC_ACT_REDIRECT: u32 = 7;
const EMPTY_REJECT: u32 = 1;
const EMPTY_DROP: u32 = 2;

/// The object loaded with its maps pinned in a test bpffs, and the two tc
/// programs loaded.
struct Loaded {
    ebpf: aya::Ebpf,
    _fs: BpfFs,
}

impl Loaded {
    fn new() -> Option<Self> {
        if let Some(why) = unavailable() {
            eprintln!("SKIPPED: {why}");
            return None;
        }
        let fs = BpfFs::new("kpng-tc-run").expect("bpffs");
        let mut ebpf = aya::EbpfLoader::new()
            .default_map_pin_directory(&fs.path)
            .load(OBJECT)
            .expect("object");
        for name in ["kpng_tc_ingress", "kpng_tc_egress"] {
            let program: &mut SchedClassifier = ebpf
                .program_mut(name)
                .expect("program")
                .try_into()
                .expect("classifier");
            program.load().expect("verified");
        }
        Some(Self { ebpf, _fs: fs })
    }

    /// A record for `frontend` leading to set 1 with `flags`, and set 1
    /// holding `endpoint` (on this node) when given.
    fn serve(&mut self, frontend: [u8; 20], flags: u32, endpoint: Option<[u8; 20]>) {
        let mut record = [0u8; 16];
        record[0..4].copy_from_slice(&1u32.to_ne_bytes());
        record[8..12].copy_from_slice(&flags.to_ne_bytes());
        let mut external: HashMap<_, [u8; 20], [u8; 16]> =
            HashMap::try_from(self.ebpf.map_mut("kpng_external").expect("map")).expect("hash");
        external.insert(frontend, record, 0).expect("record");
        let mut page = [0u8; 168];
        if let Some(endpoint) = endpoint {
            page[0..4].copy_from_slice(&1u32.to_ne_bytes());
            page[8..28].copy_from_slice(&endpoint);
        }
        let mut key = [0u8; 8];
        key[0..4].copy_from_slice(&1u32.to_ne_bytes());
        let mut slots: HashMap<_, [u8; 8], [u8; 168]> =
            HashMap::try_from(self.ebpf.map_mut("kpng_slots").expect("map")).expect("hash");
        slots.insert(key, page, 0).expect("slots");
    }

    /// Runs program `name` on `packet`: its verdict and the packet after.
    fn run(&self, name: &str, packet: &[u8]) -> (u32, Vec<u8>) {
        let program: &SchedClassifier = self
            .ebpf
            .program(name)
            .expect("program")
            .try_into()
            .expect("classifier");
        let mut out = vec![0u8; 512];
        let opts = TestRunOptions {
            data_in: Some(packet),
            data_out: Some(&mut out),
            ..TestRunOptions::new()
        };
        let result = program.test_run(opts).expect("test run");
        out.truncate(result.data_size_out as usize);
        (result.return_value, out)
    }
}

/// `struct frontend`: address (16 bytes), port, protocol, family.
fn frontend(ip: std::net::IpAddr, port: u16, proto: u8) -> [u8; 20] {
    let mut out = [0u8; 20];
    let family = match ip {
        std::net::IpAddr::V4(v4) => {
            out[..4].copy_from_slice(&v4.octets());
            4
        }
        std::net::IpAddr::V6(v6) => {
            out[..16].copy_from_slice(&v6.octets());
            6
        }
    };
    out[16..18].copy_from_slice(&port.to_be_bytes());
    out[18] = proto;
    out[19] = family;
    out
}

/// `struct endpoint` on this node.
fn endpoint(ip: std::net::IpAddr, port: u16) -> [u8; 20] {
    let mut out = frontend(ip, port, 0);
    out[18] = out[19]; // family
    out[19] = 1; // ENDPOINT_LOCAL
    out
}

/// The Internet checksum of `bytes`, folded (0 when they hold a valid one).
fn inet_sum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for pair in bytes.chunks(2) {
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// CRC32c, as SCTP computes it.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0x82F6_3B78 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

/// Whether an SCTP packet's CRC32c (stored little-endian) is right.
fn sctp_valid(sctp: &[u8]) -> bool {
    let stored = u32::from_le_bytes([sctp[8], sctp[9], sctp[10], sctp[11]]);
    let mut zeroed = sctp.to_vec();
    zeroed[8..12].fill(0);
    crc32c(&zeroed) == stored
}

const MACS: [u8; 12] = [2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];

/// An Ethernet frame of an IPv4 packet from `src` to `dst` carrying
/// `payload` of protocol `proto`, its header checksum set.
fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = MACS.to_vec();
    out.extend_from_slice(&[0x08, 0x00]);
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&(20 + payload.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 1, 0, 0, 64, proto, 0, 0]);
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let sum = inet_sum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    out.extend_from_slice(&ip);
    out.extend_from_slice(payload);
    out
}

/// An Ethernet frame of an IPv6 packet.
fn ipv6(src: [u8; 16], dst: [u8; 16], proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = MACS.to_vec();
    out.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    out.extend_from_slice(&[proto, 64]);
    out.extend_from_slice(&src);
    out.extend_from_slice(&dst);
    out.extend_from_slice(payload);
    out
}

/// An SCTP packet with one INIT chunk (or, with `init` false, a DATA
/// chunk), its CRC32c set.
fn sctp(sport: u16, dport: u16, init: bool) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&sport.to_be_bytes());
    out.extend_from_slice(&dport.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 7, 0, 0, 0, 0]);
    let chunk: &[u8] = if init {
        &[
            1, 0, 0, 20, 1, 2, 3, 4, 0, 1, 0, 0, 0, 10, 0, 10, 9, 9, 9, 9,
        ]
    } else {
        &[
            0, 3, 0, 20, 9, 9, 9, 9, 0, 1, 0, 0, 0, 0, 0, 0, b'h', b'e', b'l', b'o',
        ]
    };
    out.extend_from_slice(chunk);
    let crc = crc32c(&out);
    out[8..12].copy_from_slice(&crc.to_le_bytes());
    out
}

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
    for init in [true, false] {
        let packet = ipv4(client, vip, 132, &sctp(40000, 80, init));
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
