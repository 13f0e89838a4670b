//! The figures of one run as a markdown report: one row per system, then Ferry's ratios to the
//! bare relay against the write path's targets, then every failure seen.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::bare_relay::Layout;
use crate::cpu;
use crate::figures::{cell, latency, rate};
use crate::load::{LoadError, Sample};
use crate::placement::Placement;
use crate::targets::{self, Bound, Line, Unit};

/// Ferry's p50 may be at most this many times the bare relay's.
const P50_RATIO_TARGET: f64 = 2.0;
/// Ferry's concurrent throughput must be at least this share of the bare relay's...
const THROUGHPUT_SHARE_TARGET: f64 = 0.5;
/// ...and at least this many durable writes per second.
const THROUGHPUT_TARGET: f64 = 10_000.0;
/// The scale issue's bar (issue 15, done-when item 1), stricter than the write path's above:
/// Ferry's CPU per durable write at most this many times the bare relay's...
const CPU_RATIO_TARGET: f64 = 1.5;
/// ...and its 64-writer throughput at least this share of the bare relay's, in the same run.
const SCALE_THROUGHPUT_SHARE_TARGET: f64 = 0.7;
/// CPU figures below this are mostly rounding (`/proc` counts 10 ms ticks).
const MIN_CPU_SHOWN: Duration = Duration::from_millis(100);
/// Other work using more than this many cores on average makes the figures noisy.
const BUSY_OTHERS_CORES: f64 = 0.25;
/// Threads that used less than this in a phase are left out of the breakdown.
const MIN_THREAD_SHOWN: Duration = Duration::from_millis(30);

/// One system's figures.
#[derive(Debug)]
pub struct Measured {
    /// Every sequential request, in whichever placements they were taken.
    pub sequential: Sample,
    /// The same requests by placement, where the client and the measured side were pinned
    /// (`ferry-bench reads`); empty where they were not.
    pub sequential_by_placement: Vec<(Placement, Sample)>,
    pub concurrent: Sample,
    /// CPU used by each side during the concurrent phase, where `/proc` could tell.
    pub cpu: Option<cpu::Usage>,
    /// Checks and events worth a line in the report.
    pub notes: Vec<String>,
}

impl Measured {
    /// The figures of a system's two phases, or the first phase's error. Both phases are run
    /// for every system before this is asked, so `None` (a phase never run) is a bug, said so.
    pub fn from_phases(
        sequential: Option<Result<Sample, LoadError>>,
        concurrent: Option<Result<(Sample, Option<cpu::Usage>), LoadError>>,
    ) -> Result<Self, LoadError> {
        match (sequential, concurrent) {
            (Some(Ok(sequential)), Some(Ok((concurrent, cpu)))) => Ok(Self {
                sequential,
                sequential_by_placement: Vec::new(),
                concurrent,
                cpu,
                notes: Vec::new(),
            }),
            (Some(Err(err)), _) | (_, Some(Err(err))) => Err(err),
            (None, _) => Err(LoadError::NotRun("sequential")),
            (_, None) => Err(LoadError::NotRun("concurrent")),
        }
    }

    /// Whether every request of both phases was answered as it should be.
    pub fn clean(&self) -> bool {
        self.sequential.failures() == 0 && self.concurrent.failures() == 0
    }

    /// CPU per successful request of the concurrent phase, where `/proc` could tell and the
    /// phase burnt enough CPU for its 10 ms ticks to say something.
    pub fn cpu_per_request(&self) -> Option<CpuPerRequest> {
        let requests = self.concurrent.ok();
        let cpu = self
            .cpu
            .as_ref()
            .filter(|cpu| requests > 0 && cpu.total() >= MIN_CPU_SHOWN)?;
        Some(CpuPerRequest {
            caller_us: micros_per_request(cpu.of(cpu::Side::Caller), requests),
            owner_us: micros_per_request(cpu.of(cpu::Side::Owner), requests),
            total_us: micros_per_request(cpu.total(), requests),
            cores_busy: cpu.total().as_secs_f64() / self.concurrent.elapsed.as_secs_f64().max(1e-9),
        })
    }

