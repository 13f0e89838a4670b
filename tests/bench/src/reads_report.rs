//! The figures of one `reads` run as a markdown report: a table per kind of read (cache hits,
//! owner reads), Ferry's ratios to the yardsticks against the read path's targets, what
//! `X-Ferry-Source` said, CPU per read, then every failure seen.

use std::fmt::Write as _;

use crate::bare_relay::Layout;
use crate::figures::{cell, count};
use crate::load::Sample;
use crate::report::{self, against_each, cpu_ratio, sequential_ratio, throughput_share, Measured};
use crate::targets::{self, Bound, Line, Unit};

/// Ferry's cache-hit p50 may be at most this many times the HTTP server's from memory.
const HIT_P50_RATIO_TARGET: f64 = 1.3;
/// Ferry's owner-read p50 may be at most this many times the bare relay's.
const OWNER_P50_RATIO_TARGET: f64 = 1.5;
/// Ferry's 64-reader owner reads must be at least this share of the bare relay's.
const OWNER_THROUGHPUT_SHARE_TARGET: f64 = 0.5;
/// Ferry's CPU per owner read at most this many times the bare relay's (the scale issue,
/// issue 15, done-when item 1).
const OWNER_CPU_RATIO_TARGET: f64 = 1.5;
/// The `X-Ferry-Source` of an answer from the read cache.
const FROM_CACHE: &str = "cache";

/// One bare system's figures.
#[derive(Debug)]
pub struct Row {
    pub layout: Layout,
    pub measured: Measured,
}

/// Everything one run measured.
#[derive(Debug)]
pub struct ReadsReport {
    /// Whether this was a `--quick` run.
    pub quick: bool,
    /// What was run: counts, bounds, the machine.
    pub plan: String,
    /// The HTTP server answering from memory, in the order given; the first is the reference.
    pub hits: Vec<Row>,
    /// The bare read relay, in the same order.
    pub owner_reads: Vec<Row>,
    /// Ferry's figures, or why there are none.
    pub ferry_hits: Result<Measured, String>,
    pub ferry_owner_reads: Result<Measured, String>,
    /// Setup and stop events worth a line.
    pub ferry_notes: Vec<String>,
    pub ferry_layout: String,
    pub load_before: String,
    pub load_after: String,
    /// Cores' worth of CPU used by other work during the run, where `/proc` could tell.
    pub others_cores: Option<f64>,
}

impl ReadsReport {
    /// Whether Ferry was measured and every Ferry read was answered `200` with the value.
    pub fn ferry_clean(&self) -> bool {
        [&self.ferry_hits, &self.ferry_owner_reads]
            .iter()
            .all(|ferry| ferry.as_ref().is_ok_and(Measured::clean))
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "## Ferry read path vs. bare yardsticks\n");
        let _ = writeln!(out, "{}\n", self.plan);

