//! Synthetic reports for the tests, with figures chosen so that some targets are met and some
//! are not: what the markdown, the JSON and the judgement are checked against.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::bare_relay::Layout;
use crate::cpu;
use crate::load::Sample;
use crate::reads_report::{ReadsReport, Row};
use crate::report::{Measured, Report};

/// A system whose every request took `p50_us`, `per_second` of them in the concurrent second;
/// every answer's `X-Ferry-Source` is `source`, if given.
pub fn measured(p50_us: u64, per_second: u64, source: Option<&str>) -> Measured {
    let with_sources = |mut sample: Sample| {
        if let Some(source) = source {
            sample.sources = BTreeMap::from([(source.to_string(), sample.ok() as u64)]);
        }
        sample
    };
    let latencies = vec![Duration::from_micros(p50_us); 10];
    let many = vec![Duration::from_micros(p50_us); per_second as usize];
    Measured {
        sequential: with_sources(Sample::from_latencies(latencies, Duration::from_secs(1))),
        sequential_by_placement: Vec::new(),
        concurrent: with_sources(Sample::from_latencies(many, Duration::from_secs(1))),
        cpu: None,
        notes: Vec::new(),
    }
}

/// [`measured`] with 750 ms of CPU in the concurrent phase: 500 on the calling side, 250 on
/// the owning side.
pub fn measured_with_cpu(p50_us: u64, per_second: u64) -> Measured {
    Measured {
        cpu: Some(cpu::Usage {
            by_thread: vec![
                (cpu::Side::Caller, "http".into(), Duration::from_millis(500)),
                (
                    cpu::Side::Owner,
                    "writer".into(),
                    Duration::from_millis(250),
                ),
            ],
        }),
        ..measured(p50_us, per_second, None)
    }
}

/// Ferry's p50 at 2.5x the split relay's (target missed), its throughput 55% of it and
/// 11,000/s (both met).
pub fn writes_report() -> Report {
    Report {
        quick: true,
        plan: "plan".into(),
        floor: Sample::from_latencies(vec![Duration::from_micros(200)], Duration::from_secs(1)),
        bare: vec![
            (Layout::Split, measured_with_cpu(100, 20_000)),
            (Layout::PerProcess, measured_with_cpu(300, 12_000)),
        ],
        ferry: Ok(measured_with_cpu(250, 11_000)),
        ferry_layout: "2 processes".into(),
        load_before: "0".into(),
        load_after: "0".into(),
        others_cores: Some(0.1),
    }
}

/// Against the split layout: cache-hit p50 1.2x (met), owner-read p50 1.6x and throughput 40%
/// (both missed). Ferry's cache-hit reads all say `X-Ferry-Source: <ferry_hit_source>`.
pub fn reads_report(ferry_hit_source: &str) -> ReadsReport {
    let row = |layout, measured| Row { layout, measured };
    ReadsReport {
        quick: false,
        plan: "plan".into(),
        hits: vec![
            row(Layout::Split, measured(100, 30_000, None)),
            row(Layout::PerProcess, measured(120, 40_000, None)),
        ],
        owner_reads: vec![
            row(Layout::Split, measured_with_cpu(200, 20_000)),
            row(Layout::PerProcess, measured_with_cpu(250, 16_000)),
        ],
        ferry_hits: Ok(measured(120, 24_000, Some(ferry_hit_source))),
        // The same 750 ms of CPU over 8,000 reads: 2.5x the split relay's per read.
        ferry_owner_reads: Ok(Measured {
            cpu: measured_with_cpu(320, 8_000).cpu,
            ..measured(320, 8_000, Some("owner"))
        }),
        ferry_notes: Vec::new(),
        ferry_layout: "2 processes".into(),
        load_before: "0".into(),
        load_after: "0".into(),
        others_cores: Some(0.1),
    }
}
