//! The targets a report judges Ferry against, computed once, as data. The markdown table and the
//! JSON both show these [`Line`]s and [`Judged`] targets, so a figure cannot pass in one and
//! fail in the other.
//!
//! Each line holds Ferry's figure against every bare layout (the table's columns); a judged
//! line is judged on the first layout, the reference, except an absolute figure (Ferry's own
//! throughput), which compares with nothing. The figures themselves come from the reports
//! ([`crate::report::sequential_ratio`], ...): this module knows nothing of how they were
//! measured.

use std::fmt::{self, Write as _};

use serde::{Serialize, Serializer};

use crate::bare_relay::Layout;
use crate::figures::rate;

/// What a figure is, and so how the markdown shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Ferry's over a yardstick's: `2.50x`.
    Ratio,
    /// Ferry's as a share of a yardstick's: `55%` (the value is `0.55`).
    Share,
    /// Requests per second: `12,345/s`.
    PerSecond,
    /// How many: `0`, `12,345`.
    Count,
    /// A duration in seconds: `10.21 s`.
    Seconds,
    /// CPU as a share of one core, finer than [`Unit::Share`]: `0.42%` (the value is `0.0042`).
    CoreShare,
    /// A duration in milliseconds: `2.35 ms`.
    Millis,
    /// Memory in MiB: `14.2 MiB`.
    Mebibytes,
}

impl Unit {
    /// A measured figure, as a table cell.
    fn figure(self, value: f64) -> String {
        match self {
            Unit::Ratio => format!("{value:.2}x"),
            Unit::Share => format!("{:.0}%", value * 100.0),
            Unit::PerSecond => rate(value),
            Unit::Count => crate::figures::count(value.max(0.0).round() as u64),
            Unit::Seconds => format!("{value:.2} s"),
            Unit::CoreShare => format!("{:.2}% of a core", value * 100.0),
            Unit::Millis => format!("{value:.2} ms"),
            Unit::Mebibytes => format!("{value:.1} MiB"),
        }
    }

    /// A target's limit, as written in the table: `2x`, `1.3x` (no padding to two places, so
    /// the limit reads as the round number it is), `50%`, `10,000/s`.
    fn limit(self, value: f64) -> String {
        match self {
            Unit::Ratio => format!("{value}x"),
            Unit::Seconds => format!("{value} s"),
            Unit::CoreShare => format!("{}% of a core", value * 100.0),
            Unit::Millis => format!("{value} ms"),
            Unit::Mebibytes => format!("{value} MiB"),
            Unit::Share | Unit::PerSecond | Unit::Count => self.figure(value),
        }
    }
}

/// Which side of its limit a figure must stay on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    AtMost(f64),
    AtLeast(f64),
}

impl Bound {
    /// The one place a figure is judged.
    pub fn holds_for(self, value: f64) -> bool {
        match self {
            Bound::AtMost(limit) => value <= limit,
            Bound::AtLeast(limit) => value >= limit,
        }
    }

    fn parts(self) -> (&'static str, f64) {
        match self {
            Bound::AtMost(limit) => ("<=", limit),
            Bound::AtLeast(limit) => (">=", limit),
        }
    }
}

/// `<= 2`, `>= 0.5`: in the units of [`Judged::value`], for scripts.
impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (op, limit) = self.parts();
        write!(f, "{op} {limit}")
    }
}

/// A string rather than a bare number: a number alone would not say which way the bound goes.
impl Serialize for Bound {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// One target and how Ferry did against it. Serializes as exactly
/// `{"name", "value", "target", "met"}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judged {
    /// Stable and machine-readable: `seq_p50_ratio`, `owner_read_concurrent_throughput_share`.
    pub name: &'static str,
    /// Ferry's figure (a ratio or share against the reference layout, or a rate); `None` where
    /// it was not measured.
    pub value: Option<f64>,
    #[serde(rename = "target")]
    pub bound: Bound,
    /// `None` where there was nothing to judge.
    pub met: Option<bool>,
    #[serde(skip)]
    pub unit: Unit,
}

impl Judged {
    pub fn new(name: &'static str, unit: Unit, bound: Bound, value: Option<f64>) -> Self {
        Self {
            name,
            value,
            bound,
            met: value.map(|value| bound.holds_for(value)),
            unit,
        }
    }

    /// The target as the table writes it: `<= 2x`, `>= 50%`.
    pub fn shown(&self) -> String {
        let (op, limit) = self.bound.parts();
        format!("{op} {}", self.unit.limit(limit))
    }

    /// The figure as the table writes it: `2.50x`, `55%`, `-` when not measured.
    pub fn value_shown(&self) -> String {
        self.value
            .map_or_else(|| "-".to_string(), |value| self.unit.figure(value))
    }
}

/// One line of a targets table: Ferry's figure against each bare layout, and the target it is
/// judged by, if it is one (some figures are only reported).
#[derive(Debug, Clone)]
pub struct Line {
    /// What the table calls it: `seq p50`, `64-writer throughput`.
    pub label: &'static str,
    pub unit: Unit,
    /// One per layout, in the layouts' order; `None` where either side was not measured.
    pub figures: Vec<Option<f64>>,
    pub judged: Option<Judged>,
}

