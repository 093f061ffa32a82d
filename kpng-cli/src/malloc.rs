//! The allocator, tuned for what this process is: mimalloc (the default
//! feature `mimalloc`), or glibc's.

use crate::args::{Action, Cli, Source};

/// Whether this process serves the ENLS (`to-api`): many streams at once,
/// where the allocator's defaults fit. Otherwise it is one node's proxy.
fn is_server(cli: &Cli) -> bool {
    match &cli.source {
        Source::File(args) => matches!(args.sink, Action::ToApi(_)),
        Source::Kube(args) => matches!(args.sink, Action::ToApi(_)),
        Source::Api(_) => false,
    }
}

/// Tunes glibc's malloc for what this process is. Variables set in the
/// environment (`MALLOC_ARENA_MAX`, `MALLOC_MMAP_THRESHOLD_`) still
/// decide. Figures at 10k Services × 10 endpoints, from `cargo bench -p
/// kpng --bench rss`.
///
/// - **Arenas.** glibc gives threads arenas of their own, up to 8 per
///   core, and memory freed into one is not reused by another. The API
///   server, whose streams run in parallel, gets one per core. A node's
///   proxy does its work one step at a time (ingest, then a sync), so it
///   gets one: a second arena held ~2 MiB of the dry run's peak (47 → 45
///   MiB), and before the limit 8 to 12 MiB were such slack.
/// - **The mmap threshold.** A node's proxy holds a few large buffers for
///   a moment (a full sync's batch, the lists' pages). glibc raises its
///   mmap threshold to the size of each such buffer freed, so the next
///   ones come from the heap and stay there: a fixed threshold of 256 KiB
///   returns them to the system when freed (the applied sync's peak 79–86
///   → 76 MiB). The API server, whose streams reuse such buffers, keeps
///   glibc's default.
pub(crate) fn tune(cli: &Cli) {
    #[cfg(feature = "mimalloc")]
    tune_mimalloc();
    tune_glibc(cli);
}

/// mimalloc's options, unless set in the environment (`MIMALLOC_…`).
/// Figures from `cargo bench -p kpng-cli --bench rss` (10k Services × 10;
/// glibc's: 48.7, 44.4, 37.8 and 52.4 MiB) and from a file of a million
/// endpoints (`cargo bench -p kpng-cli --bench scale`).
///
/// - **Purge at once** (`purge_delay` 0, was 1 s): memory freed goes back
///   to the system when freed, as glibc's tuning below does. The dry run
///   from the API peaked at 110 MiB with the defaults, 53.6 MiB with this
///   and the next.
/// - **No eager commit of arenas** (`arena_eager_commit` 0).
/// - **No transparent huge pages**: the crate's `no_thp` feature (no
///   `madvise` for them), and `PR_SET_THP_DISABLE` for a kernel that
///   makes them always: a 2 MiB page for a few KiB in use counts whole.
///
/// At a million endpoints these cost nothing measurable (7.2–8.3 s either
/// way) and save 37 MiB of the peak (541 → 504 MiB).
#[cfg(feature = "mimalloc")]
#[allow(unsafe_code)]
fn tune_mimalloc() {
    // `mi_option_t` values, the same in mimalloc 2 and 3.
    const ARENA_EAGER_COMMIT: i32 = 4;
    const PURGE_DELAY: i32 = 15;
    unsafe extern "C" {
        fn mi_option_set(option: i32, value: std::ffi::c_long);
    }
    for (option, env, value) in [
        (ARENA_EAGER_COMMIT, "MIMALLOC_ARENA_EAGER_COMMIT", 0),
        (PURGE_DELAY, "MIMALLOC_PURGE_DELAY", 0),
    ] {
        if std::env::var_os(env).is_none() {
            // SAFETY: sets one of mimalloc's options (it links
            // `mi_option_set`); called before the runtime starts threads.
            unsafe { mi_option_set(option, value) };
        }
    }
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: a process-wide flag for the memory mapped from now on;
        // no pointer is passed. Failure (an old kernel) changes nothing.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn tune_glibc(cli: &Cli) {
    let server = is_server(cli);
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        let arenas = if server {
            std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
        } else {
            1
        };
        // SAFETY: mallopt sets one allocator parameter; it is called
        // before the runtime starts any thread.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, i32::try_from(arenas).unwrap_or(i32::MAX));
        }
    }
    if !server && std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // SAFETY: as above.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_glibc(_: &Cli) {}
