//! What the tests and the bench that run the tc programs on packets
//! (`BPF_PROG_TEST_RUN`) share: the object loaded in a test bpffs, maps
//! written by hand, packets made byte by byte.
#![allow(dead_code)]

use aya::maps::HashMap;
use aya::programs::{SchedClassifier, TestRun, TestRunOptions};
use kpng_backend_ebpf::object::OBJECT;
use kpng_testkit::bpf::{BpfFs, unavailable};

pub(crate) const TC_ACT_OK: u32 = 0;
pub(crate) const TC_ACT_REDIRECT: u32 = 7;
pub(crate) const EMPTY_REJECT: u32 = 1;
pub(crate) const EMPTY_DROP: u32 = 2;

/// The object loaded with its maps pinned in a test bpffs, and the two tc
/// programs loaded.
pub(crate) struct Loaded {
    ebpf: aya::Ebpf,
    _fs: BpfFs,
}

impl Loaded {
    pub(crate) fn new() -> Option<Self> {
        Self::with_object(OBJECT)
    }

    /// `object` instead of the backend's (a bench compares two).
    pub(crate) fn with_object(object: &[u8]) -> Option<Self> {
        if let Some(why) = unavailable() {
            eprintln!("SKIPPED: {why}");
            return None;
        }
        let fs = BpfFs::new("kpng-tc-run").expect("bpffs");
        let mut ebpf = aya::EbpfLoader::new()
            .default_map_pin_directory(&fs.path)
            .load(object)
            .expect("object");
        for name in ["kpng_tc_ingress", "kpng_tc_egress"] {
            let program: &mut SchedClassifier = ebpf
                .program_mut(name)
                .expect("program")
                .try_into()
                .expect("classifier");
            program.load().expect("verified");
        }
        let xdp: &mut aya::programs::Xdp = ebpf
            .program_mut("kpng_xdp")
            .expect("program")
            .try_into()
            .expect("xdp");
        xdp.load().expect("verified");
        Some(Self { ebpf, _fs: fs })
    }

    /// `kpng_node`: the node's IPv4 address, which masqueraded flows
    /// leave from.
    pub(crate) fn set_node(&mut self, ip: [u8; 4]) {
        let mut nodes: aya::maps::Array<_, [u8; 20]> =
            aya::maps::Array::try_from(self.ebpf.map_mut("kpng_node").expect("map"))
                .expect("array");
        let mut me = [0u8; 20];
        me[..4].copy_from_slice(&ip);
        me[18] = 4;
        nodes.set(0, me, 0).expect("node");
    }

    /// The loaded object, to write its maps.
    pub(crate) fn ebpf(&mut self) -> &mut aya::Ebpf {
        &mut self.ebpf
    }

    /// A record for `frontend` leading to set 1 with `flags`, and set 1
    /// holding `endpoint` (on this node) when given.
    pub(crate) fn serve(&mut self, frontend: [u8; 20], flags: u32, endpoint: Option<[u8; 20]>) {
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

    fn classifier(&self, name: &str) -> &SchedClassifier {
        self.ebpf
            .program(name)
            .expect("program")
            .try_into()
            .expect("classifier")
    }

    /// Runs program `name` on `packet` once: the kernel's result and the
    /// packet after.
    fn test_run(&self, name: &str, packet: &[u8]) -> (aya::programs::TestRunResult, Vec<u8>) {
        let mut out = vec![0u8; 4096];
        let opts = TestRunOptions {
            data_in: Some(packet),
            data_out: Some(&mut out),
            ..TestRunOptions::new()
        };
        let result = self.classifier(name).test_run(opts).expect("test run");
        out.truncate(result.data_size_out as usize);
        (result, out)
    }

    /// Runs the XDP program on `packet`: its verdict and the packet after.
    pub(crate) fn run_xdp(&self, packet: &[u8]) -> (u32, Vec<u8>) {
        let mut out = vec![0u8; 4096];
        let opts = TestRunOptions {
            data_in: Some(packet),
            data_out: Some(&mut out),
            ..TestRunOptions::new()
        };
        let program: &aya::programs::Xdp = self
            .ebpf
            .program("kpng_xdp")
            .expect("program")
            .try_into()
            .expect("xdp");
        let result = program.test_run(opts).expect("test run");
        out.truncate(result.data_size_out as usize);
        (result.return_value, out)
    }

    /// Runs program `name` on `packet`: its verdict and the packet after.
    pub(crate) fn run(&self, name: &str, packet: &[u8]) -> (u32, Vec<u8>) {
        let (result, out) = self.test_run(name, packet);
        (result.return_value, out)
    }

    /// How many instructions the verifier walked to load program `name`
    /// (its limit: 1,000,000).
    pub(crate) fn verified(&self, name: &str) -> Option<u32> {
        self.classifier(name)
            .info()
            .ok()?
            .verified_instruction_count()
    }

    /// Runs program `name` once on `packet`: the kernel's time for the run.
    pub(crate) fn time(&self, name: &str, packet: &[u8]) -> std::time::Duration {
        self.test_run(name, packet).0.duration
    }
}

/// `struct frontend`: address (16 bytes), port, protocol, family.
pub(crate) fn frontend(ip: std::net::IpAddr, port: u16, proto: u8) -> [u8; 20] {
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
pub(crate) fn endpoint(ip: std::net::IpAddr, port: u16) -> [u8; 20] {
    let mut out = frontend(ip, port, 0);
    out[18] = out[19]; // family
    out[19] = 1; // ENDPOINT_LOCAL
    out
}

/// `struct endpoint` on another node.
pub(crate) fn remote_endpoint(ip: std::net::IpAddr, port: u16) -> [u8; 20] {
    let mut out = endpoint(ip, port);
    out[19] = 0;
    out
}

/// The Internet checksum of `bytes`, folded (0 when they hold a valid one).
pub(crate) fn inet_sum(bytes: &[u8]) -> u16 {
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
pub(crate) fn crc32c(bytes: &[u8]) -> u32 {
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
pub(crate) fn sctp_valid(sctp: &[u8]) -> bool {
    let stored = u32::from_le_bytes([sctp[8], sctp[9], sctp[10], sctp[11]]);
    let mut zeroed = sctp.to_vec();
    zeroed[8..12].fill(0);
    crc32c(&zeroed) == stored
}

pub(crate) const MACS: [u8; 12] = [2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];

/// An Ethernet frame of an IPv4 packet from `src` to `dst` carrying
/// `payload` of protocol `proto`, its header checksum set.
pub(crate) fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
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
pub(crate) fn ipv6(src: [u8; 16], dst: [u8; 16], proto: u8, payload: &[u8]) -> Vec<u8> {
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
pub(crate) fn sctp(sport: u16, dport: u16, init: bool) -> Vec<u8> {
    sctp_padded(sport, dport, init, 0)
}

/// [`sctp`] with `extra` bytes of padding chunks after the first (a
/// multiple of 4).
pub(crate) fn sctp_padded(sport: u16, dport: u16, init: bool, extra: u16) -> Vec<u8> {
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
    if extra >= 4 {
        // A PAD chunk (type 0x84) of `extra` bytes.
        out.extend_from_slice(&[0x84, 0]);
        out.extend_from_slice(&extra.to_be_bytes());
        out.extend((4..extra).map(|i| i as u8));
    }
    let crc = crc32c(&out);
    out[8..12].copy_from_slice(&crc.to_le_bytes());
    out
}