impl Line {
    /// A figure shown but not judged.
    pub fn reported(label: &'static str, unit: Unit, figures: Vec<Option<f64>>) -> Self {
        Self {
            label,
            unit,
            figures,
            judged: None,
        }
    }

    /// A figure judged against the first layout, the reference.
    pub fn judged_on_reference(
        label: &'static str,
        name: &'static str,
        unit: Unit,
        bound: Bound,
        figures: Vec<Option<f64>>,
    ) -> Self {
        let reference = figures.first().copied().flatten();
        Self {
            judged: Some(Judged::new(name, unit, bound, reference)),
            ..Self::reported(label, unit, figures)
        }
    }

    /// Ferry's own figure, the same in every column, judged on its own.
    pub fn judged_absolute(
        label: &'static str,
        name: &'static str,
        unit: Unit,
        bound: Bound,
        value: Option<f64>,
        layouts: usize,
    ) -> Self {
        Self {
            judged: Some(Judged::new(name, unit, bound, value)),
            ..Self::reported(label, unit, vec![value; layouts])
        }
    }
}

/// Whether any line has a figure to show: when none has, the table would be all dashes.
pub fn any_figure(lines: &[Line]) -> bool {
    lines
        .iter()
        .any(|line| line.figures.iter().any(Option::is_some))
}

/// The targets of `lines`, in order.
pub fn judged(lines: Vec<Line>) -> Vec<Judged> {
    lines.into_iter().filter_map(|line| line.judged).collect()
}

/// The table: `corner` heads the first column, then a column per layout, the target and
/// whether it was met against the first layout.
pub fn render(out: &mut String, corner: &str, layouts: &[Layout], lines: &[Line]) {
    let mut header = format!("| {corner} |");
    let mut rule = String::from("|---|");
    for layout in layouts {
        let _ = write!(header, " vs. {} |", layout.name());
        rule.push_str("---|");
    }
    let reference = layouts.first().map_or("-", |layout| layout.name());
    let _ = writeln!(out, "{header} target | met (vs. {reference}) |");
    let _ = writeln!(out, "{rule}---|---|");
    for line in lines {
        let cells = line
            .figures
            .iter()
            .map(|figure| figure.map_or_else(|| "-".to_string(), |f| line.unit.figure(f)))
            .collect::<Vec<_>>()
            .join(" | ");
        let (target, met) = match &line.judged {
            Some(judged) => (judged.shown(), met(judged.met)),
            None => ("(reported)".to_string(), "-"),
        };
        let _ = writeln!(out, "| {} | {cells} | {target} | {met} |", line.label);
    }
    let _ = writeln!(out);
}

/// A report's `## Targets` section: each judged target with its value, bound and verdict.
pub fn render_judged(out: &mut String, judged: &[Judged]) {
    let _ = writeln!(out, "## Targets\n");
    let _ = writeln!(out, "| target | value | target | met |");
    let _ = writeln!(out, "|---|---|---|---|");
    for judged in judged {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            judged.name,
            judged.value_shown(),
            judged.shown(),
            met(judged.met)
        );
    }
}

/// The table's `met` cell: `yes`, `**no**`, or `-` when there was nothing to judge.
pub fn met(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "yes",
        Some(false) => "**no**",
        None => "-",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_judges_its_limit_as_met() {
        assert!(Bound::AtMost(2.0).holds_for(2.0));
        assert!(!Bound::AtMost(2.0).holds_for(2.01));
        assert!(Bound::AtLeast(0.5).holds_for(0.5));
        assert!(!Bound::AtLeast(0.5).holds_for(0.49));
    }

    #[test]
    fn targets_read_one_way_for_people_and_another_for_scripts() {
        let judged = Judged::new("x", Unit::Ratio, Bound::AtMost(2.0), Some(2.5));
        assert_eq!(judged.shown(), "<= 2x");
        assert_eq!(judged.bound.to_string(), "<= 2");
        assert_eq!(judged.met, Some(false));
        let judged = Judged::new("y", Unit::Share, Bound::AtLeast(0.5), None);
        assert_eq!(judged.shown(), ">= 50%");
        assert_eq!(judged.bound.to_string(), ">= 0.5");
        assert_eq!(judged.met, None);
        let judged = Judged::new("z", Unit::PerSecond, Bound::AtLeast(10_000.0), Some(1.0));
        assert_eq!(judged.shown(), ">= 10,000/s");
        assert_eq!(judged.bound.to_string(), ">= 10000");
        let judged = Judged::new("n", Unit::Count, Bound::AtMost(0.0), Some(3.0));
        assert_eq!(
            (judged.shown(), judged.value_shown()),
            ("<= 0".into(), "3".into())
        );
        assert_eq!(judged.met, Some(false));
        let judged = Judged::new("s", Unit::Seconds, Bound::AtMost(10.5), Some(0.25));
        assert_eq!(
            (judged.shown(), judged.value_shown()),
            ("<= 10.5 s".into(), "0.25 s".into())
        );
        assert_eq!(judged.met, Some(true));
    }
}
