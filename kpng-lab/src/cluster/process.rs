//! The process runner: a `kpng` process of the cluster, its log read line
//! by line with each line's time, and the revisions its lines name.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// One line of a process's log, with the time its log line gives.
#[derive(Clone, Debug)]
pub struct LogLine {
    /// The line's timestamp (`tracing`'s RFC 3339, UTC), if it has one.
    pub at: Option<SystemTime>,
    /// The whole line.
    pub text: String,
}

/// A `kpng` process of the cluster, its standard error read line by line.
pub struct Process {
    child: Child,
    log: Arc<Mutex<Vec<LogLine>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Process {
    /// Starts `command` (a `kpng` run) with the lab's log filter
    /// (`kpng=info,warn`, or `KPNG_LAB_LOG`'s), its standard error read
    /// line by line.
    ///
    /// # Panics
    /// When it cannot be started.
    pub fn spawn(mut command: Command) -> Self {
        command
            .env(
                "RUST_LOG",
                std::env::var("KPNG_LAB_LOG").unwrap_or_else(|_| "kpng=info,warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn kpng");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("piped stderr");
        let lines = Arc::clone(&log);
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(text) = line else { break };
                let at = text.split_whitespace().next().and_then(parse_rfc3339);
                lines.lock().expect("log lock").push(LogLine { at, text });
            }
        });
        Process {
            child,
            log,
            reader: Some(reader),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The lines logged so far.
    pub fn log(&self) -> Vec<LogLine> {
        self.log.lock().expect("log lock").clone()
    }

    /// The lines logged so far, as text (for failure messages).
    pub fn log_text(&self) -> String {
        self.log()
            .iter()
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Each `synced revision=R` line (an agent's round in the kernel):
    /// its time and revision.
    pub fn synced(&self) -> Vec<(SystemTime, u64)> {
        self.revisions(" synced ")
    }

    /// Each `manifest reloaded … revision=Some(R)` line (the server's
    /// file source): its time and revision.
    pub fn reloads(&self) -> Vec<(SystemTime, u64)> {
        self.revisions("manifest reloaded")
    }

    fn revisions(&self, marker: &str) -> Vec<(SystemTime, u64)> {
        let log = self.log.lock().expect("log lock");
        log.iter()
            .filter(|l| l.text.contains(marker))
            .filter_map(|l| Some((l.at?, revision_field(&l.text)?)))
            .collect()
    }

    /// Whether it has exited (and how).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `revision=N` (or `revision=Some(N)`) field of a log line.
fn revision_field(text: &str) -> Option<u64> {
    let rest = &text[text.find("revision=")? + "revision=".len()..];
    let rest = rest.strip_prefix("Some(").unwrap_or(rest);
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// `2026-11-26T18:48:26.733793Z` as a time.
fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':');
    let (h, min) = (
        t.next()?.parse::<u64>().ok()?,
        t.next()?.parse::<u64>().ok()?,
    );
    let secs: f64 = t.next()?.parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    let whole = days * 86_400 + h * 3600 + min * 60;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(whole) + Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::{parse_rfc3339, revision_field};
    use std::time::{Duration, SystemTime};

    #[test]
    fn log_timestamps_and_revisions_are_read() {
        let at = parse_rfc3339("1970-01-02T00:00:01.500000Z").expect("a time");
        assert_eq!(
            at,
            SystemTime::UNIX_EPOCH + Duration::from_millis(86_401_500)
        );
        let at = parse_rfc3339("2026-11-26T18:48:26.733793Z").expect("a time");
        let secs = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("after")
            .as_secs();
        assert_eq!(secs, 1_795_718_906);
        assert_eq!(
            revision_field("… INFO kpng_sink::report: synced revision=12 full=true commands=3"),
            Some(12)
        );
        assert_eq!(
            revision_field("… manifest reloaded path=/tmp/x revision=Some(7)"),
            Some(7)
        );
        assert_eq!(revision_field("… manifest reloaded revision=None"), None);
    }
}