    /// A report line for each phase that saw a failure: `- <name>, <phase>: ...`.
    /// `concurrent_phase` names the concurrent phase (`64 writers`, `64 readers`).
    pub fn failure_lines(&self, name: &str, concurrent_phase: &str) -> Vec<String> {
        [
            ("sequential", &self.sequential),
            (concurrent_phase, &self.concurrent),
        ]
        .into_iter()
        .filter(|(_, sample)| sample.failures() > 0 || sample.first_failure.is_some())
        .map(|(phase, sample)| {
            format!(
                "- {name}, {phase}: {} ok, {} not 200 {:?}, {} without an answer; first: {}",
                sample.ok(),
                sample.non_200.values().sum::<u64>(),
                sample.non_200,
                sample.transport_errors,
                sample.first_failure.as_deref().unwrap_or("-"),
            )
        })
        .collect()
    }
}

/// CPU per request, in microseconds, by side; and cores' worth of CPU used while it ran.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CpuPerRequest {
    pub caller_us: f64,
    pub owner_us: f64,
    pub total_us: f64,
    pub cores_busy: f64,
}

fn micros_per_request(used: Duration, requests: usize) -> f64 {
    used.as_secs_f64() * 1e6 / requests.max(1) as f64
}

/// Everything one run measured.
#[derive(Debug)]
pub struct Report {
    /// Whether this was a `--quick` run.
    pub quick: bool,
    /// What was run: counts, bounds, the machine.
    pub plan: String,
    pub floor: Sample,
    /// In the order given; the first is the one the targets compare against.
    pub bare: Vec<(Layout, Measured)>,
    /// Ferry's figures, or why there are none.
    pub ferry: Result<Measured, String>,
    pub ferry_layout: String,
    pub load_before: String,
    pub load_after: String,
    /// Cores' worth of CPU used by other work during the run, where `/proc` could tell.
    pub others_cores: Option<f64>,
}

impl Report {
    /// Whether every Ferry write was answered `200`.
    pub fn ferry_clean(&self) -> bool {
        self.ferry.as_ref().is_ok_and(Measured::clean)
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "## Ferry write path vs. a bare relay\n");
        let _ = writeln!(out, "{}\n", self.plan);
        let _ = writeln!(
            out,
            "| system | layout | seq p50 | seq p99 | seq writes/s | 64-writer writes/s | 64-writer p50 | 64-writer p99 | not 200 / no answer |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
        let _ = writeln!(
            out,
            "| SQLite floor: 1 insert per FULL commit | benchmark thread | {} | {} | {} | - | - | - | 0 / 0 |",
            latency(self.floor.percentile(50.0)),
            latency(self.floor.percentile(99.0)),
            rate(self.floor.per_second()),
        );
        for (layout, bare) in &self.bare {
            row(&mut out, "bare relay", layout.name(), bare, None);
        }
        match &self.ferry {
            Ok(ferry) => row(
                &mut out,
                "Ferry: b -> QUIC -> a",
                "2 processes",
                ferry,
                None,
            ),
            Err(why) => {
                let _ = writeln!(
                    out,
                    "| Ferry | 2 processes | not measured: {} |||||||",
                    cell(why)
                );
            }
        }
        let _ = writeln!(out);
        self.render_targets(&mut out);
        self.render_cpu(&mut out);
        self.render_notes(&mut out);
        out
    }

    fn render_targets(&self, out: &mut String) {
        let lines = self.target_lines();
        if !targets::any_figure(&lines) {
            let _ = writeln!(
                out,
                "No ratios: Ferry or the bare relay was not measured.\n"
            );
            return;
        }
        let layouts: Vec<Layout> = self.bare.iter().map(|(layout, _)| *layout).collect();
        targets::render(out, "Ferry / bare relay", &layouts, &lines);
    }

