//! The reports as JSON, for scripts (`--json`): one object per run, holding the figures of the
//! markdown tables in plain units (microseconds, requests per second, shares as fractions) and
//! the targets as [`crate::targets`] judged them, the same judgement the markdown shows.
//!
//! Every key is always present, `null` where there is nothing to say (a system not measured,
//! CPU `/proc` could not tell), so a script can index without checking first.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::load::Sample;
use crate::placement::Placement;
use crate::reads_report::{ReadsReport, Row};
use crate::report::{CpuPerRequest, Measured, Report};
use crate::targets::Judged;

/// The layout cell of Ferry's rows, as in the markdown tables.
const FERRY_LAYOUT: &str = "2 processes";

/// `ferry-bench writes --json`.
pub fn writes(report: &Report) -> Result<String, serde_json::Error> {
    let ferry = System::of("Ferry", FERRY_LAYOUT, report.ferry.as_ref());
    serde_json::to_string(&Writes {
        bench: "writes",
        quick: report.quick,
        plan: &report.plan,
        reference_layout: report.bare.first().map(|(layout, _)| layout.name()),
        floor: Phase::of(&report.floor),
        systems: report
            .bare
            .iter()
            .map(|(layout, bare)| System::of("bare relay", layout.name(), Ok(bare)))
            .chain([ferry])
            .collect(),
        targets: report.targets(),
        ferry_clean: report.ferry_clean(),
        ferry_layout: &report.ferry_layout,
        machine: Machine::of(&report.load_before, &report.load_after, report.others_cores),
    })
}

/// `ferry-bench reads --json`.
pub fn reads(report: &ReadsReport) -> Result<String, serde_json::Error> {
    serde_json::to_string(&Reads {
        bench: "reads",
        quick: report.quick,
        plan: &report.plan,
        reference_layout: report.reference().map(|layout| layout.name()),
        cache_hits: table("HTTP from memory", &report.hits, report.ferry_hits.as_ref()),
        owner_reads: table(
            "bare relay",
            &report.owner_reads,
            report.ferry_owner_reads.as_ref(),
        ),
        targets: report.targets(),
        ferry_clean: report.ferry_clean(),
        ferry_layout: &report.ferry_layout,
        ferry_notes: &report.ferry_notes,
        machine: Machine::of(&report.load_before, &report.load_after, report.others_cores),
    })
}

/// `ferry-bench overload --json`: the report as it is (it is made to be serialized).
pub fn overload(
    report: &crate::overload::report::OverloadRuns,
) -> Result<String, serde_json::Error> {
    serde_json::to_string(report)
}

/// A reads table: a row per bare layout, then Ferry's.
fn table<'a>(
    bare_name: &'static str,
    rows: &'a [Row],
    ferry: Result<&'a Measured, &'a String>,
) -> Vec<System<'a>> {
    rows.iter()
        .map(|row| System::of(bare_name, row.layout.name(), Ok(&row.measured)))
        .chain([System::of("Ferry", FERRY_LAYOUT, ferry)])
        .collect()
}

#[derive(Debug, Serialize)]
struct Writes<'a> {
    bench: &'static str,
    quick: bool,
    plan: &'a str,
    /// The layout the ratios and shares in `targets` are against.
    reference_layout: Option<&'static str>,
    /// One durable SQLite insert at a time: only `sequential`-like figures.
    floor: Phase<'a>,
    /// Each bare layout, then Ferry.
    systems: Vec<System<'a>>,
    targets: Vec<Judged>,
    /// Ferry was measured and answered every write `200` (the exit code says the same).
    ferry_clean: bool,
    ferry_layout: &'a str,
    machine: Machine<'a>,
}

#[derive(Debug, Serialize)]
struct Reads<'a> {
    bench: &'static str,
    quick: bool,
    plan: &'a str,
    reference_layout: Option<&'static str>,
    /// HTTP from memory in each layout, then Ferry.
    cache_hits: Vec<System<'a>>,
    /// The bare relay in each layout, then Ferry.
    owner_reads: Vec<System<'a>>,
    targets: Vec<Judged>,
    ferry_clean: bool,
    ferry_layout: &'a str,
    ferry_notes: &'a [String],
    machine: Machine<'a>,
}

