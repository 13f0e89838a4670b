//! How the CLI shows long work: a replica catching up (`ferry vault follow`) as a bar with
//! revisions per second and time left on a terminal, and as plain lines elsewhere; and, for any
//! command that can wait, one line saying what it waits for once the wait gets noticeable.
//!
//! The arithmetic is plain functions of the samples and the time they were taken, so it is
//! tested without a clock.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use crate::human::human;

/// The rate is measured over the last this long of samples.
const RATE_WINDOW: Duration = Duration::from_secs(5);
/// Without a terminal, a line at most this often.
const PLAIN_EVERY: Duration = Duration::from_secs(2);
const BAR_WIDTH: usize = 24;

/// A replica's catch-up as sampled from `/v1/vaults`.
#[derive(Debug, Default)]
pub struct CatchUp {
    /// (when, the replica's revision) of recent samples, oldest first.
    samples: Vec<(Instant, u64)>,
    last_plain: Option<Instant>,
}

impl CatchUp {
    /// Records a sample: the replica at revision `applied` (of the owner's `target`), at `now`.
    pub fn sample(&mut self, applied: u64, now: Instant) {
        self.samples.push((now, applied));
        // Keep one sample older than the window, so the rate spans all of it.
        while self.samples.len() > 2
            && self
                .samples
                .get(1)
                .is_some_and(|(at, _)| now.duration_since(*at) >= RATE_WINDOW)
        {
            self.samples.remove(0);
        }
    }

    /// Revisions gained per second over the window; `None` until two samples span time.
    pub fn rate(&self) -> Option<f64> {
        let (first, last) = (self.samples.first()?, self.samples.last()?);
        let span = last.0.duration_since(first.0).as_secs_f64();
        (span > 0.0).then(|| last.1.saturating_sub(first.1) as f64 / span)
    }

    /// Time left at the current rate; `None` when done, or the rate is not known or zero.
    pub fn left(&self, applied: u64, target: u64) -> Option<Duration> {
        if applied >= target {
            return None;
        }
        let rate = self.rate().filter(|rate| *rate > 0.0)?;
        Some(Duration::from_secs_f64(
            target.saturating_sub(applied) as f64 / rate,
        ))
    }

    /// One line of progress: `[#####.....]  4,200 / 10,000 revisions  2,100/s  3 s left`, the
    /// bar only for a terminal.
    pub fn line(&self, vault: &str, applied: u64, target: u64, bar: bool) -> String {
        let mut line = format!("{vault}: ");
        if bar {
            let fraction = if target == 0 {
                1.0
            } else {
                (applied as f64 / target as f64).min(1.0)
            };
            let filled = (fraction * BAR_WIDTH as f64).round() as usize;
            line.push('[');
            line.push_str(&"#".repeat(filled));
            line.push_str(&".".repeat(BAR_WIDTH - filled));
            line.push_str("]  ");
        }
        line.push_str(&format!(
            "{} / {} revisions",
            thousands(applied),
            thousands(target)
        ));
        if let Some(rate) = self.rate() {
            line.push_str(&format!("  {}/s", thousands(rate.round() as u64)));
        }
        if let Some(left) = self.left(applied, target) {
            line.push_str(&format!("  {} left", human(left)));
        }
        line
    }

    /// Whether a plain (non-terminal) line is due at `now`; takes the turn if so.
    pub fn plain_due(&mut self, now: Instant) -> bool {
        let due = self
            .last_plain
            .is_none_or(|last| now.duration_since(last) >= PLAIN_EVERY);
        if due {
            self.last_plain = Some(now);
        }
        due
    }
}

/// `12345` as `12,345`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// Where progress goes: standard error, redrawn in place on a terminal.
pub struct Display {
    terminal: bool,
}

impl Display {
    pub fn stderr() -> Self {
        Self {
            terminal: std::io::stderr().is_terminal(),
        }
    }

    pub fn is_terminal(&self) -> bool {
        self.terminal
    }

    /// Shows `line`: in place on a terminal, as its own line elsewhere.
    pub fn show(&self, line: &str) {
        let mut err = std::io::stderr().lock();
        if self.terminal {
            // Clear to the end of the line: the new line may be shorter.
            let _ = write!(err, "\r{line}\x1b[K");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }

    /// Ends an in-place line so what follows starts on a new one.
    pub fn finish(&self) {
        if self.terminal {
            eprintln!();
        }
    }
}

/// While alive, says on standard error what the command waits for once it has waited
/// `after` (so quick calls print nothing), on a terminal only: scripts read exit codes.
pub struct WaitNotice {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl WaitNotice {
    pub fn after(after: Duration, what: String) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self { task: None };
        }
        Self {
            task: Some(tokio::spawn(async move {
                tokio::time::sleep(after).await;
                eprintln!("{what}");
            })),
        }
    }
}

impl Drop for WaitNotice {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[cfg(test)]
// Tests may read the real clock (`clippy.toml`): an origin or a bound of theirs is real time.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn rate_and_time_left_come_from_the_window() {
        let t0 = Instant::now();
        let mut catch_up = CatchUp::default();
        catch_up.sample(0, t0);
        assert_eq!(catch_up.rate(), None, "one sample spans no time");
        assert_eq!(catch_up.left(0, 100), None);
        catch_up.sample(2_000, t0 + Duration::from_secs(1));
        assert_eq!(catch_up.rate(), Some(2_000.0));
        assert_eq!(catch_up.left(2_000, 10_000), Some(Duration::from_secs(4)));
        // A stall longer than the window: the old fast samples no longer count.
        catch_up.sample(2_000, t0 + Duration::from_secs(7));
        catch_up.sample(2_000, t0 + Duration::from_secs(12));
        assert_eq!(catch_up.rate(), Some(0.0));
        assert_eq!(catch_up.left(2_000, 10_000), None, "no rate, no promise");
    }

    #[test]
    fn a_line_has_the_bar_only_on_a_terminal() {
        let t0 = Instant::now();
        let mut catch_up = CatchUp::default();
        catch_up.sample(0, t0);
        catch_up.sample(4_200, t0 + Duration::from_secs(2));
        assert_eq!(
            catch_up.line("notes", 4_200, 10_000, true),
            "notes: [##########..............]  4,200 / 10,000 revisions  2,100/s  2 s left"
        );
        assert_eq!(
            catch_up.line("notes", 4_200, 10_000, false),
            "notes: 4,200 / 10,000 revisions  2,100/s  2 s left"
        );
        assert_eq!(
            CatchUp::default().line("empty", 0, 0, true),
            format!("empty: [{}]  0 / 0 revisions", "#".repeat(BAR_WIDTH))
        );
    }

    #[test]
    fn plain_lines_are_spaced_out() {
        let t0 = Instant::now();
        let mut catch_up = CatchUp::default();
        assert!(catch_up.plain_due(t0));
        assert!(!catch_up.plain_due(t0 + Duration::from_millis(500)));
        assert!(catch_up.plain_due(t0 + PLAIN_EVERY));
    }

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(10_000_000), "10,000,000");
    }
}