    /// The lines of the targets table; the judged ones are [`Report::targets`].
    pub fn target_lines(&self) -> Vec<Line> {
        let ferry = self.ferry.as_ref().ok();
        let against_bare = |figure: fn(&Measured, &Measured) -> Option<f64>| {
            against_each(ferry, self.bare.iter().map(|(_, bare)| bare), figure)
        };
        vec![
            Line::judged_on_reference(
                "seq p50",
                "seq_p50_ratio",
                Unit::Ratio,
                Bound::AtMost(P50_RATIO_TARGET),
                against_bare(|f, b| sequential_ratio(f, b, 50.0)),
            ),
            Line::reported(
                "seq p99",
                Unit::Ratio,
                against_bare(|f, b| sequential_ratio(f, b, 99.0)),
            ),
            Line::judged_on_reference(
                "64-writer throughput",
                "concurrent_throughput_share",
                Unit::Share,
                Bound::AtLeast(THROUGHPUT_SHARE_TARGET),
                against_bare(throughput_share),
            ),
            Line::judged_absolute(
                "Ferry 64-writer durable writes/s",
                "concurrent_writes_per_second",
                Unit::PerSecond,
                Bound::AtLeast(THROUGHPUT_TARGET),
                ferry.map(|ferry| ferry.concurrent.per_second()),
                self.bare.len(),
            ),
            Line::judged_on_reference(
                "CPU per durable write (scale)",
                "cpu_per_write_ratio",
                Unit::Ratio,
                Bound::AtMost(CPU_RATIO_TARGET),
                against_bare(cpu_ratio),
            ),
            Line::judged_on_reference(
                "64-writer throughput (scale)",
                "scale_concurrent_throughput_share",
                Unit::Share,
                Bound::AtLeast(SCALE_THROUGHPUT_SHARE_TARGET),
                against_bare(throughput_share),
            ),
        ]
    }

    /// Every target of the write path, judged; `value` and `met` are `None` where Ferry or the
    /// reference layout was not measured.
    pub fn targets(&self) -> Vec<targets::Judged> {
        targets::judged(self.target_lines())
    }

    fn render_cpu(&self, out: &mut String) {
        let systems = self
            .bare
            .iter()
            .map(|(layout, m)| (format!("bare relay, {}", layout.name()), m))
            .chain(self.ferry.iter().map(|m| ("Ferry (b, a)".to_string(), m)));
        render_cpu(out, "CPU per durable write, 64 writers", "write", systems);
    }

    fn render_notes(&self, out: &mut String) {
        let _ = writeln!(out, "Layouts:");
        for (layout, _) in &self.bare {
            let _ = writeln!(
                out,
                "- bare relay, {}: {}",
                layout.name(),
                layout.describe()
            );
        }
        let _ = writeln!(out, "- Ferry: {}\n", self.ferry_layout);
        render_machine(out, &self.load_before, &self.load_after, self.others_cores);
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        let systems = self
            .bare
            .iter()
            .map(|(layout, m)| (format!("bare relay ({})", layout.name()), m))
            .chain(self.ferry.iter().map(|m| ("Ferry".to_string(), m)));
        for (name, measured) in systems {
            failures.extend(measured.failure_lines(&name, "64 writers"));
            notes.extend(
                measured
                    .notes
                    .iter()
                    .map(|note| format!("- {name}: {note}")),
            );
        }
        if failures.is_empty() {
            let _ = writeln!(out, "Every write was answered 200 with a revision.");
        } else {
            let _ = writeln!(out, "\nFailures (counted, not hidden):");
            for line in failures {
                let _ = writeln!(out, "{line}");
            }
        }
        for line in notes {
            let _ = writeln!(out, "{line}");
        }
    }
}

/// CPU per request of each system's concurrent phase, by side, then by thread name. `unit`
/// names one request (`write`, `read`).
pub fn render_cpu<'a>(
    out: &mut String,
    heading: &str,
    unit: &str,
    systems: impl Iterator<Item = (String, &'a Measured)>,
) {
    let _ = writeln!(
        out,
        "| {heading} | calling side | owning side | total | cores busy |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|");
    let mut by_thread = Vec::new();
    for (name, m) in systems {
        let (Some(cpu), Some(per)) = (m.cpu.as_ref(), m.cpu_per_request()) else {
            let _ = writeln!(out, "| {name} | - | - | - | too short to tell |");
            continue;
        };
        let _ = writeln!(
            out,
            "| {name} | {:.0} us | {:.0} us | {:.0} us | {:.2} |",
            per.caller_us, per.owner_us, per.total_us, per.cores_busy,
        );
        let requests = m.concurrent.ok();
        let threads: Vec<String> = cpu
            .by_thread
            .iter()
            .filter(|(_, _, used)| *used >= MIN_THREAD_SHOWN)
            .map(|(side, thread, used)| {
                let side = match side {
                    cpu::Side::Caller => "calling",
                    cpu::Side::Owner => "owning",
                };
                format!(
                    "{side} `{thread}` {:.0} us",
                    micros_per_request(*used, requests)
                )
            })
            .collect();
        by_thread.push(format!("- {name}: {}", threads.join(", ")));
    }
    if !by_thread.is_empty() {
        let _ = writeln!(
            out,
            "\nPer {unit}, by thread name (threads of one name added up; the load generator's own \
             CPU, the same client for every system, is not counted):"
        );
        for line in by_thread {
            let _ = writeln!(out, "{line}");
        }
    }
    let _ = writeln!(out);
}

