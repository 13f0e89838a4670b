//! CPU time spent by each side of a write, read from `/proc`: two processes' (the `ferry serve`
//! pair) or the benchmark's own threads by name (the bare relay's parts), with a breakdown by
//! thread name. On a two-core machine the concurrent throughput is bounded by CPU, so CPU per
//! write says where the time goes.
//!
//! `/proc` counts in clock ticks (100 per second on Linux): coarse, but a measured phase runs
//! for seconds and burns hundreds of ticks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The two sides of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Side {
    /// HTTP in, QUIC out.
    Caller,
    /// QUIC in, SQLite.
    Owner,
}

/// How to find each side's threads.
#[derive(Debug, Clone)]
pub enum Sides {
    /// Two processes by id: every thread of each.
    Processes { caller: u32, owner: u32 },
    /// This process's threads whose names start with one of the prefixes.
    Threads {
        caller: Vec<&'static str>,
        owner: Vec<&'static str>,
    },
}

/// CPU time so far, per side and thread name (threads of one name added up).
#[derive(Debug, Clone, Default)]
pub struct Snapshot(BTreeMap<(Side, String), Duration>);

/// CPU used between two snapshots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// Per side and thread name, largest first within a side.
    pub by_thread: Vec<(Side, String, Duration)>,
}

impl Usage {
    pub fn of(&self, side: Side) -> Duration {
        self.by_thread
            .iter()
            .filter(|(s, _, _)| *s == side)
            .map(|(_, _, cpu)| *cpu)
            .sum()
    }

    pub fn total(&self) -> Duration {
        self.by_thread.iter().map(|(_, _, cpu)| *cpu).sum()
    }
}

impl Sides {
    /// Each thread's CPU time so far; `None` where `/proc` cannot tell (not Linux).
    pub fn snapshot(&self) -> Option<Snapshot> {
        let mut snapshot = Snapshot::default();
        match self {
            Sides::Processes { caller, owner } => {
                for (side, pid) in [(Side::Caller, caller), (Side::Owner, owner)] {
                    let tasks = Path::new("/proc").join(pid.to_string()).join("task");
                    for (name, cpu) in threads(&tasks)? {
                        *snapshot.0.entry((side, name)).or_default() += cpu;
                    }
                }
            }
            Sides::Threads { caller, owner } => {
                for (name, cpu) in threads(Path::new("/proc/self/task"))? {
                    let side = if caller.iter().any(|p| name.starts_with(p)) {
                        Side::Caller
                    } else if owner.iter().any(|p| name.starts_with(p)) {
                        Side::Owner
                    } else {
                        continue;
                    };
                    *snapshot.0.entry((side, name)).or_default() += cpu;
                }
            }
        }
        Some(snapshot)
    }
}

impl Snapshot {
    /// What was used from `self` (taken before) to `later`. A thread that ended in between
    /// is missed; the runtimes' threads live through a measured phase.
    pub fn until(&self, later: &Snapshot) -> Usage {
        let mut by_thread: Vec<_> = later
            .0
            .iter()
            .map(|((side, name), after)| {
                let before = self.0.get(&(*side, name.clone())).copied();
                (
                    *side,
                    name.clone(),
                    after.saturating_sub(before.unwrap_or_default()),
                )
            })
            .filter(|(_, _, used)| !used.is_zero())
            .collect();
        by_thread.sort_by(|a, b| a.0.cmp(&b.0).then(b.2.cmp(&a.2)));
        Usage { by_thread }
    }
}

/// Name and CPU time of every thread under a `/proc/<pid>/task` directory.
fn threads(tasks: &Path) -> Option<Vec<(String, Duration)>> {
    let entries = std::fs::read_dir(tasks).ok()?;
    let stats: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|task| task.path().join("stat"))
        .collect();
    Some(
        stats
            .iter()
            .filter_map(|path| {
                let text = std::fs::read_to_string(path).ok()?;
                let (name, cpu) = parse_stat(&text)?;
                Some((name.to_string(), cpu))
            })
            .collect(),
    )
}

/// A whole process's CPU time so far (user + system, every thread); `None` where `/proc`
/// cannot tell (not Linux, or the process is gone).
pub fn process_cpu(pid: u32) -> Option<Duration> {
    let text =
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?;
    parse_stat(&text).map(|(_, cpu)| cpu)
}

/// What `work` returns, with `pid`'s CPU time over it (`None` where `/proc` could not tell)
/// and the wall time it took.
pub fn process_cpu_over<R>(
    pid: u32,
    work: impl FnOnce() -> R,
) -> (R, Option<Duration>, std::time::Duration) {
    let (before, started) = (process_cpu(pid), std::time::Instant::now());
    let result = work();
    let after = process_cpu(pid);
    let wall = started.elapsed();
    (
        result,
        before
            .zip(after)
            .map(|(before, after)| after.saturating_sub(before)),
        wall,
    )
}

/// The calling thread's CPU time so far; `None` where `/proc` cannot tell.
pub fn this_thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    parse_stat(&text).map(|(_, cpu)| cpu)
}

