//! A CPU quota for a few processes: a cgroup of the benchmark's own with a share of a core, so
//! that one gateway is the slow machine of a run while the others have the rest of the box.
//!
//! cgroup v2 (`cpu.max`) where a v2 hierarchy has the cpu controller, else cgroup v1
//! (`cpu.cfs_quota_us`), as on this kind of machine, where v2 is mounted beside v1 with no
//! controllers. Either needs root. The group is made under the hierarchy's root and removed on
//! drop, after its processes are moved back to the root.

use std::path::{Path, PathBuf};

/// The quota's period: 4 ms, so a quarter of a core is 1 ms (the kernel's smallest quota) of
/// every 4 ms. A group at its quota runs its share and then stops until the next period: with
/// the kernel's default (100 ms) every p99 of a run measured a 75 ms stop (about 70 ms whatever
/// the load), and with 10 ms a write's p99 was one stop or two (10 or 17 ms) from run to run.
/// A slow machine is slow all the time, not stopped for most of each period.
const PERIOD_US: u64 = 4_000;

/// Where the cpu controller lives, with the files its version uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V2,
    V1,
}

/// Why a quota could not be set.
#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    #[error(
        "no cgroup hierarchy with the cpu controller was found (looked for cgroup v2 at \
         /sys/fs/cgroup and /sys/fs/cgroup/unified, v1 at /sys/fs/cgroup/cpu and \
         /sys/fs/cgroup/cpu,cpuacct)"
    )]
    NoController,
    #[error("{cores} cores is not a quota: give more than 0")]
    Cores { cores: f64 },
    #[error("{what} {path}: {source} (a CPU quota needs root)")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A cgroup holding its processes to `cores` of CPU; removed on drop.
#[derive(Debug)]
pub struct CpuQuota {
    root: PathBuf,
    dir: PathBuf,
    version: Version,
    pub cores: f64,
}

/// What the quota did: how often the group was held back, and for how long in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Throttling {
    pub periods: u64,
    pub throttled_periods: u64,
    pub throttled_s: f64,
}

impl CpuQuota {
    /// Makes a group named `name` (with this process's id, so runs side by side do not meet)
    /// holding its processes to `cores` of CPU.
    pub fn create(name: &str, cores: f64) -> Result<Self, QuotaError> {
        if !(cores > 0.0 && cores.is_finite()) {
            return Err(QuotaError::Cores { cores });
        }
        let (root, version) = find_controller().ok_or(QuotaError::NoController)?;
        let dir = root.join(format!("{name}-{}", std::process::id()));
        if version == Version::V2 {
            // The root must hand the cpu controller to its children; writing it again is a
            // no-op where it already does.
            write(
                &root.join("cgroup.subtree_control"),
                "+cpu",
                "enabling cpu in",
            )?;
        }
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(QuotaError::Io {
                    what: "making the cgroup",
                    path: dir,
                    source,
                })
            }
        }
        let quota = Self {
            root,
            dir,
            version,
            cores,
        };
        let quota_us = ((cores * PERIOD_US as f64).round() as u64).max(1_000);
        match version {
            Version::V2 => write(
                &quota.dir.join("cpu.max"),
                &format!("{quota_us} {PERIOD_US}"),
                "setting",
            )?,
            Version::V1 => {
                write(
                    &quota.dir.join("cpu.cfs_period_us"),
                    &PERIOD_US.to_string(),
                    "setting",
                )?;
                write(
                    &quota.dir.join("cpu.cfs_quota_us"),
                    &quota_us.to_string(),
                    "setting",
                )?;
            }
        }
        Ok(quota)
    }

    /// Moves process `pid` (all its threads, and what it starts later) into the group.
    pub fn admit(&self, pid: u32) -> Result<(), QuotaError> {
        write(
            &self.dir.join("cgroup.procs"),
            &pid.to_string(),
            "adding a process to",
        )
    }

    /// How the kernel held the group back so far (`cpu.stat`), if it says.
    pub fn throttling(&self) -> Option<Throttling> {
        let text = std::fs::read_to_string(self.dir.join("cpu.stat")).ok()?;
        let field = |name: &str| {
            text.lines().find_map(|line| {
                let (key, value) = line.split_once(' ')?;
                (key == name).then(|| value.trim().parse::<u64>().ok())?
            })
        };
        let throttled_s = match self.version {
            Version::V2 => field("throttled_usec")? as f64 / 1e6,
            Version::V1 => field("throttled_time")? as f64 / 1e9,
        };
        Some(Throttling {
            periods: field("nr_periods")?,
            throttled_periods: field("nr_throttled")?,
            throttled_s,
        })
    }

    /// What the report says of the group.
    pub fn describe(&self) -> String {
        let how = match self.version {
            Version::V2 => "cgroup v2 cpu.max",
            Version::V1 => "cgroup v1 cpu.cfs_quota_us",
        };
        format!(
            "{} of a core ({how}, period {} ms)",
            self.cores,
            PERIOD_US / 1000
        )
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        // A group with processes in it cannot be removed: move any left back to the root.
        if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.lines() {
                let _ = std::fs::write(self.root.join("cgroup.procs"), pid);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The first hierarchy with the cpu controller: v2, then v1.
fn find_controller() -> Option<(PathBuf, Version)> {
    for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        let controllers = std::fs::read_to_string(Path::new(root).join("cgroup.controllers"));
        if controllers.is_ok_and(|text| text.split_whitespace().any(|c| c == "cpu")) {
            return Some((root.into(), Version::V2));
        }
    }
    ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"]
        .into_iter()
        .map(PathBuf::from)
        .find(|root| root.join("cpu.cfs_quota_us").exists())
        .map(|root| (root, Version::V1))
}

fn write(path: &Path, text: &str, what: &'static str) -> Result<(), QuotaError> {
    std::fs::write(path, text).map_err(|source| QuotaError::Io {
        what,
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_of_nothing_is_refused_before_any_file_is_touched() {
        for cores in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                CpuQuota::create("ferry-bench-test", cores),
                Err(QuotaError::Cores { .. })
            ));
        }
    }

    /// As root on a machine with a cpu controller: a busy child held to a quarter of a core is
    /// throttled, and the group is gone after the drop.
    #[test]
    fn a_busy_process_under_a_quarter_of_a_core_is_throttled() {
        let quota = match CpuQuota::create("ferry-bench-test", 0.25) {
            Ok(quota) => quota,
            Err(err) => {
                eprintln!("SKIPPED: no CPU quota here: {err}");
                return;
            }
        };
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("sh");
        quota.admit(child.id()).expect("admit");
        let started = std::time::Instant::now();
        let throttled = loop {
            let seen = quota.throttling().expect("cpu.stat");
            if seen.throttled_periods >= 3 {
                break seen;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "a busy loop under 0.25 cores was throttled {seen:?} in 5 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let _ = child.kill();
        let _ = child.wait();
        assert!(throttled.throttled_s > 0.0, "{throttled:?}");
        let dir = quota.dir.clone();
        drop(quota);
        assert!(!dir.exists(), "{} outlived its quota", dir.display());
    }
}