/// The load average around the run and how much other work shared the machine.
pub fn render_machine(
    out: &mut String,
    load_before: &str,
    load_after: &str,
    others_cores: Option<f64>,
) {
    let _ = writeln!(
        out,
        "Load average (1, 5, 15 min) before: {load_before}; after: {load_after}."
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(others) = others_cores {
        let _ = writeln!(
            out,
            "Other work on the machine used on average {others:.2} of its {cores} cores during the run{}",
            if others > BUSY_OTHERS_CORES {
                ": **the machine was shared**, so absolute figures are low and noisy; the \
                 ratios, between figures taken seconds apart, hold up better."
            } else {
                "."
            }
        );
    }
}

/// A system's table row: latencies, rates and failures of both phases, then `last`, if given,
/// as one more column.
pub fn row(out: &mut String, system: &str, layout: &str, m: &Measured, last: Option<&str>) {
    let _ = write!(
        out,
        "| {system} | {layout} | {} | {} | {} | {} | {} | {} | {} / {} |",
        sequential_latency(m, 50.0),
        sequential_latency(m, 99.0),
        rate(m.sequential.per_second()),
        rate(m.concurrent.per_second()),
        latency(m.concurrent.percentile(50.0)),
        latency(m.concurrent.percentile(99.0)),
        m.sequential.non_200.values().sum::<u64>() + m.concurrent.non_200.values().sum::<u64>(),
        m.sequential.transport_errors + m.concurrent.transport_errors,
    );
    if let Some(last) = last {
        let _ = write!(out, " {last} |");
    }
    let _ = writeln!(out);
}

/// Ferry's figure against each yardstick, by `figure(ferry, yardstick)`; `None` throughout when
/// Ferry was not measured.
pub fn against_each<'a>(
    ferry: Option<&Measured>,
    yardsticks: impl IntoIterator<Item = &'a Measured>,
    figure: impl Fn(&Measured, &Measured) -> Option<f64>,
) -> Vec<Option<f64>> {
    yardsticks
        .into_iter()
        .map(|yardstick| ferry.and_then(|ferry| figure(ferry, yardstick)))
        .collect()
}

/// Ferry's sequential `p`th percentile over a yardstick's.
pub fn sequential_ratio(ferry: &Measured, yardstick: &Measured, p: f64) -> Option<f64> {
    let (f, y) = (
        &ferry.sequential_by_placement,
        &yardstick.sequential_by_placement,
    );
    if f.is_empty() && y.is_empty() {
        return percentile_ratio(&ferry.sequential, &yardstick.sequential, p);
    }
    // Taken pinned: compared placement by placement (a request across cores costs both sides
    // the same wake-ups, which one side alone must not be charged), judged on the worse; and
    // only when both were taken in the same placements, each with a figure: else no ratio.
    let same_placements = f.len() == y.len()
        && f.iter()
            .all(|(placement, _)| y.iter().any(|(other, _)| other == placement));
    if !same_placements {
        return None;
    }
    let mut worst: Option<f64> = None;
    for (placement, f) in f {
        let (_, y) = y.iter().find(|(other, _)| other == placement)?;
        let ratio = percentile_ratio(f, y, p)?;
        worst = Some(worst.map_or(ratio, |w| w.max(ratio)));
    }
    worst
}

