//! The bpf(2) commands aya does not offer: a link's program switched
//! in one step (`BPF_LINK_UPDATE`), and many elements of a map written in
//! one call (`BPF_MAP_UPDATE_BATCH`), an iterator's link and runs
//! (`BPF_LINK_CREATE`, `BPF_ITER_CREATE`), and setns(2) for them.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

const BPF_OBJ_GET: libc::c_long = 7;
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
const BPF_LINK_UPDATE: libc::c_long = 29;

/// `union bpf_attr` as the commands here read it: 72 bytes cover them
/// (the kernel checks that what it does not read is zero).
#[repr(C, align(8))]
#[derive(Default)]
struct Attr([u64; 9]);

fn bpf(cmd: libc::c_long, attr: &mut Attr) -> std::io::Result<libc::c_long> {
    // SAFETY: bpf(2) reads (and for some commands writes) at most
    // `size_of::<Attr>()` bytes of `attr`, which lives across the call;
    // the pointers inside it point at memory the callers keep alive.
    #[allow(unsafe_code)]
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_mut(attr),
            std::mem::size_of::<Attr>(),
        )
    };
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Opens the object (a link) pinned at `path`.
pub(crate) fn obj_get(path: &Path) -> std::io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let name = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut attr = Attr::default();
    // struct { __u64 pathname; __u32 bpf_fd; __u32 file_flags; ... }
    attr.0[0] = name.as_ptr() as u64;
    let fd = bpf(BPF_OBJ_GET, &mut attr)?;
    let fd = i32::try_from(fd).map_err(|_| std::io::Error::other("fd out of range"))?;
    // SAFETY: the kernel returned a new file descriptor, ours alone.
    #[allow(unsafe_code)]
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Switches link `link` to program `program` (of the same type and
/// attach point), atomically: a run sees the old program or the new.
pub(crate) fn link_update(link: BorrowedFd<'_>, program: BorrowedFd<'_>) -> std::io::Result<()> {
    let mut attr = Attr::default();
    // struct { __u32 link_fd; __u32 new_prog_fd; __u32 flags; __u32 old_prog_fd; }
    let (link, program) = (link.as_raw_fd() as u32, program.as_raw_fd() as u32);
    attr.0[0] = u64::from(link) | (u64::from(program) << 32);
    bpf(BPF_LINK_UPDATE, &mut attr).map(|_| ())
}

/// Writes `count` elements to map `map` in one call: `keys` and `values`
/// are the elements' keys and values back to back. On failure, returns
/// how many were written before it.
pub(crate) fn map_update_batch(
    map: BorrowedFd<'_>,
    keys: &[u8],
    values: &[u8],
    count: usize,
) -> Result<(), (usize, std::io::Error)> {
    let mut done = 0usize;
    let (key_size, value_size) = (keys.len() / count.max(1), values.len() / count.max(1));
    while done < count {
        let mut attr = Attr::default();
        // struct { __u64 in_batch; __u64 out_batch; __u64 keys;
        // __u64 values; __u32 count; __u32 map_fd; __u64 elem_flags;
        // __u64 flags; }
        let left = u32::try_from(count - done).unwrap_or(u32::MAX);
        attr.0[2] = keys[done * key_size..].as_ptr() as u64;
        attr.0[3] = values[done * value_size..].as_ptr() as u64;
        attr.0[4] = u64::from(left) | (u64::from(map.as_raw_fd() as u32) << 32);
        let result = bpf(BPF_MAP_UPDATE_BATCH, &mut attr);
        // The kernel writes back how many it wrote.
        let wrote = (attr.0[4] & 0xffff_ffff) as usize;
        match result {
            Ok(_) => done += if wrote == 0 { left as usize } else { wrote },
            Err(e) => return Err((done + wrote, e)),
        }
    }
    Ok(())
}

const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_ITER_CREATE: libc::c_long = 33;
/// `BPF_TRACE_ITER`, the attach type of iterator programs.
const BPF_TRACE_ITER: u32 = 28;

fn owned(fd: libc::c_long) -> std::io::Result<OwnedFd> {
    let fd = i32::try_from(fd).map_err(|_| std::io::Error::other("fd out of range"))?;
    // SAFETY: the kernel returned a new file descriptor, ours alone.
    #[allow(unsafe_code)]
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A link of iterator program `program` (aya's `Iter` link does not lend
/// its descriptor, and each network namespace needs an iterator made from
/// it).
pub(crate) fn iter_link(program: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    let mut attr = Attr::default();
    // struct { __u32 prog_fd; __u32 target_fd; __u32 attach_type;
    // __u32 flags; __u64 iter_info; __u32 iter_info_len; }
    attr.0[0] = u64::from(program.as_raw_fd() as u32);
    attr.0[1] = u64::from(BPF_TRACE_ITER);
    owned(bpf(BPF_LINK_CREATE, &mut attr)?)
}

/// A new run of the iterator of link `link`: reading it to its end runs
/// the program over the sockets of the calling thread's network
/// namespace (the one current when this is called).
pub(crate) fn iter_create(link: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    let mut attr = Attr::default();
    // struct { __u32 link_fd; __u32 flags; }
    attr.0[0] = u64::from(link.as_raw_fd() as u32);
    owned(bpf(BPF_ITER_CREATE, &mut attr)?)
}

/// Moves the calling thread into network namespace `ns` (a
/// `/proc/PID/ns/net` file).
pub(crate) fn enter_netns(ns: BorrowedFd<'_>) -> std::io::Result<()> {
    // SAFETY: setns(2) takes a descriptor and a flag; it changes only the
    // calling thread's namespace.
    #[allow(unsafe_code)]
    let ret = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `SO_NETNS_COOKIE` (Linux 5.14): a socket's network namespace's cookie,
/// as `bpf_get_netns_cookie` gives it to the programs.
const SO_NETNS_COOKIE: libc::c_int = 71;

/// The cookie of the network namespace at `netns` (`/run/netns/NAME`), or
/// of the calling thread's when `None`: read from a socket made there (on
/// a thread of its own when the namespace is another).
pub(crate) fn netns_cookie(netns: Option<&Path>) -> std::io::Result<u64> {
    fn here() -> std::io::Result<u64> {
        // SAFETY: socket(2) makes a descriptor, owned at once.
        #[allow(unsafe_code)]
        let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor no one else owns.
        #[allow(unsafe_code)]
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut cookie: u64 = 0;
        let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
        // SAFETY: getsockopt(2) writes at most `len` bytes to `cookie`,
        // which outlives the call.
        #[allow(unsafe_code)]
        let ret = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_NETNS_COOKIE,
                std::ptr::from_mut(&mut cookie).cast(),
                &mut len,
            )
        };
        if ret < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(cookie)
        }
    }
    let Some(path) = netns else {
        return here();
    };
    let ns = std::fs::File::open(path)?;
    std::thread::scope(|s| {
        s.spawn(|| {
            use std::os::fd::AsFd;
            enter_netns(ns.as_fd())?;
            here()
        })
        .join()
        .unwrap_or_else(|_| {
            Err(std::io::Error::other(
                "the thread asking the cookie panicked",
            ))
        })
    })
}
