//! The one way kpng runs a child process (`iptables-save`,
//! `iptables-restore`, `conntrack`): with a timeout, its pipes served on
//! threads of their own, and tied to kpng's life.
//!
//! - **A timeout on every run.** A child that runs longer is killed. The
//!   kernel applies an nf_tables or iptables-restore transaction whole or
//!   not at all, so a killed run changed nothing.
//! - **Pipes on threads.** Input is fed, and stdout and stderr drained,
//!   concurrently, so a child blocked writing one pipe never deadlocks
//!   with kpng blocked writing another.
//! - **It dies with kpng.** Each child asks the kernel for SIGKILL when
//!   the thread that started it ends (`PR_SET_PDEATHSIG`), and [`Process::run`]
//!   keeps that thread waiting until the child is done. So when kpng is
//!   killed in the middle of a sync, its `iptables-restore` child cannot
//!   go on and commit the old batch after a restarted kpng committed a
//!   newer one.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use kpng_netfilter::process::Process;
//!
//! let out = Process::new(["sh", "-c", "cat; echo done >&2"])
//!     .input(b"hello")
//!     .timeout(Duration::from_secs(5))
//!     .run()?;
//! assert_eq!(out.stdout, b"hello");
//! assert_eq!(out.stderr.trim(), "done");
//! # Ok::<(), kpng_netfilter::Error>(())
//! ```

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::Error;

/// The default timeout of a run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// A child process to run: see the [module docs](self).
#[derive(Clone, Debug)]
#[must_use]
pub struct Process<'a> {
    argv: Vec<String>,
    input: Option<Vec<&'a [u8]>>,
    timeout: Duration,
    keep_stdout: bool,
}

/// What a successful run printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Output {
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// Its standard error, as text.
    pub stderr: String,
}

impl<'a> Process<'a> {
    /// The program and its arguments.
    pub fn new<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> Self {
        Self {
            argv: argv.into_iter().map(Into::into).collect(),
            input: None,
            timeout: DEFAULT_TIMEOUT,
            keep_stdout: true,
        }
    }

    /// More arguments.
    pub fn args<S: Into<String>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.argv.extend(args.into_iter().map(Into::into));
        self
    }

    /// What to write to its standard input (else it reads nothing).
    pub fn input(mut self, input: &'a [u8]) -> Self {
        self.input = Some(vec![input]);
        self
    }

    /// What to write to its standard input, in parts written one after
    /// the other (no copy of them is made).
    pub fn input_parts(mut self, parts: Vec<&'a [u8]>) -> Self {
        self.input = Some(parts);
        self
    }

    /// Reads its standard output to the end but keeps none of it
    /// ([`Output::stdout`] stays empty): for output nobody needs that could
    /// be large.
    pub fn discard_stdout(mut self) -> Self {
        self.keep_stdout = false;
        self
    }

    /// How long it may run before it is killed.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The command line, for messages.
    pub fn command_line(&self) -> String {
        self.argv.join(" ")
    }

    /// Runs it to its end; blocks the calling thread meanwhile.
    ///
    /// # Errors
    /// [`Error::Spawn`] when it cannot start, [`Error::Timeout`] when it
    /// was killed for running too long, [`Error::Command`] with what it
    /// printed to stderr when it failed.
    pub fn run(self) -> Result<Output, Error> {
        let name = self.command_line();
        let spawn_error = |source| Error::Spawn {
            command: name.clone(),
            source,
        };
        let Some((program, args)) = self.argv.split_first() else {
            return Err(spawn_error(std::io::Error::other("empty command")));
        };
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(if self.input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_parent(&mut command);
        // Its own process group: a timeout kills what it started too (a
        // wrapper's children would otherwise hold its pipes open).
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command.spawn().map_err(spawn_error)?;
        let group = i32::try_from(child.id())
            .ok()
            .map(nix::unistd::Pid::from_raw);
        // Kills what is left of the child's process group.
        let kill_group = || {
            if let Some(group) = group {
                let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            }
        };
        let (stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let deadline = Instant::now() + self.timeout;
        // Readers own their pipes on threads of their own, so that a pipe
        // something else still holds open cannot keep `run` past its
        // deadline: their results are awaited until then, no longer.
        let out = read_on_a_thread(stdout, self.keep_stdout);
        let err = read_on_a_thread(stderr, true);
        let timed_out = || Error::Timeout {
            command: name.clone(),
            seconds: self.timeout.as_secs(),
        };
        let (status, wrote) = std::thread::scope(|scope| {
            let writer = match (stdin, self.input.as_deref()) {
                (Some(mut stdin), Some(parts)) => Some(
                    scope.spawn(move || parts.iter().try_for_each(|part| stdin.write_all(part))),
                ),
                _ => None,
            };
            let status = loop {
                match child.try_wait() {
                    Ok(Some(status)) => break Ok(status),
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Ok(None) => break Err(timed_out()),
                    Err(e) => break Err(spawn_error(e)),
                }
            };
            if status.is_err() {
                let _ = child.kill();
                let _ = child.wait();
            }
            // Whatever the child started and left behind goes too: it could
            // hold the pipes (and block the writer) otherwise.
            kill_group();
            let wrote = writer.map(|w| w.join());
            (status, wrote)
        });
        let status = status?;
        let remaining = || {
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_secs(1))
        };
        let stdout = out.recv_timeout(remaining()).map_err(|_| timed_out())?;
        let stderr =
            String::from_utf8_lossy(&err.recv_timeout(remaining()).map_err(|_| timed_out())?)
                .into_owned();
        if !status.success() {
            return Err(Error::Command {
                command: name.clone(),
                status: status.to_string(),
                code: status.code(),
                stderr: stderr.trim().to_owned(),
            });
        }
        match wrote {
            // It succeeded without reading all it was given.
            Some(Ok(Err(e))) => Err(Error::Command {
                command: name.clone(),
                status: status.to_string(),
                code: status.code(),
                stderr: format!(
                    "it exited before reading all of its input ({e}); {}",
                    stderr.trim()
                ),
            }),
            _ => Ok(Output { stdout, stderr }),
        }
    }
}