/// A system's sequential latency at percentile `p` for a table: by placement where it was
/// pinned (a pooled figure of two placements would mean neither), else the one figure.
pub fn sequential_latency(m: &Measured, p: f64) -> String {
    if m.sequential_by_placement.is_empty() {
        return latency(m.sequential.percentile(p));
    }
    m.sequential_by_placement
        .iter()
        .map(|(placement, sample)| {
            format!("{} {}", placement.name(), latency(sample.percentile(p)))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn percentile_ratio(ferry: &Sample, yardstick: &Sample, p: f64) -> Option<f64> {
    let f = ferry.percentile(p)?.as_secs_f64();
    let y = yardstick.percentile(p)?.as_secs_f64();
    (y > 0.0).then(|| f / y)
}

/// Ferry's CPU per request of the concurrent phase (both sides) over a yardstick's.
pub fn cpu_ratio(ferry: &Measured, yardstick: &Measured) -> Option<f64> {
    let f = ferry.cpu_per_request()?.total_us;
    let y = yardstick.cpu_per_request()?.total_us;
    (y > 0.0).then(|| f / y)
}

/// Ferry's concurrent throughput as a share of a yardstick's.
pub fn throughput_share(ferry: &Measured, yardstick: &Measured) -> Option<f64> {
    let y = yardstick.concurrent.per_second();
    (y > 0.0).then(|| ferry.concurrent.per_second() / y)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::sequential_ratio;
    use crate::fixtures::measured;
    use crate::load::Sample;
    use crate::placement::Placement;

    fn placed(together_us: u64, apart_us: u64) -> Vec<(Placement, Sample)> {
        let sample = |us| {
            Sample::from_latencies(vec![Duration::from_micros(us); 10], Duration::from_secs(1))
        };
        vec![
            (Placement::Together, sample(together_us)),
            (Placement::Apart, sample(apart_us)),
        ]
    }

    #[test]
    fn pinned_sequential_figures_are_compared_placement_by_placement_and_judged_on_the_worse() {
        let mut ferry = measured(50, 1000, None);
        let mut yardstick = measured(40, 1000, None);
        // Pooled, 50 over 40 would say 1.25x; by placement it is 1.3x together, 1.1x apart.
        ferry.sequential_by_placement = placed(26, 66);
        yardstick.sequential_by_placement = placed(20, 60);
        let ratio = sequential_ratio(&ferry, &yardstick, 50.0).unwrap_or_default();
        assert!((ratio - 1.3).abs() < 1e-9, "{ratio}");
        // One side pinned and the other not, or pinned in other placements: no ratio.
        yardstick.sequential_by_placement.truncate(1);
        assert_eq!(sequential_ratio(&ferry, &yardstick, 50.0), None);
        yardstick.sequential_by_placement.clear();
        assert_eq!(sequential_ratio(&ferry, &yardstick, 50.0), None);
        // Neither pinned: the pooled figures, as before.
        ferry.sequential_by_placement.clear();
        let ratio = sequential_ratio(&ferry, &yardstick, 50.0).unwrap_or_default();
        assert!((ratio - 1.25).abs() < 1e-9, "{ratio}");
    }

    #[test]
    fn a_pinned_system_shows_its_latency_by_placement() {
        let mut m = measured(50, 1000, None);
        m.sequential_by_placement = placed(26, 66);
        let cell = super::sequential_latency(&m, 50.0);
        assert!(
            cell.starts_with("together ") && cell.contains(", apart "),
            "{cell}"
        );
        assert_ne!(
            cell,
            super::sequential_latency(&measured(50, 1000, None), 50.0)
        );
    }

    #[test]
    fn targets_are_judged_against_the_first_bare_layout() {
        let report = crate::fixtures::writes_report();
        let text = report.render();
        assert!(
            text.contains("| seq p50 | 2.50x | 0.83x | <= 2x | **no** |"),
            "{text}"
        );
        assert!(
            text.contains("| 64-writer throughput | 55% | 92% | >= 50% | yes |"),
            "{text}"
        );
        assert!(text.contains("| >= 10,000/s | yes |"), "{text}");
        assert!(report.ferry_clean());
        // 750 ms of CPU over 11,000 writes.
        assert!(
            text.contains("| Ferry (b, a) | 45 us | 23 us | 68 us | 0.75 |"),
            "{text}"
        );
    }
}
