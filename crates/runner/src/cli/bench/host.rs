//! The machine a benchmark ran on, and the process's peak resident memory.

use serde::Serialize;

/// A description of the machine.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Operating system (`linux`, `macos`, ...).
    pub os: &'static str,
    /// CPU architecture (`x86_64`, `aarch64`, ...).
    pub arch: &'static str,
    /// Logical CPUs available to this process.
    pub cpus: Option<usize>,
    /// The CPU model name, where the OS tells it (Linux: `/proc/cpuinfo`).
    pub cpu_model: Option<String>,
}

impl Machine {
    /// This machine.
    pub fn this() -> Self {
        Self {
            os: std::env::consts::OS,
            arch: std::env::consts::ARCH,
            cpus: std::thread::available_parallelism().ok().map(usize::from),
            cpu_model: cpu_model(),
        }
    }
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// Peak resident set size of this process in bytes (Linux: `VmHWM` of `/proc/self/status`);
/// `None` where unavailable.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_hwm(&status)
}

/// `VmHWM:   1234 kB` → bytes.
fn parse_vm_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let mut fields = line["VmHWM:".len()..].split_whitespace();
    let value: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") => value.checked_mul(1024),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vm_hwm() {
        let status = "Name:\tmtp\nVmPeak:\t  999 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(2048 * 1024));
        assert_eq!(parse_vm_hwm("VmHWM: lots"), None);
        assert_eq!(parse_vm_hwm("VmRSS: 1 kB"), None);
    }
}
