//! CPU time spent by each side of a write, read from `/proc`: a process's (a `ferry serve`)
//! or the benchmark's own threads by name (the bare relay's parts). On a two-core machine the
//! concurrent throughput is bounded by CPU, so CPU per write says where the time goes.
//!
//! `/proc` counts in clock ticks (`getconf CLK_TCK`, 100 on Linux): coarse, but a measured
//! phase runs for seconds and burns thousands of ticks.

use std::path::Path;
use std::time::Duration;

/// CPU used by the calling side (HTTP in, QUIC out) and the owning side (QUIC in, SQLite).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Split {
    pub caller: Duration,
    pub owner: Duration,
}

impl Split {
    /// The CPU used between `self` (taken before) and `later`.
    pub fn until(self, later: Split) -> Split {
        Split {
            caller: later.caller.saturating_sub(self.caller),
            owner: later.owner.saturating_sub(self.owner),
        }
    }
}

/// How to read each side's CPU time now.
#[derive(Debug, Clone)]
pub enum Sides {
    /// Two processes by id.
    Processes { caller: u32, owner: u32 },
    /// This process's threads whose names start with one of the prefixes.
    Threads {
        caller: Vec<&'static str>,
        owner: Vec<&'static str>,
    },
}

impl Sides {
    /// Each side's CPU time so far; `None` where `/proc` cannot tell (not Linux, or gone).
    pub fn now(&self) -> Option<Split> {
        match self {
            Sides::Processes { caller, owner } => Some(Split {
                caller: stat_cpu(&Path::new("/proc").join(caller.to_string()).join("stat"))?,
                owner: stat_cpu(&Path::new("/proc").join(owner.to_string()).join("stat"))?,
            }),
            Sides::Threads { caller, owner } => {
                let threads = own_threads()?;
                let sum = |prefixes: &[&str]| {
                    threads
                        .iter()
                        .filter(|(name, _)| prefixes.iter().any(|p| name.starts_with(p)))
                        .map(|(_, cpu)| *cpu)
                        .sum()
                };
                Some(Split {
                    caller: sum(caller),
                    owner: sum(owner),
                })
            }
        }
    }
}

/// Name and CPU time of every thread of this process.
fn own_threads() -> Option<Vec<(String, Duration)>> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        tasks
            .filter_map(Result::ok)
            .filter_map(|task| {
                let text = std::fs::read_to_string(task.path().join("stat")).ok()?;
                let (name, cpu) = parse_stat(&text)?;
                Some((name.to_string(), cpu))
            })
            .collect(),
    )
}

fn stat_cpu(path: &Path) -> Option<Duration> {
    parse_stat(&std::fs::read_to_string(path).ok()?).map(|(_, cpu)| cpu)
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

/// Clock ticks per second; Linux has used 100 on every common architecture for decades.
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
    fn this_threads_cpu_is_visible() {
        std::thread::Builder::new()
            .name("cpu-test-spin".into())
            .spawn(|| {
                let sides = Sides::Threads {
                    caller: vec!["cpu-test-spin"],
                    owner: vec!["nothing-by-this-name"],
                };
                let before = sides.now().unwrap();
                let started = std::time::Instant::now();
                let mut x = 0u64;
                while started.elapsed() < Duration::from_millis(200) {
                    x = x.wrapping_mul(31).wrapping_add(1);
                }
                std::hint::black_box(x);
                let used = before.until(sides.now().unwrap());
                assert!(used.caller >= Duration::from_millis(50), "{used:?}");
                assert_eq!(used.owner, Duration::ZERO);
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