/// The machine's busy CPU time and this process's own (its threads, and the children it has
/// waited for: the `ferry` processes once stopped), to tell how much other work ran beside a
/// run.
#[derive(Debug, Clone, Copy)]
pub struct Machine {
    busy: Duration,
    ours: Duration,
    at: std::time::Instant,
}

impl Machine {
    pub fn now() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        Some(Self {
            busy: parse_machine_busy(&stat)?,
            ours: parse_own_with_children(&own)?,
            at: std::time::Instant::now(),
        })
    }

    /// Cores' worth of CPU that work other than this run used on average since `self`.
    pub fn others_since(&self, later: &Machine) -> f64 {
        let wall = later.at.duration_since(self.at).as_secs_f64();
        let busy = later.busy.saturating_sub(self.busy);
        let ours = later.ours.saturating_sub(self.ours);
        if wall > 0.0 {
            busy.saturating_sub(ours).as_secs_f64() / wall
        } else {
            0.0
        }
    }
}

/// The load average over 1, 5 and 15 minutes, as `/proc/loadavg` says it.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".into())
}

/// Busy time of all CPUs from the first line of `/proc/stat`: user, nice, system, irq,
/// softirq and steal (idle and iowait are not busy; guest time is already in user).
fn parse_machine_busy(stat: &str) -> Option<Duration> {
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    Some(ticks(
        field(0) + field(1) + field(2) + field(5) + field(6) + field(7),
    ))
}

/// utime + stime + cutime + cstime (fields 14 to 17) of a `/proc/.../stat` line.
fn parse_own_with_children(text: &str) -> Option<Duration> {
    let close = text.rfind(')')?;
    let fields: Vec<u64> = text
        .get(close + 1..)?
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    (fields.len() == 4).then(|| ticks(fields.iter().sum()))
}

/// The name and user + system time in a `/proc/.../stat` line. The name is in parentheses
/// and may itself hold spaces or parentheses, so fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<(&str, Duration)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let name = text.get(open + 1..close)?;
    // After the name: state is field 3, utime field 14, stime field 15.
    let mut fields = text.get(close + 1..)?.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((name, ticks(utime + stime)))
}

/// Clock ticks per second (`getconf CLK_TCK`): 100 on every common Linux architecture.
const TICKS_PER_SECOND: u64 = 100;

fn ticks(n: u64) -> Duration {
    Duration::from_millis(n * 1000 / TICKS_PER_SECOND)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_name_and_user_plus_system_time() {
        let line = "4242 (bare-quic (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 70 0 0 20 0 3 0";
        assert_eq!(
            parse_stat(line),
            Some(("bare-quic (x)", Duration::from_millis(3200)))
        );
        assert_eq!(parse_stat("4242 (short) S 1"), None);
    }

    #[test]
    fn machine_and_own_times_parse() {
        let stat = "cpu  100 5 20 900 50 3 2 10 0 0\ncpu0 50 2 10 450 25 1 1 5 0 0\n";
        assert_eq!(parse_machine_busy(stat), Some(Duration::from_millis(1400)));
        assert_eq!(parse_machine_busy("intr 1 2 3"), None);
        let own = "7 (ferry-bench) R 1 7 7 0 -1 0 0 0 0 0 250 70 30 10 20 0";
        assert_eq!(
            parse_own_with_children(own),
            Some(Duration::from_millis(3600))
        );
        assert!(Machine::now().is_some());
    }

    #[test]
    fn usage_is_the_difference_per_thread_name() {
        let ms = Duration::from_millis;
        let before = Snapshot(BTreeMap::from([
            ((Side::Caller, "http".to_string()), ms(100)),
            ((Side::Owner, "writer".to_string()), ms(50)),
        ]));
        let after = Snapshot(BTreeMap::from([
            ((Side::Caller, "http".to_string()), ms(300)),
            ((Side::Caller, "new".to_string()), ms(500)),
            ((Side::Owner, "writer".to_string()), ms(50)),
        ]));
        let used = before.until(&after);
        assert_eq!(
            used.by_thread,
            vec![
                (Side::Caller, "new".to_string(), ms(500)),
                (Side::Caller, "http".to_string(), ms(200)),
            ]
        );
        assert_eq!(
            (used.of(Side::Caller), used.of(Side::Owner)),
            (ms(700), ms(0))
        );
        assert_eq!(used.total(), ms(700));
    }

    #[test]
    fn this_threads_cpu_is_visible() {
        std::thread::Builder::new()
            .name("cpu-test-spin".into())
            .spawn(|| {
                let sides = Sides::Threads {
                    caller: vec!["cpu-test-spin"],
                    owner: vec!["nothing-by-this-name"],
                };
                let before = sides.snapshot().unwrap();
                let started = std::time::Instant::now();
                let mut x = 0u64;
                while started.elapsed() < Duration::from_millis(200) {
                    x = x.wrapping_mul(31).wrapping_add(1);
                }
                std::hint::black_box(x);
                let used = before.until(&sides.snapshot().unwrap());
                assert!(
                    used.of(Side::Caller) >= Duration::from_millis(50),
                    "{used:?}"
                );
                assert_eq!(used.of(Side::Owner), Duration::ZERO);
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
