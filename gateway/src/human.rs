//! Durations as people read them, for the CLI and for `ferry doctor`'s findings (a module of
//! its own so neither has to import the other).

use std::time::Duration;

/// A duration as a person reads it: `850 ms`, `12 s`, `3 min 20 s`, `2 h 5 min`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{} ms", d.as_millis()),
        1..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s / 60) % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human(Duration::from_millis(850)), "850 ms");
        assert_eq!(human(Duration::from_secs(12)), "12 s");
        assert_eq!(human(Duration::from_secs(200)), "3 min 20 s");
        assert_eq!(human(Duration::from_secs(7_500)), "2 h 5 min");
    }
}