/// Reads `pipe` to its end on a thread of its own; the bytes (none unless
/// `keep`) arrive on the returned channel.
fn read_on_a_thread<R: Read + Send + 'static>(
    pipe: Option<R>,
    keep: bool,
) -> std::sync::mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            if keep {
                let _ = pipe.read_to_end(&mut bytes);
            } else {
                let _ = std::io::copy(&mut pipe, &mut std::io::sink());
            }
        }
        let _ = tx.send(bytes);
    });
    rx
}

/// Asks the kernel to SIGKILL the child when the thread that spawns it
/// ends; the child exits at once if that thread is already gone.
#[allow(unsafe_code)]
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the hook runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: prctl, getppid and _exit are,
    // and it allocates nothing.
    unsafe {
        let parent = libc::getpid();
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before the prctl: nobody would kill us.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_and_failures_are_reported() {
        let out = Process::new(["sh", "-c", "echo out; echo err >&2"])
            .run()
            .expect("runs");
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, "err\n");
        let error = Process::new(["sh", "-c", "echo bad input >&2; exit 3"])
            .run()
            .expect_err("fails");
        assert_eq!(
            error.to_string(),
            "sh -c echo bad input >&2; exit 3 failed (exit status: 3): bad input"
        );
        let error = Process::new(["/nonexistent/tool"])
            .run()
            .expect_err("no such");
        assert!(matches!(error, Error::Spawn { .. }), "{error}");
    }

    #[test]
    fn a_run_longer_than_its_timeout_is_killed() {
        let start = Instant::now();
        // A shell whose own child holds the pipes: both are killed.
        let error = Process::new(["sh", "-c", "sleep 30; true"])
            .timeout(Duration::from_millis(200))
            .run()
            .expect_err("killed");
        assert!(matches!(error, Error::Timeout { .. }), "{error}");
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_leftover_grandchild_does_not_hold_a_run_open() {
        // The child exits at once; what it started would keep stdout open
        // for 30 s: it is killed with the child's group.
        let start = Instant::now();
        let out = Process::new(["sh", "-c", "sleep 30 & echo done"])
            .timeout(Duration::from_secs(5))
            .run()
            .expect("runs");
        assert_eq!(out.stdout, b"done\n");
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn input_the_child_did_not_read_is_a_failure() {
        let input = vec![b'x'; 4 << 20];
        let error = Process::new(["sh", "-c", "exit 0"])
            .input(&input)
            .run()
            .expect_err("input not read");
        assert!(
            error
                .to_string()
                .contains("before reading all of its input"),
            "{error}"
        );
    }

    #[test]
    fn input_in_parts_and_discarded_output() {
        let out = Process::new(["cat"])
            .input_parts(vec![b"one ", b"two"])
            .run()
            .expect("runs");
        assert_eq!(out.stdout, b"one two");
        let big = vec![b'x'; 4 << 20];
        let out = Process::new(["sh", "-c", "cat; echo done >&2"])
            .input(&big)
            .discard_stdout()
            .run()
            .expect("runs");
        assert!(out.stdout.is_empty());
        assert_eq!(out.stderr.trim(), "done");
    }

    #[test]
    fn large_input_and_output_do_not_deadlock() {
        // More than any pipe buffer each way, at the same time.
        let input = vec![b'x'; 4 << 20];
        let out = Process::new(["cat"]).input(&input).run().expect("runs");
        assert_eq!(out.stdout.len(), input.len());
    }

    #[test]
    fn a_child_dies_with_the_thread_that_started_it() {
        // A thread starts a child that would outlive it by far, and is
        // killed (here: ends) while the child runs.
        let pid_file = std::env::temp_dir().join(format!("kpngnf-pid-{}", std::process::id()));
        let path = pid_file.display().to_string();
        let started = std::thread::spawn(move || {
            let mut command = Command::new("sh");
            command.args(["-c", &format!("echo $$ > {path}; exec sleep 30")]);
            die_with_parent(&mut command);
            // The thread ends at once, without waiting.
            command.spawn().expect("spawns")
        });
        let mut child = started.join().expect("thread");
        let status = child.wait().expect("waits");
        assert!(!status.success(), "killed, not finished: {status}");
        let _ = std::fs::remove_file(&pid_file);
    }
}
