//! Resident memory of a process, from `/proc/<pid>/status`, now or at its peak over a run.
//!
//! The kernel's own high-water mark (`VmHWM`) would do for one process, but the scale benchmark
//! restarts gateways, and a restart is a new process: [`PeakWatch`] samples every process it
//! is told of under a name and keeps the highest reading per name.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often [`PeakWatch`] reads. A gateway's memory moves with pages of work that take
/// milliseconds, and its high-water mark (`VmHWM`) is read too, so a peak between two
/// readings is still seen.
const SAMPLE_EVERY: Duration = Duration::from_millis(20);

/// Bytes in a MiB, for the reports.
pub const MIB: f64 = 1024.0 * 1024.0;

/// The process's resident set now (`VmRSS`) and at its highest so far (`VmHWM`), in bytes;
/// `None` if it is gone or `/proc` cannot tell.
pub fn resident(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some((
        status_field_kib(&status, "VmRSS:")? * 1024,
        status_field_kib(&status, "VmHWM:")? * 1024,
    ))
}

/// A `kB` field of `/proc/<pid>/status`.
fn status_field_kib(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with(field))?;
    line[field.len()..].split_whitespace().next()?.parse().ok()
}

type Peaks = BTreeMap<String, u64>;

/// The highest resident set each named process reached while watched.
pub struct PeakWatch {
    watched: Arc<Mutex<Vec<(String, u32)>>>,
    peaks: Arc<Mutex<Peaks>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PeakWatch {
    pub fn start() -> Self {
        let watched: Arc<Mutex<Vec<(String, u32)>>> = Arc::default();
        let peaks: Arc<Mutex<Peaks>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (watched, peaks, stop) = (watched.clone(), peaks.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let now = watched
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone();
                    for (name, pid) in now {
                        record(&peaks, &name, pid);
                    }
                    std::thread::sleep(SAMPLE_EVERY);
                }
            })
        };
        Self {
            watched,
            peaks,
            stop,
            thread: Some(thread),
        }
    }

    /// Watches `pid` under `name` from now on, in place of any process watched under it before
    /// (a restarted gateway keeps its name).
    pub fn watch(&self, name: &str, pid: Option<u32>) {
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        watched.retain(|(watched, _)| watched != name);
        if let Some(pid) = pid {
            watched.push((name.to_string(), pid));
        }
    }

    /// Takes a last reading of the process watched under `name` and stops watching it: called
    /// before the process is stopped, so a later process given the same pid is never counted.
    pub fn forget(&self, name: &str) {
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        for (_, pid) in watched.iter().filter(|(watched, _)| watched == name) {
            record(&self.peaks, name, *pid);
        }
        watched.retain(|(watched, _)| watched != name);
    }

    /// The highest reading under `name` so far, in bytes.
    pub fn peak(&self, name: &str) -> Option<u64> {
        self.peaks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .copied()
    }
}

/// Raises `name`'s peak to `pid`'s high-water mark, if `/proc` can tell it.
fn record(peaks: &Mutex<Peaks>, name: &str, pid: u32) {
    if let Some((_, high)) = resident(pid) {
        let mut peaks = peaks.lock().unwrap_or_else(PoisonError::into_inner);
        let peak = peaks.entry(name.to_string()).or_default();
        *peak = (*peak).max(high);
    }
}

impl Drop for PeakWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_in_kib() {
        let status = "Name:\tferry\nVmHWM:\t   30000 kB\nVmRSS:\t   14040 kB\n";
        assert_eq!(status_field_kib(status, "VmRSS:"), Some(14040));
        assert_eq!(status_field_kib(status, "VmHWM:"), Some(30000));
        assert_eq!(status_field_kib(status, "VmSwap:"), None);
    }

    #[test]
    fn this_process_has_a_resident_set() {
        let (now, high) = resident(std::process::id()).expect("/proc/self/status");
        assert!(now > 0 && high >= now);
    }
}