/// A row of a table: one system in one layout.
#[derive(Debug, Serialize)]
struct System<'a> {
    system: &'static str,
    layout: &'a str,
    /// Why there are no figures; `null` when measured.
    not_measured: Option<&'a str>,
    sequential: Option<Phase<'a>>,
    /// The sequential phase by placement where it was pinned (`sequential` then pools them);
    /// empty where it was not.
    sequential_by_placement: Vec<Placed<'a>>,
    concurrent: Option<Phase<'a>>,
    /// Of the concurrent phase; `null` where `/proc` could not tell or the phase was too short.
    cpu_per_request: Option<CpuPerRequest>,
    /// Requests of both phases answered with something other than `200` or not at all.
    failures: Option<u64>,
    notes: &'a [String],
}

impl<'a> System<'a> {
    fn of(
        system: &'static str,
        layout: &'a str,
        measured: Result<&'a Measured, &'a String>,
    ) -> Self {
        match measured {
            Ok(m) => Self {
                system,
                layout,
                not_measured: None,
                sequential: Some(Phase::of(&m.sequential)),
                sequential_by_placement: m
                    .sequential_by_placement
                    .iter()
                    .map(|(placement, sample)| Placed {
                        placement: *placement,
                        phase: Phase::of(sample),
                    })
                    .collect(),
                concurrent: Some(Phase::of(&m.concurrent)),
                cpu_per_request: m.cpu_per_request(),
                failures: Some(m.sequential.failures() + m.concurrent.failures()),
                notes: &m.notes,
            },
            Err(why) => Self {
                system,
                layout,
                not_measured: Some(why),
                sequential: None,
                sequential_by_placement: Vec::new(),
                concurrent: None,
                cpu_per_request: None,
                failures: None,
                notes: &[],
            },
        }
    }
}

/// One phase of one system, taken pinned in `placement`.
#[derive(Debug, Serialize)]
struct Placed<'a> {
    placement: Placement,
    #[serde(flatten)]
    phase: Phase<'a>,
}

/// One phase of one system.
#[derive(Debug, Serialize)]
struct Phase<'a> {
    /// Requests answered as they should be; the percentiles and rate count only these.
    ok: usize,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    per_second: f64,
    elapsed_s: f64,
    /// Answers other than `200`, by status.
    not_200: &'a BTreeMap<u16, u64>,
    /// Requests that got no answer at all.
    no_answer: u64,
    first_failure: Option<&'a str>,
    /// Successful answers by `X-Ferry-Source` (`-` for none).
    sources: &'a BTreeMap<String, u64>,
}

impl<'a> Phase<'a> {
    fn of(sample: &'a Sample) -> Self {
        Self {
            ok: sample.ok(),
            p50_us: sample.percentile(50.0).map(micros),
            p99_us: sample.percentile(99.0).map(micros),
            per_second: sample.per_second(),
            elapsed_s: sample.elapsed.as_secs_f64(),
            not_200: &sample.non_200,
            no_answer: sample.transport_errors,
            first_failure: sample.first_failure.as_deref(),
            sources: &sample.sources,
        }
    }
}

/// What else the machine was doing, which says how far to trust the absolute figures.
#[derive(Debug, Serialize)]
struct Machine<'a> {
    cores: usize,
    load_before: &'a str,
    load_after: &'a str,
    /// Cores' worth of CPU other work used during the run; `null` where `/proc` could not tell.
    others_cores: Option<f64>,
}

impl<'a> Machine<'a> {
    fn of(load_before: &'a str, load_after: &'a str, others_cores: Option<f64>) -> Self {
        Self {
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            load_before,
            load_after,
            others_cores,
        }
    }
}

