//! Which cores the benchmark's client and a measured gateway run on, for figures taken one
//! request at a time.
//!
//! Why it matters: on this machine (a VM with two virtual cores) a request answered by a
//! process on the other core than the client's wakes an idle core on the way there and again
//! on the way back, which costs about 75 us per round trip; on the same core it costs
//! nothing. The kernel settles which of the two it is when a process starts and keeps it, so a
//! sequential p50 sits in one of two modes by process start (a point read: 0.02 or 0.1 ms).
//! Two figures taken in different modes compare the scheduler, not the work. Pinning both
//! sides (`taskset`, every thread of each) holds that constant: figures compared with each
//! other are taken in the same placement, and every placement is measured.

use std::process::Command;

use serde::Serialize;

/// Where the client runs relative to the gateway it measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// On one core: a request and its answer hand over without waking another core.
    Together,
    /// On two cores: each request wakes the gateway's core, each answer the client's.
    Apart,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Self::Together => "together",
            Self::Apart => "apart",
        }
    }
}

/// What a part of a benchmark measures in: each placement this machine allows, or one
/// unpinned placement (`None`, whichever the kernel picks) where the cores cannot be set.
#[derive(Debug)]
pub struct Placements {
    cores: Option<Cores>,
    pub each: Vec<Option<Placement>>,
}

impl Placements {
    /// Said on standard error, naming `part`, when they cannot be pinned.
    pub fn here(part: &str) -> Self {
        let cores = Cores::allowed()
            .inspect_err(|why| crate::progress(&format!("{part}: not pinning ({why})")))
            .ok();
        let each: Vec<Option<Placement>> = match &cores {
            Some(cores) => cores.placements().into_iter().map(Some).collect(),
            None => vec![None],
        };
        if each == [Some(Placement::Together)] {
            crate::progress(&format!("{part}: one core: measuring together only"));
        }
        Self { cores, each }
    }

    /// How the figures were taken, for a report: a sentence.
    pub fn describe(each: &[Option<Placement>]) -> &'static str {
        match each {
            [Some(Placement::Together), Some(Placement::Apart)] => {
                "the benchmark's client and the measured gateways on one core (together) and on \
                 two (apart), every thread of each pinned; figures compared only within a \
                 placement, each target judged on the worse"
            }
            [Some(Placement::Together)] => {
                "the benchmark's client and the measured gateways on the one core this process \
                 may use, every thread pinned"
            }
            _ => {
                "unpinned: the cores could not be read or set (`taskset`), so each figure is \
                  whichever placement the kernel chose"
            }
        }
    }

    /// Pins this process and `gateways` as `placement` says (nothing for the unpinned one)
    /// until the guard is dropped.
    pub fn pin(
        &self,
        placement: Option<Placement>,
        gateways: &[u32],
    ) -> Result<Option<Pinned<'_>>, String> {
        self.pin_with_threads(placement, gateways, &[])
    }

    /// As [`Placements::pin`], with `threads` of this process (a yardstick served from this
    /// process, by thread id) on the gateways' core rather than the client's.
    pub fn pin_with_threads(
        &self,
        placement: Option<Placement>,
        gateways: &[u32],
        threads: &[u32],
    ) -> Result<Option<Pinned<'_>>, String> {
        match (placement, &self.cores) {
            (Some(placement), Some(cores)) => cores
                .pin_with_threads(placement, gateways, threads)
                .map(Some),
            _ => Ok(None),
        }
    }
}

