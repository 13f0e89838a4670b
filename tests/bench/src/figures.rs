//! Figures as the markdown reports show them to people: `412 us`, `12,345/s`, text fit for a
//! table cell. (The JSON carries the raw numbers instead.)

use std::time::Duration;

/// `text` fit for one markdown table cell: no `|`, on one line.
pub fn cell(text: &str) -> String {
    text.replace('|', "/").replace('\n', " ")
}

/// `412 us` below 1 ms, `2.21 ms` above.
pub fn latency(value: Option<Duration>) -> String {
    match value {
        None => "-".into(),
        Some(d) if d < Duration::from_millis(1) => format!("{} us", d.as_micros()),
        Some(d) => format!("{:.2} ms", d.as_secs_f64() * 1000.0),
    }
}

/// Whole requests per second with thousands separated: `12,345/s`.
pub fn rate(per_second: f64) -> String {
    format!("{}/s", count(per_second.round() as u64))
}

/// A count with thousands separated: `12,345`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    // The first group holds 1 to 3 digits, every later one exactly 3.
    let first = match digits.len() % 3 {
        0 => 3.min(digits.len()),
        n => n,
    };
    let (head, rest) = digits.split_at(first);
    let mut grouped = head.to_string();
    for group in rest.as_bytes().chunks(3) {
        grouped.push(',');
        grouped.push_str(&String::from_utf8_lossy(group));
    }
    grouped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_formatted_for_people() {
        assert_eq!(latency(Some(Duration::from_micros(412))), "412 us");
        assert_eq!(latency(Some(Duration::from_micros(12_346))), "12.35 ms");
        assert_eq!(latency(None), "-");
        assert_eq!(rate(12_345.4), "12,345/s");
        assert_eq!(rate(999.0), "999/s");
        assert_eq!(rate(0.2), "0/s");
        assert_eq!(rate(1000.0), "1,000/s");
        assert_eq!(rate(1_000_000.0), "1,000,000/s");
        assert_eq!(count(0), "0");
        assert_eq!(count(12_345), "12,345");
    }
}