/// Whole and fractional microseconds, so sub-microsecond differences survive.
fn micros(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::fixtures::{reads_report, writes_report};
    use crate::targets::Line;

    fn parsed(json: Result<String, serde_json::Error>) -> Value {
        let text = json.expect("serializes");
        assert_eq!(text.lines().count(), 1, "one line: {text}");
        serde_json::from_str(&text).expect("parses as JSON")
    }

    /// The `targets` array, after checking every entry has exactly the four keys.
    fn targets(value: &Value) -> &[Value] {
        let targets = value["targets"].as_array().expect("a targets array");
        for target in targets {
            let mut keys: Vec<&str> = target
                .as_object()
                .expect("each target an object")
                .keys()
                .map(String::as_str)
                .collect();
            keys.sort_unstable();
            assert_eq!(keys, ["met", "name", "target", "value"], "{target}");
            assert!(target["name"].is_string(), "{target}");
            assert!(target["target"].is_string(), "{target}");
            assert!(target["value"].is_number() || target["value"].is_null());
            assert!(target["met"].is_boolean() || target["met"].is_null());
        }
        targets
    }

    /// The `met` cell of the markdown row labelled `label`, read back.
    fn markdown_met(markdown: &str, label: &str) -> Option<Option<bool>> {
        let row = markdown
            .lines()
            .find(|line| line.starts_with(&format!("| {label} |")))?;
        match row.trim_end_matches('|').rsplit('|').next()?.trim() {
            "yes" => Some(Some(true)),
            "**no**" => Some(Some(false)),
            "-" => Some(None),
            other => panic!("unexpected met cell {other:?} in {row}"),
        }
    }

    /// Every judged line: the JSON target of that name says what the markdown row says.
    fn assert_met_agrees(json: &Value, markdown: &str, lines: &[Line]) {
        let judged: Vec<_> = lines.iter().filter(|l| l.judged.is_some()).collect();
        assert_eq!(targets(json).len(), judged.len(), "{json}");
        for line in judged {
            let Some(judgement) = &line.judged else {
                continue;
            };
            let target = targets(json)
                .iter()
                .find(|t| t["name"] == judgement.name)
                .expect("a JSON target for every judged line");
            let in_markdown = markdown_met(markdown, line.label).expect("a markdown row");
            assert_eq!(target["met"].as_bool(), in_markdown, "{}", line.label);
        }
    }

    #[test]
    fn writes_json_holds_the_figures_and_the_targets() {
        let report = writes_report();
        let json = parsed(writes(&report));
        assert_eq!(json["bench"], "writes");
        assert_eq!(json["quick"], true);
        assert_eq!(json["reference_layout"], "split");
        assert_eq!(json["floor"]["p50_us"], 200.0);
        let systems = json["systems"].as_array().expect("a systems array");
        let names: Vec<_> = systems
            .iter()
            .map(|s| (s["system"].as_str(), s["layout"].as_str()))
            .collect();
        assert_eq!(
            names,
            [
                (Some("bare relay"), Some("split")),
                (Some("bare relay"), Some("per-process")),
                (Some("Ferry"), Some("2 processes")),
            ]
        );
        let ferry = &systems[2];
        assert_eq!(ferry["sequential"]["p50_us"], 250.0);
        assert_eq!(ferry["concurrent"]["per_second"], 11_000.0);
        assert_eq!(ferry["failures"], 0);
        // 750 ms of CPU over 11,000 writes.
        let total = ferry["cpu_per_request"]["total_us"]
            .as_f64()
            .expect("CPU measured");
        assert!((total - 68.18).abs() < 0.01, "{ferry}");

        let targets = targets(&json);
        let by_name = |name: &str| {
            targets
                .iter()
                .find(|t| t["name"] == name)
                .expect("the target is there")
        };
        let p50 = by_name("seq_p50_ratio");
        assert_eq!(
            (&p50["value"], &p50["target"], &p50["met"]),
            (&2.5.into(), &"<= 2".into(), &false.into())
        );
        let share = by_name("concurrent_throughput_share");
        assert_eq!(
            (&share["value"], &share["target"], &share["met"]),
            (&0.55.into(), &">= 0.5".into(), &true.into())
        );
        let rate = by_name("concurrent_writes_per_second");
        assert_eq!(
            (&rate["value"], &rate["target"], &rate["met"]),
            (&11_000.0.into(), &">= 10000".into(), &true.into())
        );
        // The same 750 ms of CPU over 11,000 writes against the split relay's 20,000.
        let cpu = by_name("cpu_per_write_ratio");
        let ratio = cpu["value"].as_f64().expect("a CPU ratio");
        assert!((ratio - 20_000.0 / 11_000.0).abs() < 1e-9, "{cpu}");
        assert_eq!(
            (&cpu["target"], &cpu["met"]),
            (&"<= 1.5".into(), &false.into())
        );
        let share = by_name("scale_concurrent_throughput_share");
        assert_eq!(
            (&share["value"], &share["target"], &share["met"]),
            (&0.55.into(), &">= 0.7".into(), &false.into())
        );
        assert_met_agrees(&json, &report.render(), &report.target_lines());
    }

    #[test]
    fn reads_json_holds_the_figures_and_the_targets() {
        let report = reads_report("cache");
        let json = parsed(reads(&report));
        assert_eq!(json["bench"], "reads");
        assert_eq!(json["quick"], false);
        assert_eq!(json["cache_hits"][0]["system"], "HTTP from memory");
        assert_eq!(json["cache_hits"][2]["system"], "Ferry");
        assert_eq!(
            json["cache_hits"][2]["concurrent"]["sources"]["cache"],
            24_000
        );
        assert_eq!(json["owner_reads"][1]["layout"], "per-process");
        assert_eq!(json["owner_reads"][2]["sequential"]["p99_us"], 320.0);
        let met: Vec<_> = targets(&json)
            .iter()
            .map(|t| (t["name"].as_str(), t["met"].as_bool()))
            .collect();
        assert_eq!(
            met,
            [
                (Some("cache_hit_seq_p50_ratio"), Some(true)),
                (Some("owner_read_seq_p50_ratio"), Some(false)),
                (Some("owner_read_concurrent_throughput_share"), Some(false)),
                (Some("owner_read_cpu_ratio"), Some(false)),
            ]
        );
        let cpu = targets(&json)
            .iter()
            .find(|t| t["name"] == "owner_read_cpu_ratio")
            .expect("the CPU target is there");
        let ratio = cpu["value"].as_f64().expect("a CPU ratio");
        assert!((ratio - 20_000.0 / 8_000.0).abs() < 1e-9, "{cpu}");
        assert_eq!(cpu["target"], "<= 1.5");
        assert_met_agrees(&json, &report.render(), &report.target_lines());
    }

    #[test]
    fn pinned_cache_hits_are_judged_on_the_worse_placement_in_both_outputs() {
        let sample = |us| {
            Sample::from_latencies(vec![Duration::from_micros(us); 10], Duration::from_secs(1))
        };
        let placed = |together, apart| {
            vec![
                (Placement::Together, sample(together)),
                (Placement::Apart, sample(apart)),
            ]
        };
        let mut report = reads_report("cache");
        for row in &mut report.hits {
            row.measured.sequential_by_placement = placed(100, 300);
        }
        if let Ok(hits) = report.ferry_hits.as_mut() {
            // 1.1x together, 1.4x apart: judged 1.4x, missed, where the pooled 1.2x would pass.
            hits.sequential_by_placement = placed(110, 420);
        }
        let json = parsed(reads(&report));
        let hit = targets(&json)
            .iter()
            .find(|t| t["name"] == "cache_hit_seq_p50_ratio")
            .expect("the cache-hit target is there");
        let ratio = hit["value"].as_f64().expect("a cache-hit ratio");
        assert!((ratio - 1.4).abs() < 1e-9, "{hit}");
        assert_eq!(hit["met"], false);
        assert_eq!(
            json["cache_hits"][2]["sequential_by_placement"][1]["placement"],
            "apart"
        );
        assert_eq!(
            json["cache_hits"][2]["sequential_by_placement"][1]["p50_us"],
            420.0
        );
        let text = report.render();
        assert!(text.contains("together 110 us, apart 420 us"), "{text}");
        assert!(
            text.contains("Sequential cache hits by placement"),
            "{text}"
        );
        assert_met_agrees(&json, &text, &report.target_lines());
    }

    #[test]
    fn what_was_not_measured_is_null_not_missing() {
        let mut report = writes_report();
        report.ferry = Err("did not start".into());
        let json = parsed(writes(&report));
        assert!(report.render().contains("No ratios"));
        assert_eq!(json["systems"][2]["not_measured"], "did not start");
        assert!(json["systems"][2]["sequential"].is_null());
        assert_eq!(json["ferry_clean"], false);
        let unjudged = targets(&json);
        assert_eq!(unjudged.len(), 5);
        assert!(unjudged
            .iter()
            .all(|t| t["value"].is_null() && t["met"].is_null()));

        let mut report = reads_report("cache");
        report.ferry_owner_reads = Err("did not start".into());
        let json = parsed(reads(&report));
        assert_eq!(json["owner_reads"][2]["not_measured"], "did not start");
        assert_eq!(json["cache_hits"][2]["not_measured"], Value::Null);
        // The cache-hit target is still judged, here and in the markdown: only the owner reads
        // were lost.
        let met: Vec<_> = targets(&json).iter().map(|t| t["met"].as_bool()).collect();
        assert_eq!(met, [Some(true), None, None, None]);
        assert_met_agrees(&json, &report.render(), &report.target_lines());
    }
}
