//! glibc's allocator, tuned for what this process is.

use crate::args::{Cli, Sink, Source};

/// Whether this process serves the ENLS (`to-api`): many streams at once,
/// where the allocator's defaults fit. Otherwise it is one node's proxy.
fn is_server(cli: &Cli) -> bool {
    match &cli.source {
        Source::File(args) => matches!(args.sink, Sink::ToApi(_)),
        Source::Kube(args) => matches!(args.sink, Sink::ToApi(_)),
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
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub(crate) fn tune(cli: &Cli) {
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
pub(crate) fn tune(_: &Cli) {}
