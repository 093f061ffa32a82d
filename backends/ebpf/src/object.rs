//! The BPF object the backend loads: `bpf/kpng_sock.c`, built by clang
//! and checked in, so that building the crate needs no BPF toolchain.
//!
//! The source has a file per job: `kpng_cgroup.c`, the socket programs;
//! `kpng_tc.c`, the tc programs; `kpng_common.h`, the records, maps and
//! helpers both use. They are one object, because the two kinds of
//! programs share maps (the endpoint pages, affinity, the counters) that
//! the backend loads, pins under one directory named by the object's
//! digest, writes and adopts after a restart as one: `kpng_sock.c` is the
//! one compilation unit, which includes the parts.
//!
//! The build is deterministic (no paths, no time stamps in the object):
//! `tests/object.rs` runs [`CLANG_ARGS`] in the `bpf` directory and
//! compares the result with [`OBJECT`] byte for byte, as CI does on every
//! run. After changing the C source, rebuild the object with
//! `KPNG_BLESS=1 cargo test -p kpng-backend-ebpf --test object`.

/// The compiled programs and maps (an ELF object for the `bpf` target).
pub static OBJECT: &[u8] = aya::include_bytes_aligned!("../bpf/kpng_sock.o");

/// The C source the object is built from (the compilation unit; it
/// includes [`SOURCE_PARTS`]).
pub const SOURCE: &str = include_str!("../bpf/kpng_sock.c");

/// The files `SOURCE` includes, in the crate's `bpf` directory: the
/// shared definitions, the socket programs, the tc programs.
pub const SOURCE_PARTS: [&str; 3] = ["kpng_common.h", "kpng_cgroup.c", "kpng_tc.c"];

/// The file names, in the crate's `bpf` directory.
pub const SOURCE_FILE: &str = "kpng_sock.c";
/// See [`SOURCE_FILE`].
pub const OBJECT_FILE: &str = "kpng_sock.o";

/// clang's arguments, run in the `bpf` directory, before the output
/// file's name (Debian's clang 14, with libbpf's headers from
/// `libbpf-dev`). `-fdebug-compilation-dir=.` keeps the checkout's path
/// out of the debug info, and so out of the object. `-mcpu=v3` (kernels
/// from 5.1) for atomic fetch-and-add: round robin's turn counter.
pub const CLANG_ARGS: &[&str] = &[
    "-O2",
    "-g",
    "-target",
    "bpf",
    "-mcpu=v3",
    "-I/usr/include/x86_64-linux-gnu",
    "-Wall",
    "-Werror",
    "-fdebug-compilation-dir=.",
    "-c",
    SOURCE_FILE,
    "-o",
];

/// The second object, `bpf/kpng_end.c`: the socket iterators that end
/// sockets whose endpoint left their Service, connected UDP sockets
/// (`iter/udp`) and TCP connections (`iter/tcp`; see `src/sockets.rs`;
/// an object of its own for its license, which the kernel checks before
/// a program may call a kfunc). Built and checked as [`OBJECT`] is, with
/// [`END_CLANG_ARGS`].
pub static END_OBJECT: &[u8] = aya::include_bytes_aligned!("../bpf/kpng_end.o");

/// The C source [`END_OBJECT`] is built from.
pub const END_SOURCE: &str = include_str!("../bpf/kpng_end.c");

/// See [`SOURCE_FILE`].
pub const END_SOURCE_FILE: &str = "kpng_end.c";
/// See [`SOURCE_FILE`].
pub const END_OBJECT_FILE: &str = "kpng_end.o";

/// [`CLANG_ARGS`] for [`END_SOURCE_FILE`].
pub const END_CLANG_ARGS: &[&str] = &[
    "-O2",
    "-g",
    "-target",
    "bpf",
    "-I/usr/include/x86_64-linux-gnu",
    "-Wall",
    "-Werror",
    "-fdebug-compilation-dir=.",
    "-c",
    END_SOURCE_FILE,
    "-o",
];

/// A short digest of the object (FNV-1a, 64 bits): the pins of one
/// object's maps and links live under a directory named by it, so that a
/// new object never opens an older one's maps.
pub fn digest() -> u64 {
    OBJECT.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The programs in the object, by function name, and where each attaches.
pub const PROGRAMS: [(&str, aya::programs::CgroupSockAddrAttachType); 8] = {
    use aya::programs::CgroupSockAddrAttachType as A;
    [
        ("kpng_connect4", A::Connect4),
        ("kpng_connect6", A::Connect6),
        ("kpng_sendmsg4", A::UDPSendMsg4),
        ("kpng_sendmsg6", A::UDPSendMsg6),
        ("kpng_recvmsg4", A::UDPRecvMsg4),
        ("kpng_recvmsg6", A::UDPRecvMsg6),
        ("kpng_getpeername4", A::GetPeerName4),
        ("kpng_getpeername6", A::GetPeerName6),
    ]
};