/// The ids of this process's threads whose names start with one of `prefixes` (a name as the
/// kernel keeps it: its first 15 bytes).
pub fn threads_named(prefixes: &[&str]) -> Result<Vec<u32>, String> {
    let tasks =
        std::fs::read_dir("/proc/self/task").map_err(|err| format!("/proc/self/task: {err}"))?;
    let mut ids = Vec::new();
    for task in tasks.flatten() {
        let Some(id) = task
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(name) = std::fs::read_to_string(task.path().join("comm")) else {
            // The thread ended meanwhile.
            continue;
        };
        let name = name.trim_end();
        // Byte-wise: a name cut at 15 bytes may end inside a character.
        if prefixes.iter().any(|prefix| {
            let prefix = prefix.as_bytes();
            name.as_bytes().starts_with(&prefix[..prefix.len().min(15)])
        }) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// Its name in reports.
pub fn name(placement: Option<Placement>) -> &'static str {
    placement.map_or("unpinned", Placement::name)
}

/// The cores this process may run on, as `taskset` reads and sets them.
#[derive(Debug, Clone)]
pub struct Cores {
    allowed: Vec<usize>,
}

impl Cores {
    /// This process's allowed cores, or why they cannot be read (no `taskset`, not Linux).
    pub fn allowed() -> Result<Self, String> {
        let pid = std::process::id().to_string();
        let out = Command::new("taskset")
            .args(["-p", "-c", &pid])
            .output()
            .map_err(|err| format!("taskset: {err}"))?;
        if !out.status.success() {
            return Err(format!(
                "taskset -p -c: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        // "pid 123's current affinity list: 0,1" (or "0-3,6").
        let list = text
            .rsplit(':')
            .next()
            .ok_or_else(|| format!("taskset said {text:?}"))?;
        let allowed = parse_list(list.trim()).ok_or_else(|| format!("taskset said {text:?}"))?;
        if allowed.is_empty() {
            return Err(format!("taskset said {text:?}"));
        }
        Ok(Self { allowed })
    }

    /// The placements this machine allows: both with two cores or more, `Together` with one.
    pub fn placements(&self) -> Vec<Placement> {
        if self.allowed.len() >= 2 {
            vec![Placement::Together, Placement::Apart]
        } else {
            vec![Placement::Together]
        }
    }

    /// Pins every thread of this process (threads started later inherit it) to the first
    /// allowed core and every thread of each of `gateways` to the same core or the second,
    /// until the returned guard is dropped.
    ///
    /// Each of `threads` (ids of this process's threads) goes on the gateways' core too;
    /// dropping the guard gives them every allowed core with the rest of this process.
    pub fn pin_with_threads(
        &self,
        placement: Placement,
        gateways: &[u32],
        threads: &[u32],
    ) -> Result<Pinned<'_>, String> {
        let client = self.allowed[0];
        let server = match placement {
            Placement::Together => client,
            Placement::Apart => *self
                .allowed
                .get(1)
                .ok_or("one core: the client and the gateway cannot be apart")?,
        };
        let pinned = Pinned {
            cores: self,
            gateways: gateways.to_vec(),
        };
        set_affinity(std::process::id(), &client.to_string())?;
        for gateway in gateways {
            set_affinity(*gateway, &server.to_string())?;
        }
        for thread in threads {
            set_thread_affinity(*thread, &server.to_string())?;
        }
        Ok(pinned)
    }

    fn list(&self) -> String {
        self.allowed
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Both sides pinned; dropping it gives every allowed core back to each. A gateway stopped
/// meanwhile is nothing to undo.
#[derive(Debug)]
pub struct Pinned<'a> {
    cores: &'a Cores,
    gateways: Vec<u32>,
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        let all = self.cores.list();
        if let Err(err) = set_affinity(std::process::id(), &all) {
            crate::progress(&format!("could not unpin the benchmark: {err}"));
        }
        for gateway in &self.gateways {
            let _ = set_affinity(*gateway, &all);
        }
    }
}

/// Every thread of `pid` to the cores in `list` (`taskset -a`).
fn set_affinity(pid: u32, list: &str) -> Result<(), String> {
    taskset(&["-a", "-p", "-c", list, &pid.to_string()])
}

/// One thread of this process to the cores in `list` (`taskset` without `-a`).
fn set_thread_affinity(thread: u32, list: &str) -> Result<(), String> {
    taskset(&["-p", "-c", list, &thread.to_string()])
}

fn taskset(args: &[&str]) -> Result<(), String> {
    let out = Command::new("taskset")
        .args(args)
        .output()
        .map_err(|err| format!("taskset: {err}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "taskset {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A CPU list as the kernel writes it: `0,1`, `0-3,6`.
fn parse_list(list: &str) -> Option<Vec<usize>> {
    let mut cores = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((from, to)) => {
                let (from, to) = (from.parse::<usize>().ok()?, to.parse::<usize>().ok()?);
                if to < from || to - from > 4096 {
                    return None;
                }
                cores.extend(from..=to);
            }
            None => cores.push(part.parse().ok()?),
        }
    }
    Some(cores)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_found_by_the_start_of_its_name() {
        let (started, has_started) = std::sync::mpsc::channel::<()>();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("pin-probe-with-a-long-name".into())
            .spawn(move || {
                // Named before this runs: said once it does, then held until the test is done.
                let _ = started.send(());
                let _ = stopped.recv();
            })
            .expect("spawning a thread");
        has_started
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the probe thread did not start in 10 s");
        let ids = threads_named(&["pin-probe-with-a-long-name"]).expect("reading /proc/self/task");
        let others = threads_named(&["no-such-thread"]).expect("reading /proc/self/task");
        drop(stop);
        let _ = thread.join();
        // The kernel keeps 15 bytes of a name: the prefix is cut to match.
        assert_eq!(ids.len(), 1, "{ids:?}");
        assert!(others.is_empty(), "{others:?}");
    }

    #[test]
    fn cpu_lists_read_as_the_kernel_writes_them() {
        assert_eq!(parse_list("0,1"), Some(vec![0, 1]));
        assert_eq!(parse_list("0-3,6"), Some(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_list("5"), Some(vec![5]));
        assert_eq!(parse_list("3-1"), None);
        assert_eq!(parse_list("x"), None);
    }
}
