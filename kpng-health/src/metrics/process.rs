//! The process collector: `process_*` metrics read from `/proc/self`.

/// The process collector's metrics, read from `/proc/self` at each scrape
/// (as Prometheus' Go client reads them for kube-proxy).
#[derive(Debug)]
pub(super) struct Process;

/// What `/proc` says of this process.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ProcessStats {
    pub(crate) cpu_seconds: f64,
    pub(crate) resident_bytes: i64,
    pub(crate) virtual_bytes: i64,
    pub(crate) open_fds: i64,
    pub(crate) max_fds: i64,
    pub(crate) start_time_seconds: f64,
}

/// The kernel's clock ticks a second in `/proc` (`USER_HZ`, 100 on every
/// Linux architecture kpng builds for).
const USER_HZ: f64 = 100.0;

impl ProcessStats {
    /// Reads `/proc/self`; a field that cannot be read is 0.
    pub(crate) fn read() -> Self {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let boot = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count);
        Self::parse(&stat, &status, &limits, &boot, open_fds)
    }

    pub(crate) fn parse(stat: &str, status: &str, limits: &str, boot: &str, fds: usize) -> Self {
        // After the command's `(name)`, which may hold spaces: field 3 on.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        let field = |n: usize| -> f64 {
            fields
                .get(n - 3)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let kib = |name: &str| -> i64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|n| n.parse::<i64>().ok())
                .map_or(0, |k| k * 1024)
        };
        let max_fds = limits
            .lines()
            .find_map(|l| l.strip_prefix("Max open files"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|n| n.parse::<i64>().ok())
            .unwrap_or(0);
        let btime = boot
            .lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        Self {
            cpu_seconds: (field(14) + field(15)) / USER_HZ,
            resident_bytes: kib("VmRSS:"),
            virtual_bytes: kib("VmSize:"),
            open_fds: i64::try_from(fds).unwrap_or(i64::MAX),
            max_fds,
            start_time_seconds: btime + field(22) / USER_HZ,
        }
    }
}

impl prometheus_client::collector::Collector for Process {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let p = ProcessStats::read();
        let cpu = ConstCounter::new(p.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        for (name, help, value) in [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                p.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                p.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                p.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                p.max_fds,
            ),
        ] {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        let start = ConstGauge::new(p.start_time_seconds);
        start.encode(encoder.encode_descriptor(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            None,
            start.metric_type(),
        )?)?;
        Ok(())
    }
}