        let _ = writeln!(
            out,
            "Cache hits: `GET` on b of keys b has read before, against a hyper server answering \
             from memory.\n"
        );
        table(
            &mut out,
            "HTTP from memory",
            &self.hits,
            "Ferry: b",
            &self.ferry_hits,
        );
        let _ = writeln!(
            out,
            "Owner reads: `GET` on b of keys b has never read (b -> QUIC -> a), against the bare \
             relay (hyper -> one pooled quinn connection -> a map in memory).\n"
        );
        table(
            &mut out,
            "bare relay",
            &self.owner_reads,
            "Ferry: b -> QUIC -> a",
            &self.ferry_owner_reads,
        );
        self.render_targets(&mut out);
        self.render_sources(&mut out);
        self.render_cpu(&mut out);
        self.render_notes(&mut out);
        out
    }

    /// The table, even when only one kind of read of Ferry's was measured: the other's lines
    /// show dashes, and the targets still judged agree with the JSON's.
    fn render_targets(&self, out: &mut String) {
        let lines = self.target_lines();
        if !targets::any_figure(&lines) {
            let _ = writeln!(
                out,
                "No ratios: Ferry or the bare systems were not measured.\n"
            );
            return;
        }
        let layouts: Vec<Layout> = self.hits.iter().map(|row| row.layout).collect();
        targets::render(out, "Ferry / yardstick", &layouts, &lines);
    }

    /// The layout the targets are judged against: the first one run.
    pub fn reference(&self) -> Option<Layout> {
        self.hits
            .first()
            .or(self.owner_reads.first())
            .map(|row| row.layout)
    }

    /// The lines of the targets table; the judged ones are [`ReadsReport::targets`].
    pub fn target_lines(&self) -> Vec<Line> {
        let hits = self.ferry_hits.as_ref().ok();
        let owner = self.ferry_owner_reads.as_ref().ok();
        let against = |ferry: Option<&Measured>,
                       rows: &[Row],
                       figure: fn(&Measured, &Measured) -> Option<f64>| {
            against_each(ferry, rows.iter().map(|row| &row.measured), figure)
        };
        let p50 = |f: &Measured, y: &Measured| sequential_ratio(f, y, 50.0);
        let p99 = |f: &Measured, y: &Measured| sequential_ratio(f, y, 99.0);
        vec![
            Line::judged_on_reference(
                "cache-hit seq p50 (vs. HTTP from memory)",
                "cache_hit_seq_p50_ratio",
                Unit::Ratio,
                Bound::AtMost(HIT_P50_RATIO_TARGET),
                against(hits, &self.hits, p50),
            ),
            Line::reported(
                "cache-hit seq p99",
                Unit::Ratio,
                against(hits, &self.hits, p99),
            ),
            Line::reported(
                "cache-hit 64-reader throughput",
                Unit::Share,
                against(hits, &self.hits, throughput_share),
            ),
            Line::judged_on_reference(
                "owner-read seq p50 (vs. bare relay)",
                "owner_read_seq_p50_ratio",
                Unit::Ratio,
                Bound::AtMost(OWNER_P50_RATIO_TARGET),
                against(owner, &self.owner_reads, p50),
            ),
            Line::reported(
                "owner-read seq p99",
                Unit::Ratio,
                against(owner, &self.owner_reads, p99),
            ),
            Line::judged_on_reference(
                "owner-read 64-reader throughput",
                "owner_read_concurrent_throughput_share",
                Unit::Share,
                Bound::AtLeast(OWNER_THROUGHPUT_SHARE_TARGET),
                against(owner, &self.owner_reads, throughput_share),
            ),
            Line::judged_on_reference(
                "CPU per owner read (scale)",
                "owner_read_cpu_ratio",
                Unit::Ratio,
                Bound::AtMost(OWNER_CPU_RATIO_TARGET),
                against(owner, &self.owner_reads, cpu_ratio),
            ),
        ]
    }

    /// Every target of the read path, judged; `value` and `met` are `None` where Ferry or the
    /// reference layout was not measured.
    pub fn targets(&self) -> Vec<targets::Judged> {
        targets::judged(self.target_lines())
    }

    /// What `X-Ferry-Source` said about Ferry's measured reads, and so what was measured.
    fn render_sources(&self, out: &mut String) {
        let Ok(hits) = &self.ferry_hits else { return };
        let cached = |sample: &Sample| sample.sources.get(FROM_CACHE).copied().unwrap_or(0);
        let share = |sample: &Sample| cached(sample) as f64 / (sample.ok().max(1) as f64);
        let (seq, conc) = (&hits.sequential, &hits.concurrent);
        let verdict =
            if seq.ok() > 0 && cached(seq) == seq.ok() as u64 && cached(conc) == conc.ok() as u64 {
                "b's read cache answered every measured cache-hit read: the cache-hit rows measure \
             the cache."
                    .to_string()
            } else if cached(seq) + cached(conc) > 0 {
                format!(
                    "b's read cache answered {:.1}% of the sequential and {:.1}% of the 64-reader \
                 cache-hit reads; the others were answered by the sources listed (for example \
                 an entry asked of its owner again once its freshness ran out).",
                    share(seq) * 100.0,
                    share(conc) * 100.0
                )
            } else {
                "**b's read cache answered none of them** (it is not wired in, or did not keep \
             these keys): the cache-hit rows measure reads of the same few keys answered by \
             the source named, not the cache, and the 1.3x target is judged on them as they are."
                    .to_string()
            };
        let _ = writeln!(out, "`X-Ferry-Source` of Ferry's measured reads: {verdict}");
        let _ = writeln!(
            out,
            "- cache-hit keys: sequential {}; 64 readers {}",
            sources(&hits.sequential),
            sources(&hits.concurrent)
        );
        if let Ok(owner) = &self.ferry_owner_reads {
            let _ = writeln!(
                out,
                "- owner reads: sequential {}; 64 readers {}",
                sources(&owner.sequential),
                sources(&owner.concurrent)
            );
        }
        let _ = writeln!(out);
    }

    fn render_cpu(&self, out: &mut String) {
        for (heading, bare_name, rows, ferry) in [
            (
                "CPU per read, 64 readers, cache-hit keys",
                "HTTP from memory",
                &self.hits,
                &self.ferry_hits,
            ),
            (
                "CPU per read, 64 readers, owner reads",
                "bare relay",
                &self.owner_reads,
                &self.ferry_owner_reads,
            ),
        ] {
            let systems = rows
                .iter()
                .map(|row| (format!("{bare_name}, {}", row.layout.name()), &row.measured))
                .chain(ferry.iter().map(|m| ("Ferry (b, a)".to_string(), m)));
            report::render_cpu(out, heading, "read", systems);
        }
    }

    fn render_notes(&self, out: &mut String) {
        let _ = writeln!(out, "Layouts:");
        for row in &self.hits {
            let _ = writeln!(
                out,
                "- {}: {}",
                row.layout.name(),
                row.layout.describe_reads()
            );
        }
        let _ = writeln!(out, "- Ferry: {}\n", self.ferry_layout);
        report::render_machine(out, &self.load_before, &self.load_after, self.others_cores);

        let mut failures = Vec::new();
        let systems = self
            .hits
            .iter()
            .map(|row| {
                (
                    format!("HTTP from memory ({})", row.layout.name()),
                    Ok(&row.measured),
                )
            })
            .chain(self.owner_reads.iter().map(|row| {
                (
                    format!("bare relay ({})", row.layout.name()),
                    Ok(&row.measured),
                )
            }))
            .chain([
                (
                    "Ferry, cache-hit keys".to_string(),
                    self.ferry_hits.as_ref(),
                ),
                (
                    "Ferry, owner reads".to_string(),
                    self.ferry_owner_reads.as_ref(),
                ),
            ])
            .collect::<Vec<_>>();
        let pinned = systems
            .iter()
            .any(|(_, m)| m.is_ok_and(|m| !m.sequential_by_placement.is_empty()));
        if pinned {
            let _ = writeln!(
                out,
                "Sequential cache hits by placement (ratios taken placement by placement, judged \
                 on the worse):"
            );
        }
        for (name, measured) in &systems {
            for note in measured.iter().flat_map(|m| &m.notes) {
                let _ = writeln!(out, "- {name}: {note}");
            }
        }
        let _ = writeln!(out);
        for (name, measured) in systems {
            let measured = match measured {
                Ok(measured) => measured,
                Err(why) => {
                    failures.push(format!("- {name}: not measured: {why}"));
                    continue;
                }
            };
            failures.extend(measured.failure_lines(&name, "64 readers"));
        }
        if failures.is_empty() {
            let _ = writeln!(out, "Every read was answered 200 with the 64-byte value.");
        } else {
            let _ = writeln!(out, "\nFailures (counted, not hidden):");
            for line in failures {
                let _ = writeln!(out, "{line}");
            }
        }
        for note in &self.ferry_notes {
            let _ = writeln!(out, "- Ferry: {note}");
        }
    }
}

/// One table: a row per bare layout, then Ferry's.
fn table(
    out: &mut String,
    bare_name: &str,
    rows: &[Row],
    ferry_name: &str,
    ferry: &Result<Measured, String>,
) {
    let _ = writeln!(
        out,
        "| system | layout | seq p50 | seq p99 | seq reads/s | 64-reader reads/s | 64-reader p50 | 64-reader p99 | not 200 / no answer | X-Ferry-Source |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    for bare in rows {
        report::row(
            out,
            bare_name,
            bare.layout.name(),
            &bare.measured,
            Some("-"),
        );
    }
    match ferry {
        Ok(m) => {
            let seen = [&m.sequential, &m.concurrent]
                .iter()
                .flat_map(|sample| sample.sources.keys())
                .map(|source| format!("`{source}`"))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
                .join(", ");
            report::row(out, ferry_name, "2 processes", m, Some(&seen));
        }
        Err(why) => {
            let _ = writeln!(
                out,
                "| {ferry_name} | 2 processes | not measured: {} ||||||||",
                cell(why)
            );
        }
    }
    let _ = writeln!(out);
}

/// The `X-Ferry-Source` values of a sample, `owner 2,000, cache 10`, most frequent first.
fn sources(sample: &Sample) -> String {
    let mut counts: Vec<(&String, &u64)> = sample.sources.iter().collect();
    counts.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    if counts.is_empty() {
        return "-".into();
    }
    counts
        .iter()
        .map(|(source, n)| format!("`{source}` {}", count(**n)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::fixtures::reads_report as report;

    #[test]
    fn targets_are_judged_against_the_first_layout() {
        let text = report("cache").render();
        for line in [
            "| cache-hit seq p50 (vs. HTTP from memory) | 1.20x | 1.00x | <= 1.3x | yes |",
            "| cache-hit 64-reader throughput | 80% | 60% | (reported) | - |",
            "| owner-read seq p50 (vs. bare relay) | 1.60x | 1.28x | <= 1.5x | **no** |",
            "| owner-read 64-reader throughput | 40% | 50% | >= 50% | **no** |",
            "| Ferry: b | 2 processes | 120 us | 120 us | 10/s | 24,000/s | 120 us | 120 us | 0 / 0 | `cache` |",
            "- cache-hit keys: sequential `cache` 10; 64 readers `cache` 24,000",
            "the cache-hit rows measure the cache.",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
        assert!(report("cache").ferry_clean());
    }

    #[test]
    fn the_report_says_how_much_the_cache_answered() {
        let text = report("owner").render();
        assert!(
            text.contains("**b's read cache answered none of them**"),
            "{text}"
        );
        let mut some = report("cache");
        if let Ok(hits) = some.ferry_hits.as_mut() {
            hits.concurrent.sources =
                BTreeMap::from([("cache".to_string(), 23_976), ("owner".to_string(), 24)]);
        }
        let text = some.render();
        assert!(
            text.contains("answered 100.0% of the sequential and 99.9% of the 64-reader"),
            "{text}"
        );
        assert!(
            text.contains("64 readers `cache` 23,976, `owner` 24"),
            "{text}"
        );
        let mut failed = report("cache");
        failed.ferry_owner_reads = Err("did not start".into());
        assert!(!failed.ferry_clean());
        assert!(failed.render().contains("not measured: did not start"));
    }
}
